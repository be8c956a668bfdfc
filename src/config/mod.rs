//! Configuration: the TOML file as written (`file`), its validation with file/line errors, and the
//! typed runtime settings the engine uses (`Settings`).

mod classes;
mod error;
mod error_views;
mod file;
#[cfg(feature = "gateway")]
mod gateway;
mod launch;
mod live;
mod load;
mod local_agent;
mod model_fallback;
mod nesting;
mod net;
mod origin;
mod queue_caps;
mod resilience;
mod restart;
mod team;
mod upstream_index;
mod upstream_net;

/// Shared with policy and the status document (see [`crate::view`]).
pub use crate::view::ShareMode;
pub use classes::{
    classify, default_routes, route, ClassSettings, ClassTable, Family, Route, RouteClass,
    RouteRule,
};
pub use error::ConfigError;
pub use file::FileConfig;
#[cfg(feature = "gateway")]
pub use gateway::{Cidr, GatewaySettings, PgSslMode, PostgresSettings};
pub use launch::{resolve, Launch, LaunchArgs};
pub use live::LiveSettings;
pub use load::{load_file, parse_str, DEFAULT_UPSTREAMS};
pub use local_agent::{fill as local_agent_fill, LocalAgentSettings, PLACEHOLDERS};
pub use model_fallback::{
    is_model_name, rule_for as model_fallback_rule, ModelFallbackRule, MAX_MODEL_NAME,
};
pub use net::{read_roots, HostPort, UpstreamNet, UpstreamProxy};
pub use origin::Origin;
pub use queue_caps::QueueCaps;
pub use resilience::ResilienceSettings;
pub use restart::{restart_required, RestartKey};
pub use team::{TeamAction, TeamSettings};
pub use upstream_index::UpstreamIndex;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The fixed, documented default port: "weir" on a phone keypad (9-3-4-7).
pub const DEFAULT_PORT: u16 = 9347;

/// Validated runtime settings. Built from a [`FileConfig`] by [`Settings::from_file`].
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: Option<PathBuf>,
    pub upstreams: Vec<UpstreamSettings>,
    pub routes: Vec<classes::RouteRule>,
    pub classes: classes::ClassTable,
    pub limits: Limits,
    pub cache_max_bytes: u64,
    /// Budget of the encrypted disk cache (`cache.disk_max_bytes`); `None` when
    /// `cache.persist = false` (memory only).
    pub cache_disk_max_bytes: Option<u64>,
    /// Request headers that change the response and so are part of the cache/coalescing key.
    pub key_headers: Vec<http::HeaderName>,
    /// TLS-terminate CONNECTs to managed https upstreams when the local CA is loaded.
    pub intercept: bool,
    /// Weir's own upstream connections go through this proxy (CONNECT), except `connect_to`.
    pub upstream_proxy: Option<UpstreamProxy>,
    pub resilience: ResilienceSettings,
    pub queue: QueueSettings,
    /// `[secrets] store`: the OS keychain, owner-only files, or (auto) files only where there
    /// is no keychain.
    pub secrets_store: crate::secrets::StoreChoice,
    pub offline: OfflineSettings,
    /// `[network]`: where the metered state comes from.
    pub network: NetworkSettings,
    /// The GitHub Status watcher's settings; `None` when turned off.
    pub github_status: Option<weir_status::StatusConfig>,
    /// Unmanaged requests and CONNECTs may reach loopback, link-local and private addresses
    /// (off by default: Weir is not a way into this machine or its network).
    pub allow_private_targets: bool,
    /// `[identity] share`: which credentials share list/view answers.
    pub share: ShareMode,
    /// `[team]`: outage signals shared with teammates' Weirs over NATS; `None` when off.
    pub team: Option<TeamSettings>,
    /// `[gateway]`, used only by `weir serve --gateway` (feature `gateway`).
    #[cfg(feature = "gateway")]
    pub gateway: Option<GatewaySettings>,
    /// `[local_agent]`: where a create may be handed when policy says `local` (#14); `None`:
    /// nothing is ever offered or run. Applies live (read per offer and per confirmation).
    pub local_agent: Option<LocalAgentSettings>,
    /// `[[model_fallback]]` rules, in order (empty: model fallback is off).
    pub model_fallback: Vec<ModelFallbackRule>,
    /// `[[policy]]` rules, the org policy file's above them (read with the settings, so a
    /// change applies on the next request).
    pub policy: crate::policy::PolicySet,
}

/// `[queue]`: the durable create queue.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// `"keychain"` (default) or `"memory"`: where replay credentials live. With `"memory"`
    /// Weir queues even without a keychain, but credentials do not survive a restart.
    pub memory_credentials: bool,
    pub max_age: Duration,
    pub dedupe_window: Duration,
    /// How a create Weir queued is answered (`[queue] answer`).
    pub answer: QueueAnswer,
    /// How much may wait in the queue (`[queue] max_items`, …).
    pub caps: QueueCaps,
    /// The in-doubt lookups' bound: at most `lookup_reads` upstream reads per upstream and
    /// credential in each `lookup_window` (`[queue] lookup_reads`, `lookup_window`).
    pub lookup_reads: u32,
    pub lookup_window: Duration,
}

/// `[queue] answer`: what a client is told when Weir queues its create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueAnswer {
    /// `201` with a job object in the upstream's shape (`status: "queued"`, provisional
    /// `job_id`/`session_id` Weir answers for), which `gh agent-task` and VS Code accept.
    #[default]
    Job,
    /// `202 Accepted` with Weir's queue entry, for clients that understand it.
    Accepted,
}

/// `[offline]`: in automatic mode, Weir goes offline by itself when every managed upstream is
/// unreachable at the network level, and probes its way out (see `crate::mode`).
#[derive(Debug, Clone)]
pub struct OfflineSettings {
    /// Detect offline at all (`false`: automatic mode never goes offline by itself).
    pub detect: bool,
    /// Probe delays: `min(probe_cap, probe_base · 2^n)`, jittered in its upper half.
    pub probe_base: Duration,
    pub probe_cap: Duration,
    pub jitter: bool,
}

/// `[network]`: the OS's metered report (`crate::network`); read when the engine starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSettings {
    /// Ask the OS at all (`false`: only the override says "metered").
    pub detect_os: bool,
    /// Linux: the D-Bus address to find NetworkManager on; `None`: `WEIR_SYSTEM_BUS_ADDRESS`,
    /// else the system bus.
    pub system_bus_address: Option<String>,
}

#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub name: String,
    pub origin: Origin,
    pub fallback: Option<Origin>,
    pub net: UpstreamNet,
    /// GitHub Status components whose trouble makes this upstream's breaker cautious.
    pub status_components: Vec<String>,
}

/// The GitHub Status components watched for an origin when the config names none: Copilot for
/// `*.githubcopilot.com`, API Requests for `api.github.com`, nothing for anything else.
pub fn default_status_components(origin: &Origin) -> Vec<String> {
    let host = origin.host().to_ascii_lowercase();
    let names: &[&str] = if is_copilot_host(&host) {
        &["Copilot"]
    } else if host == "api.github.com" {
        &["API Requests"]
    } else {
        &[]
    };
    names.iter().map(|n| n.to_string()).collect()
}

/// The domain of the Copilot API hosts. Its hosts announced in a token answer's
/// `endpoints.api` (or gh's GraphQL `copilotEndpoints`) are managed at run time; no host
/// outside it is ever learned.
pub const COPILOT_DOMAIN: &str = "githubcopilot.com";

/// Whether `host` is `githubcopilot.com` or one of its subdomains (case-insensitive).
pub fn is_copilot_host(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == COPILOT_DOMAIN || h.ends_with(".githubcopilot.com")
}

/// Caps that protect Weir from bad or hostile clients.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
    /// A request head must come within this long: the first on a new connection, and the next
    /// on an idle one (HTTP/1.1 by hyper; HTTP/2 counted from its last stream's end,
    /// `server::idle`).
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub drain_timeout: Duration,
    /// A blind tunnel with no byte either way for this long is closed; `None` (`"0s"`) never.
    pub tunnel_idle_timeout: Option<Duration>,
}

impl Settings {
    /// Whether `host:port` is a managed upstream's origin, in either scheme (a CONNECT names
    /// no scheme).
    pub fn is_managed_authority(&self, host: &str, port: u16) -> bool {
        self.upstream_for("https", host, port).is_some()
            || self.upstream_for("http", host, port).is_some()
    }

    /// The upstream whose origin matches `scheme://host[:port]`, if Weir manages it.
    pub fn upstream_for(&self, scheme: &str, host: &str, port: u16) -> Option<UpstreamIndex> {
        self.upstreams
            .iter()
            .position(|u| u.origin.matches(scheme, host, port))
            .map(UpstreamIndex::at)
    }

    /// The configured upstream called `name`.
    pub fn upstream_named(&self, name: &str) -> Option<UpstreamIndex> {
        self.upstreams
            .iter()
            .position(|u| u.name == name)
            .map(UpstreamIndex::at)
    }

    /// The names Weir's local CA may issue for (its X.509 name constraints, each covering its
    /// subdomains): `githubcopilot.com` when any managed `https://` upstream is one of its hosts
    /// (so the per-plan hosts learned at run time are covered too, see `docs/hosts.md`), and the
    /// host of every other managed `https://` upstream. IP literals are left out (a
    /// name-constrained CA never covers addresses).
    pub fn intercept_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for u in &self.upstreams {
            let h = u.origin.host();
            if u.origin.scheme() != origin::Scheme::Https || h.parse::<std::net::IpAddr>().is_ok() {
                continue;
            }
            let name = if is_copilot_host(h) {
                COPILOT_DOMAIN.to_string()
            } else {
                h.to_string()
            };
            if !hosts.contains(&name) {
                hosts.push(name);
            }
        }
        hosts
    }
}

/// `host:port` for a listen address (brackets around IPv6): Weir's own address as clients and
/// URLs spell it.
pub fn host_for(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        std::net::IpAddr::V4(v4) => format!("{v4}:{port}"),
    }
}
