//! The configuration file exactly as written. Every key is optional; unknown keys are errors
//! (a typo must not silently fall back to a default).

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<Spanned<String>>,
    pub data_dir: Option<Spanned<String>>,
    #[serde(default)]
    pub upstream: Vec<FileUpstream>,
    /// `false`: only the `[[upstream]]` tables written here, none of the built-in hosts
    /// (default true: the built-ins, merged by name with the tables written here).
    pub default_upstreams: Option<Spanned<bool>>,
    #[serde(default)]
    pub route: Vec<FileRoute>,
    #[serde(default)]
    pub classes: FileClasses,
    #[serde(default)]
    pub limits: FileLimits,
    #[serde(default)]
    pub cache: FileCache,
    /// TLS interception of managed https upstreams (default true); see `crate::intercept`.
    pub intercept: Option<Spanned<bool>>,
    /// `http://host:port`: Weir's own upstream connections go through this proxy (CONNECT).
    pub upstream_proxy: Option<Spanned<String>>,
    #[serde(default)]
    pub breaker: super::resilience::FileBreaker,
    #[serde(default)]
    pub retry: super::resilience::FileRetry,
    #[serde(default)]
    pub bulkhead: super::resilience::FileBulkhead,
    #[serde(default)]
    pub rate_limit: super::resilience::FileRateLimit,
    #[serde(default)]
    pub queue: FileQueue,
    /// `[secrets]`: which store keeps Weir's secrets (`crate::secrets::choose`).
    #[serde(default)]
    pub secrets: FileSecrets,
    /// `[offline]`: automatic mode's offline detection and probing (`crate::mode`).
    #[serde(default)]
    pub offline: FileOffline,
    #[serde(default)]
    pub identity: FileIdentity,
    /// `[network]`: where the metered state comes from (`crate::network`).
    #[serde(default)]
    pub network: FileNetwork,
    /// GitHub Status watcher (`[status]`, see the `weir-status` crate); `watch_github_status =
    /// false` turns it off.
    pub status: Option<Spanned<weir_status::StatusSettings>>,
    pub watch_github_status: Option<bool>,
    /// Unmanaged requests and tunnels may reach loopback, link-local and private addresses.
    pub allow_private_targets: Option<bool>,
    /// Team outage signals over NATS (`[team]`, see docs/team.md).
    pub team: Option<Spanned<super::team::FileTeam>>,
    /// Team gateway mode (`weir serve --gateway`); see `config::gateway`.
    #[cfg(feature = "gateway")]
    pub gateway: Option<Spanned<super::gateway::FileGateway>>,
    /// Without the `gateway` feature the table is only located, so that naming it is an error
    /// with its line and the feature to build (`config::load`), not an unknown key.
    #[cfg(not(feature = "gateway"))]
    pub gateway: Option<Spanned<toml::Value>>,
    /// The local agent a create may be handed to (`[local_agent]`, docs/handoff.md).
    pub local_agent: Option<Spanned<super::local_agent::FileLocalAgent>>,
    /// `[[model_fallback]]`: completion requests re-sent with another model (docs/model-fallback.md).
    #[serde(default)]
    pub model_fallback: Vec<super::model_fallback::FileModelFallback>,
    /// `[[policy]]`: the fallback policy graph (see `crate::policy`, docs/policy.md).
    #[serde(default)]
    pub policy: Vec<Spanned<crate::policy::FilePolicyRule>>,
    /// The organisation's policy file, where no managed one sits at the OS path.
    pub policy_file: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQueue {
    pub credentials: Option<Spanned<String>>,
    pub max_age: Option<Spanned<String>>,
    pub dedupe_window: Option<Spanned<String>>,
    /// `"job"` (default) or `"accepted"`: how a queued create is answered.
    pub answer: Option<Spanned<String>>,
    /// Caps on the live items, in all and per credential (`QueueCaps`).
    pub max_items: Option<Spanned<i64>>,
    pub max_bytes: Option<Spanned<i64>>,
    pub max_items_per_identity: Option<Spanned<i64>>,
    pub max_bytes_per_identity: Option<Spanned<i64>>,
    /// The in-doubt lookups' reads per upstream and credential per `lookup_window`.
    pub lookup_reads: Option<Spanned<i64>>,
    pub lookup_window: Option<Spanned<String>>,
}

/// `[secrets]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSecrets {
    /// `"auto"` (default), `"keychain"` or `"file"`.
    pub store: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOffline {
    pub detect: Option<bool>,
    pub probe_base: Option<Spanned<String>>,
    pub probe_cap: Option<Spanned<String>>,
    pub jitter: Option<bool>,
}

/// `[network]`: the OS's metered report.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileNetwork {
    /// Ask the OS whether the network is metered (default true; the OS readers are the
    /// `metered` feature).
    pub detect_os: Option<bool>,
    /// D-Bus address of the system bus to ask NetworkManager on (Linux).
    pub system_bus_address: Option<Spanned<String>>,
}

/// `[identity]`: whether credentials of one GitHub account share list/view answers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIdentity {
    /// `"account"` (default) or `"credential"`.
    pub share: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    pub name: Spanned<String>,
    /// Required, except for a built-in upstream's name (then its origin when left out).
    pub origin: Option<Spanned<String>>,
    /// `false` removes this upstream (a built-in one included) from the managed set.
    pub enabled: Option<Spanned<bool>>,
    /// Tried once after a retryable failure of `origin`, or while its breaker is open.
    pub fallback: Option<Spanned<String>>,
    /// `host:port` the TCP connection goes to instead (SNI and Host stay the origin's).
    pub connect_to: Option<Spanned<String>>,
    /// PEM file of extra root certificates trusted for this upstream.
    pub ca_file: Option<Spanned<String>>,
    /// GitHub Status components whose incidents make this upstream's breaker cautious
    /// (default by origin: Copilot for api.githubcopilot.com, API Requests for api.github.com).
    pub status_components: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRoute {
    pub method: Spanned<String>,
    pub path: Spanned<String>,
    pub class: Spanned<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileClasses {
    pub list: Option<FileClass>,
    pub view: Option<FileClass>,
    pub token: Option<FileClass>,
    pub stream: Option<FileClass>,
    pub create: Option<FileClass>,
    pub other: Option<FileClass>,
    pub model: Option<FileClass>,
}

/// Durations are written like `15s`, `500ms`, `2m`, `24h`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileClass {
    pub fresh_ttl: Option<Spanned<String>>,
    pub stale_while_revalidate: Option<Spanned<String>>,
    /// How long a request that finds a stale copy waits for its refresh ("0s": not at all).
    pub revalidate_wait: Option<Spanned<String>>,
    pub stale_if_error: Option<Spanned<String>>,
    pub token_margin: Option<Spanned<String>>,
    /// Timeout of one upstream attempt (until the response headers).
    pub per_try_timeout: Option<Spanned<String>>,
    /// Overall time for all attempts, retries and backoff included.
    pub deadline: Option<Spanned<String>>,
    /// A call slower than this counts as slow for the breaker, even when it succeeds.
    pub slow_call: Option<Spanned<String>>,
    /// The class's normal latency: the breaker's baseline until it has learned one ("0s": none).
    pub normal_latency: Option<Spanned<String>>,
    /// While the upstream is slow or failing, each key is refreshed at most this often.
    pub degraded_refresh: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLimits {
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_body_bytes: Option<Spanned<i64>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub drain_timeout: Option<Spanned<String>>,
    pub tunnel_idle_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCache {
    pub max_bytes: Option<Spanned<i64>>,
    /// Keep list/view answers on disk, encrypted, across restarts (default true).
    pub persist: Option<Spanned<bool>>,
    /// Budget of the disk cache's records (default 64 MiB).
    pub disk_max_bytes: Option<Spanned<i64>>,
    pub key_headers: Option<Spanned<Vec<String>>>,
}
