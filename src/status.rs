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
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueStatus {
    pub available: bool,
    pub error: Option<String>,
    pub credentials: crate::secrets::Backend,
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
    /// Whether cached list/view answers survive a restart (and if not, why).
    pub persistence: CachePersistence,
}

/// Whether the cache is kept on disk (encrypted) or in memory only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CachePersistence {
    /// List and view answers are sealed (AES-256-GCM, key in the keychain) into `file`.
    Persisted {
        file: String,
        /// Rows and bytes of records on disk, and the budget (`cache.disk_max_bytes`).
        entries: u64,
        bytes: u64,
        max_bytes: u64,
        /// Entries loaded from disk when Weir started.
        loaded_at_start: u64,
        /// Records that did not open (tampered, or sealed with another key) and were dropped.
        rejected_at_start: u64,
        /// Writes dropped because the writer was behind (the entries stayed in memory).
        dropped_writes: u64,
    },
    /// Cached answers are lost on restart; `detail` says why and what to do.
    MemoryOnly {
        reason: MemoryOnlyReason,
        detail: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryOnlyReason {
    /// `cache.persist = false`.
    Disabled,
    /// No OS keychain to hold the sealing key.
    NoKeychain,
    /// The keychain is there but could not read or store the key now.
    KeychainError,
    /// The cache file could not be opened.
    OpenFailed,
    /// Writing failed (a full disk, an unwritable file): off until restart.
    WriteFailed,
}
