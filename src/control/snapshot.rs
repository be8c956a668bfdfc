//! Builds the typed status document ([`crate::status`]) from the engine's parts.

use super::Control;
use crate::pipeline::host_for;
use crate::status::{CacheStatus, QueueStatus, StatusSnapshot, UpstreamStatus};

/// The status document, with the queue counts read from SQLite (off the async workers).
pub async fn snapshot_full(ctl: &Control) -> StatusSnapshot {
    let mut s = snapshot(ctl);
    if let Some(q) = ctl.proxy.queue.open() {
        match q.store.counts().await {
            Ok(c) => s.queue.counts = Some(c),
            // The store does not answer (a gateway's PostgreSQL down, a damaged file): the
            // status says so, as a create's 503 does, rather than "available" with no counts.
            Err(e) => {
                s.queue.available = false;
                s.queue
                    .error
                    .get_or_insert_with(|| format!("{e}. {}", e.fix()));
            }
        }
    }
    s.github_token_stored = ctl.token_stored.load(std::sync::atomic::Ordering::Relaxed);
    s
}

/// Takes what names people and private repositories out of a status document, for callers
/// without the control secret: account logins and ids (counts stay), and the repositories of
/// recent policy decisions (the rule and its reason stay).
pub fn redact_private(s: &mut StatusSnapshot) {
    for a in &mut s.identity.accounts {
        a.login.clear();
        a.account_id = 0;
    }
    for d in &mut s.policy.recent {
        d.repo = None;
    }
}

/// The status document without a database read (for the once-a-second stream).
pub fn snapshot(ctl: &Control) -> StatusSnapshot {
    use std::sync::atomic::Ordering::Relaxed;
    let p = &ctl.proxy;
    // Copilot API hosts learned at run time follow the configured upstreams.
    let learned = p.upstreams.learned.iter().map(|(_, u)| u);
    let upstreams = p
        .upstreams
        .list
        .iter()
        .chain(learned)
        .map(|st| (&st.settings, st))
        .map(|(cfg, st)| UpstreamStatus {
            name: cfg.name.clone(),
            origin: cfg.origin.to_string(),
            classes: st.counters.classes(),
            totals: st.counters.totals(),
            errors_by_kind: st.counters.errors_by_kind(),
            fallback: cfg.fallback.as_ref().map(|f| f.to_string()),
            fallback_attempts: st.fallback_attempts.load(Relaxed),
            guard: st.gate.status(),
        })
        .collect::<Vec<_>>();
    let saved = saved_lately(ctl, &upstreams);
    StatusSnapshot {
        version: env!("CARGO_PKG_VERSION"),
        listen: host_for(p.settings().listen.ip(), p.port),
        dashboard: format!("{}/_weir/", p.base_url),
        mode: p.modes.status(),
        network: p.network.status(),
        paused: p.is_paused(),
        started_at: crate::time_fmt::rfc3339(ctl.started_at),
        upstreams,
        surfaces: p.global.surfaces(),
        passthrough_requests: p.global.passthrough_requests.load(Relaxed),
        tunnels: p.global.tunnels.load(Relaxed),
        tunnel_bytes: crate::status::TunnelBytesStatus {
            up: p.global.tunnel_bytes.up.load(Relaxed),
            down: p.global.tunnel_bytes.down.load(Relaxed),
        },
        interception: p.intercept.as_ref().map(|i| i.status()),
        rejected: p.global.rejected.load(Relaxed),
        cache: CacheStatus {
            entries: p.cache.entry_count(),
            bytes: p.cache.weighted_size(),
            max_bytes: p.settings().cache_max_bytes,
            in_flight: p.coalescer.in_flight(),
            persistence: p.cache.persistence(),
        },
        github: ctl.github_snapshot(),
        github_token_stored: false,
        settings: ctl.reload.status(),
        identity: p.accounts.status(),
        #[cfg(feature = "team")]
        team: ctl.team.get().map(|t| t.status()),
        #[cfg(not(feature = "team"))]
        team: None,
        sessions: ctl.sessions.status(),
        gateway: ctl.gateway.clone(),
        handoffs: p.handoffs.status(),
        models: p.upstreams.models.status(),
        policy: policy_status(p),
        saved,
        queue: QueueStatus {
            available: p.queue.open().is_some_and(|q| q.store.unusable().is_none()),
            error: p
                .queue
                .error()
                .map(str::to_string)
                .or_else(|| p.queue.open().and_then(|q| q.store.unusable())),
            credentials: p
                .queue
                .open()
                .map_or(crate::secrets::Backend::Unavailable, |q| {
                    q.credentials_kind()
                }),
            backend: p.queue.open().map(|q| q.store.kind()),
            counts: None,
        },
    }
}

/// The last hour's savings, from the upstreams' totals and the queue's count of creates kept.
fn saved_lately(ctl: &Control, upstreams: &[UpstreamStatus]) -> crate::status::SavedStatus {
    use std::sync::atomic::Ordering::Relaxed;
    let mut totals = super::saved::SavedTotals {
        kept: ctl.proxy.queue.open().map_or(0, |q| q.kept.load(Relaxed)),
        ..Default::default()
    };
    for u in upstreams {
        let t = &u.totals;
        totals.avoided += t.cache_hits_fresh + t.cache_hits_stale + t.coalesced;
        totals.hidden += t.cache_hits_stale;
    }
    ctl.saved.observe(std::time::Instant::now(), totals)
}

/// The fallback policy's part of the status.
fn policy_status(p: &crate::pipeline::Proxy) -> crate::status::PolicyStatus {
    let settings = p.settings();
    let set = &settings.policy;
    crate::status::PolicyStatus {
        org_file: set.org_file.clone(),
        org_rules: set.org.len(),
        user_rules: set.user.len(),
        refused: set.refused.clone(),
        metered: p.network.metered(),
        decisions: p.policy_log.count(),
        recent: p.policy_log.recent(),
    }
}
