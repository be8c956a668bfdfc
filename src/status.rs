//! The typed status document: what `/_weir/api/status` serves, what the tray and the dashboard
//! read. Built from the engine's parts; public so consumers use these types, not JSON keys.

use crate::engine::Shared;
use crate::stats::ClassSnapshot;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct StatusSnapshot {
    pub version: &'static str,
    pub listen: String,
    pub dashboard: String,
    pub paused: bool,
    pub started_at: String,
    pub upstreams: Vec<UpstreamStatus>,
    pub surfaces: BTreeMap<&'static str, u64>,
    pub passthrough_requests: u64,
    pub tunnels: u64,
    pub rejected: u64,
    pub cache: CacheStatus,
    pub queue: QueueStatus,
    /// GitHub Status (watched components and incidents); `null` when the watcher is off.
    pub github: Option<weir_status::GithubStatus>,
    /// Whether a GitHub token is stored in the keychain (the token is never shown).
    pub github_token_stored: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueStatus {
    pub available: bool,
    pub error: Option<String>,
    pub credentials: &'static str,
    #[serde(flatten)]
    pub counts: Option<weir_store::StateCounts>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    pub name: String,
    pub origin: String,
    pub classes: BTreeMap<&'static str, ClassSnapshot>,
    pub totals: ClassSnapshot,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub fallback: Option<String>,
    pub fallback_attempts: u64,
    #[serde(flatten)]
    pub guard: crate::resilience::GuardStatus,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub in_flight: usize,
}

/// The status document, with the queue counts read from SQLite (off the async workers).
pub async fn snapshot_full(shared: &Shared) -> StatusSnapshot {
    let mut s = snapshot(shared);
    if let Some(q) = &shared.queue {
        s.queue.counts = q.store.counts().await.ok();
    }
    s.github_token_stored = shared
        .token_stored
        .load(std::sync::atomic::Ordering::Relaxed);
    s
}

/// The status document without a database read (for the once-a-second stream).
pub fn snapshot(shared: &Shared) -> StatusSnapshot {
    use std::sync::atomic::Ordering::Relaxed;
    let upstreams = shared
        .settings
        .upstreams
        .iter()
        .zip(&shared.upstreams)
        .map(|(cfg, st)| UpstreamStatus {
            name: cfg.name.clone(),
            origin: cfg.origin.to_string(),
            classes: st.counters.classes(),
            totals: st.counters.totals(),
            errors_by_kind: st.counters.errors_by_kind(),
            fallback: cfg.fallback.as_ref().map(|f| f.to_string()),
            fallback_attempts: st.fallback_attempts.load(Relaxed),
            guard: st.guard.status(),
        })
        .collect();
    StatusSnapshot {
        version: env!("CARGO_PKG_VERSION"),
        listen: crate::control::host_for(shared.settings.listen.ip(), shared.port),
        dashboard: format!("{}/_weir/", shared.base_url),
        paused: shared.is_paused(),
        started_at: crate::time_fmt::rfc3339(shared.started_at),
        upstreams,
        surfaces: shared.global.surfaces(),
        passthrough_requests: shared.global.passthrough_requests.load(Relaxed),
        tunnels: shared.global.tunnels.load(Relaxed),
        rejected: shared.global.rejected.load(Relaxed),
        cache: CacheStatus {
            entries: shared.cache.entry_count(),
            bytes: shared.cache.weighted_size(),
            max_bytes: shared.settings.cache_max_bytes,
            in_flight: shared.coalescer.in_flight(),
        },
        github: shared
            .github
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|h| h.snapshot())),
        github_token_stored: false,
        queue: QueueStatus {
            available: shared.queue.is_some(),
            error: shared.queue_error.clone(),
            credentials: shared
                .queue
                .as_ref()
                .map(|q| q.secrets.backend())
                .unwrap_or("unavailable"),
            counts: None,
        },
    }
}
