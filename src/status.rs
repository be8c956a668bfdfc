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
    /// Team outage signals (`[team]`); `null` when off.
    pub team: Option<TeamStatus>,
}

/// `team` in the status document: the NATS link and what teammates report.
#[derive(Debug, Clone, Serialize)]
pub struct TeamStatus {
    pub link: TeamLink,
    pub connected: bool,
    /// The NATS server (`nats://host:port`; credentials never appear in it).
    pub server: String,
    /// Why the link is down, or why team signals are off (e.g. no team key), in words.
    pub error: Option<String>,
    pub action: crate::config::TeamAction,
    pub peers_needed: usize,
    pub window_s: f64,
    /// Distinct teammates heard from within the window.
    pub peers_seen: usize,
    pub published: u64,
    pub received: u64,
    /// Messages ignored: bad signature, malformed, too old, replayed.
    pub rejected: u64,
    /// Half-open rounds skipped because K teammates' own calls confirmed the failure after
    /// this Weir's breaker opened (the breaker started its next wait instead of probing).
    pub probes_stood_in: u64,
    pub upstreams: Vec<TeamUpstreamStatus>,
    /// One line for the tray, e.g. "3 teammates see copilot-api failing"; `null` when no
    /// teammate reports a failing upstream.
    pub summary: Option<String>,
}

/// The team link's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TeamLink {
    Connected,
    /// Not connected (never yet, or lost): Weir works alone and keeps retrying.
    Disconnected,
    /// No team key in the keychain: nothing is published or believed.
    NoKey,
}

/// `team.upstreams[]`: what teammates say about one upstream and what this Weir does.
#[derive(Debug, Clone, Serialize)]
pub struct TeamUpstreamStatus {
    pub name: String,
    /// Distinct teammates reporting it failing (open or degraded) within the window.
    pub peers_failing: usize,
    /// This Weir acts on their reports now (cautious breaker, or opened it).
    pub acting: bool,
    /// Local calls succeeded, so this Weir ignores the reports until they change.
    pub overruled: bool,
    /// The end of an upstream-wide pause a teammate was asked for, while it lasts.
    pub pause_until: Option<String>,
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
