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
    /// Credentials by GitHub account (logins, never tokens) and the sharing setting.
    pub identity: IdentityStatus,
}

pub use crate::accounts::TokenKind;

/// `[identity]` at work: which accounts the credentials seen belong to, and how resolution
/// went.
#[derive(Debug, Clone, Serialize)]
pub struct IdentityStatus {
    pub share: crate::config::ShareMode,
    /// A `github-api` upstream is configured, so credentials can be resolved at all.
    pub resolver: bool,
    pub accounts: Vec<AccountStatus>,
    /// `/user` resolutions that named an account, failed (no answer to go by), or were
    /// refused (401).
    pub resolved: u64,
    pub failed: u64,
    pub unauthorized: u64,
}

/// One GitHub account behind some of the credentials seen.
#[derive(Debug, Clone, Serialize)]
pub struct AccountStatus {
    pub login: String,
    pub account_id: u64,
    /// Credentials (distinct tokens) mapped to this account.
    pub credentials: u64,
    pub token_kinds: Vec<TokenKind>,
    /// Requests to managed upstreams made with this account's mapped credentials.
    pub requests: u64,
    /// Requests Weir sent upstream with them (shared answers make this the smaller number).
    pub upstream_requests: u64,
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
}
