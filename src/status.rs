//! The typed status document: what `/_weir/api/status` serves, what the tray and the dashboard
//! read. Built from the engine's parts; public so consumers use these types, not JSON keys.

pub use crate::accounts::{AccountStatus, IdentityStatus, TokenKind};
use crate::stats::ClassSnapshot;
pub use crate::upstream::{
    BreakerView, Caution, CautionSource, ClassLatencyView, GateStatus, ModelEpisode, ModelStatus,
};
pub use crate::view::{SessionGroup, SessionSummary, SettingsError, SettingsSource};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct StatusSnapshot {
    pub version: &'static str,
    pub listen: String,
    pub dashboard: String,
    /// What Weir does with managed requests and why (automatic, offline, cache only,
    /// pass-through).
    pub mode: crate::mode::ModeStatus,
    /// Whether the network counts as metered, from where (the override, the OS) and why.
    pub network: crate::network::NetworkStatus,
    /// `mode.mode == pass_through` (pass-through was called "pause").
    pub paused: bool,
    pub started_at: String,
    pub upstreams: Vec<UpstreamStatus>,
    pub surfaces: BTreeMap<&'static str, u64>,
    pub passthrough_requests: u64,
    pub tunnels: u64,
    /// Bytes blind tunnels moved: `up` client to target, `down` target to client.
    pub tunnel_bytes: TunnelBytesStatus,
    /// TLS interception's counts; `null` when interception is off.
    pub interception: Option<crate::intercept::InterceptionStatus>,
    pub rejected: u64,
    pub cache: CacheStatus,
    pub queue: QueueStatus,
    /// GitHub Status (watched components and incidents); `null` when the watcher is off.
    pub github: Option<weir_status::GithubStatus>,
    /// Whether a GitHub token is stored in the keychain (the token is never shown).
    pub github_token_stored: bool,
    /// Live settings: where they come from, the last change, what waits for a restart.
    pub settings: SettingsStatus,
    /// Credentials by GitHub account (logins, never tokens) and the sharing setting.
    pub identity: IdentityStatus,
    /// Team outage signals (`[team]`); `null` when off.
    pub team: Option<TeamStatus>,
    /// The agent-sessions companion: the poller's state and the sessions it last saw.
    pub sessions: SessionsStatus,
    /// Team gateway mode (`weir serve --gateway`); `null` for a laptop Weir.
    pub gateway: Option<GatewayStatus>,
    /// Local-agent hand-off offers waiting for the developer, and the last results (#14).
    pub handoffs: HandoffsStatus,
    /// Completion models seen on managed upstreams: each model's own breaker, its fallbacks
    /// and the fallback episode under way (docs/model-fallback.md).
    pub models: Vec<ModelStatus>,
    /// The fallback policy graph: rules per source, refused loosenings, recent decisions.
    pub policy: PolicyStatus,
    /// What Weir saved in the last hour (the dashboard's overview).
    pub saved: SavedStatus,
}

/// `tunnel_bytes` in the status document.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TunnelBytesStatus {
    pub up: u64,
    pub down: u64,
}

/// `saved` in the status document: what Weir spared the developer over the last
/// `window_secs` (an hour once Weir has run that long and the status was read an hour ago;
/// since the start, or since the first read, before that).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SavedStatus {
    pub window_secs: u64,
    /// Requests answered from the cache or by joining an identical call in flight: calls the
    /// upstream never got (`weir_cache_hits_fresh_total`, `weir_cache_hits_stale_total`,
    /// `weir_coalesced_total`).
    pub upstream_calls_avoided: u64,
    /// Requests answered from a stale copy instead of an upstream that was failing, slow or
    /// struggling (`weir_cache_hits_stale_total`; it also counts the few stale answers of
    /// classes that never wait for their refresh, such as tokens past their fresh time).
    pub failures_hidden: u64,
    /// Creates the upstream could not take that Weir stored in its queue to replay.
    pub creates_kept: u64,
}

/// `handoffs` in the status document. Repositories and problem statements are private: they
/// are left out of the JSON (`/_weir/api/status` needs no secret) and served by
/// `GET /_weir/api/handoffs`, which needs the control secret; the tray reads them here,
/// in-process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HandoffsStatus {
    /// A `[local_agent]` command is configured (without one nothing is ever offered).
    pub configured: bool,
    /// Offers waiting for Confirm / Decline, oldest first.
    pub pending: Vec<PendingHandoff>,
    /// The last offers answered (confirmed, declined, expired), newest first (at most
    /// [`RECENT_HANDOFFS`]).
    pub recent: Vec<HandoffResult>,
    /// Totals since the engine started (`/metrics` `weir_handoff_*`).
    pub counts: HandoffCounts,
}

/// How many offers were made and what became of them, since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HandoffCounts {
    pub offered: u64,
    /// Confirmed by the developer (the command started).
    pub confirmed: u64,
    pub declined: u64,
    pub expired: u64,
    /// Confirmed runs that ended with exit code 0.
    pub succeeded: u64,
    /// Confirmed runs that failed, could not start, or timed out.
    pub failed: u64,
}

impl HandoffCounts {
    /// Counts one outcome as the offer goes through it.
    pub(crate) fn count(&mut self, outcome: HandoffOutcome) {
        match outcome {
            HandoffOutcome::Running => self.confirmed += 1,
            HandoffOutcome::Succeeded => self.succeeded += 1,
            HandoffOutcome::Failed => self.failed += 1,
            HandoffOutcome::Declined => self.declined += 1,
            HandoffOutcome::Expired => self.expired += 1,
        }
    }
}

/// How many answered offers the status keeps.
pub const RECENT_HANDOFFS: usize = 10;

/// An offer waiting for the developer's answer.
#[derive(Debug, Clone, Serialize)]
pub struct PendingHandoff {
    /// The offer's id (the create's queue item id): `/_weir/api/handoffs/{id}`.
    pub id: i64,
    /// The policy rule that chose `local`.
    pub rule: String,
    pub offered_at: String,
    /// Seconds since the offer was made.
    pub age_secs: u64,
    /// Seconds until it goes back to the queue unanswered.
    pub expires_in_secs: u64,
    /// `owner/repo` (private: not in the JSON).
    #[serde(skip_serializing)]
    pub repo: String,
    /// The problem statement's first [`EXCERPT_CHARS`] characters (private: not in the JSON).
    #[serde(skip_serializing)]
    pub excerpt: String,
}

/// How many characters of a problem statement an offer shows.
pub const EXCERPT_CHARS: usize = 160;

/// What became of an answered offer.
#[derive(Debug, Clone, Serialize)]
pub struct HandoffResult {
    pub id: i64,
    pub outcome: HandoffOutcome,
    /// The command's exit code, once it ended by itself.
    pub exit_code: Option<i32>,
    pub at: String,
    /// `owner/repo` (private: not in the JSON).
    #[serde(skip_serializing)]
    pub repo: String,
}

/// The end of an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffOutcome {
    /// Confirmed; the local agent command is running.
    Running,
    /// Confirmed; the command ended with exit code 0.
    Succeeded,
    /// Confirmed; the command failed, could not start, or ran past `local_agent.timeout`.
    Failed,
    /// Declined by the developer.
    Declined,
    /// Not answered within `local_agent.offer_ttl`.
    Expired,
}

/// `policy` in the status document.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyStatus {
    /// The organisation's policy file in force (`null`: none).
    pub org_file: Option<String>,
    pub org_rules: usize,
    pub user_rules: usize,
    /// User rules that would loosen an org rule, each naming both rules (file:line).
    pub refused: Vec<crate::policy::Refusal>,
    /// Whether policy sees the network as metered now.
    pub metered: bool,
    /// Requests a rule decided (built-in defaults not counted) since start.
    pub decisions: u64,
    /// The last decisions a rule made, newest first.
    pub recent: Vec<crate::policy::RecentDecision>,
}

/// `settings` in the status document.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SettingsStatus {
    /// The config file watched for changes (and written by the settings API).
    pub config_file: Option<String>,
    /// Whether changes to the file on disk are picked up.
    pub watching: bool,
    /// Changes put in force since start (0: the start-up settings).
    pub version: u64,
    pub applied_at: Option<String>,
    pub applied_from: Option<SettingsSource>,
    /// Settings changed in the file that keep their old value until the engine restarts
    /// (the tray offers **Restart engine** while this is not empty).
    pub restart_required: Vec<crate::config::RestartKey>,
    /// The last change that was refused (the settings in force did not change); cleared by
    /// the next good one.
    pub error: Option<SettingsError>,
}

/// The agent-sessions companion (`crate::sessions`): Weir's own poll of the stored token's
/// session list. Counts and the poller's state are public; the sessions themselves (titles are
/// problem statements, repositories may be private) are left out of the JSON document and
/// served by `GET /_weir/api/sessions`, which needs the control secret. The tray reads them
/// from `recent` in-process.
#[derive(Debug, Clone, Serialize)]
pub struct SessionsStatus {
    pub poller: PollerState,
    /// Why the poller is off, backing off or stopped; `None` while it polls normally.
    pub reason: Option<PollerReason>,
    pub counts: SessionCounts,
    /// The tray's sessions line, e.g. "2 running, 1 ready for review".
    pub summary: String,
    /// List requests the poller sent through Weir (answered from the cache or not).
    pub polls: u64,
    /// Bumps whenever the list Weir holds changes, so a view refetches only then.
    pub revision: u64,
    pub last_polled_at: Option<String>,
    /// When a poll last got a session list.
    pub last_ok_at: Option<String>,
    /// The most recently updated sessions, newest first (at most [`RECENT_SESSIONS`]).
    #[serde(skip_serializing)]
    pub recent: Vec<SessionSummary>,
}

/// How many sessions the status keeps for the tray's submenu and the dashboard's view.
pub const RECENT_SESSIONS: usize = 10;

/// What the sessions poller is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PollerState {
    /// No token is stored (or no keychain): Weir sends nothing.
    Off,
    /// Polling at the list class's fresh TTL.
    Polling,
    /// Polling less often, with jitter, for [`SessionsStatus::reason`].
    BackingOff,
    /// Stopped after repeated 401s; storing a token again restarts it.
    StoppedUnauthorized,
}

/// Why the poller is not polling at its normal interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PollerReason {
    NoToken,
    /// No OS keychain: a token cannot be stored, so there is nothing to poll with.
    NoKeychain,
    /// The keychain did not answer (locked, timed out): asked again every minute.
    KeychainUnavailable,
    /// No managed upstream to poll (none configured).
    NoUpstream,
    BreakerOpen,
    /// GitHub Status shows an unresolved Copilot incident.
    GithubIncident,
    /// The last poll failed (5xx, 429, timeout, connection).
    UpstreamError,
    /// GitHub answered 401: the stored token is not (or no longer) valid.
    Unauthorized,
    /// Weir is paused (everything passes through untouched), so the poller sends nothing.
    Paused,
    /// Weir is offline (every managed upstream unreachable), so the poller sends nothing; it
    /// polls as soon as Weir is back online.
    Offline,
}

/// Sessions of the last list by group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SessionCounts {
    pub running: u32,
    pub ready_for_review: u32,
    pub failed: u32,
    pub finished: u32,
    pub total: u32,
}

impl SessionCounts {
    /// The tray's and dashboard's one-line summary: "2 running, 1 ready for review" (failed
    /// sessions follow; finished ones are not news), "No active sessions" when nothing runs or
    /// waits.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            (self.running, "running"),
            (self.ready_for_review, "ready for review"),
            (self.failed, "failed"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            "No active sessions".to_string()
        } else {
            parts.join(", ")
        }
    }
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
    /// The load balancers whose PROXY protocol headers are read (`gateway.trusted_proxies`);
    /// empty: the option is off and a PROXY header is refused.
    pub trusted_proxies: Vec<String>,
    /// TLS to the shared queue's database (`gateway.postgres_sslmode`); `None` without one.
    #[cfg(feature = "gateway")]
    pub postgres_sslmode: Option<crate::config::PgSslMode>,
    /// The base of the gateway's problem `type` URLs (`gateway.public_url`, else its listener).
    pub public_url: String,
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
