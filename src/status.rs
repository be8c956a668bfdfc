//! The typed status document: what `/_weir/api/status` serves, what the tray and the dashboard
//! read. Built from the engine's parts; public so consumers use these types, not JSON keys.

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
    /// Team gateway mode (`weir serve --gateway`); `null` for a laptop Weir.
    pub gateway: Option<GatewayStatus>,
}

/// A gateway replica as its admin API reports it (no secret, no file contents).
#[derive(Debug, Clone, Serialize)]
pub struct GatewayStatus {
    /// The clients' listener (TLS only).
    pub listen: String,
    /// The admin listener (TLS, admin token).
    pub admin_listen: String,
    /// The networks allowed to use the gateway.
    pub allow: Vec<String>,
    /// This replica's name in queue leases (`host/pid`).
    pub replica: String,
    /// Whether the create queue is shared with other replicas (PostgreSQL).
    pub shared_queue: bool,
    /// Whether CONNECTs to managed https hosts are TLS-terminated with a CA from files shared by
    /// every replica.
    pub shared_intercept_ca: bool,
}

/// Which database holds the create queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueBackend {
    Sqlite,
    Postgresql,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueStatus {
    pub available: bool,
    pub error: Option<String>,
    pub credentials: crate::secrets::Backend,
    /// `sqlite` (one Weir) or `postgresql` (gateway replicas sharing the queue); `null` when
    /// the queue is unavailable.
    pub backend: Option<QueueBackend>,
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
    pub guard: crate::upstream::GateStatus,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub in_flight: usize,
}
