//! The `/_weir/api/status` document (also what the tray and dashboard read).

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
    }
}
