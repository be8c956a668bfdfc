//! Settings that cannot change while Weir runs, and the one rule for telling them apart from
//! the rest: a running engine keeps its current value for each of these (until a restart)
//! and reports the key in `restart_required`; everything else applies on the next request.

use super::Settings;
use serde::Serialize;

/// A setting that needs a restart, named as in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum RestartKey {
    /// The listening socket is bound at start.
    #[serde(rename = "listen")]
    Listen,
    #[serde(rename = "data_dir")]
    DataDir,
    /// Upstream names, origins, fallbacks, `connect_to`, `ca_file`: where credentials go
    /// (and the connection pools, breakers and queue rows keyed by them).
    #[serde(rename = "upstream")]
    Upstreams,
    #[serde(rename = "upstream_proxy")]
    UpstreamProxy,
    /// The local CA's name constraints and the interceptor are made at start.
    #[serde(rename = "intercept")]
    Intercept,
    /// Where replay credentials live is chosen when the queue opens.
    #[serde(rename = "queue.credentials")]
    QueueCredentials,
    #[serde(rename = "queue.max_age")]
    QueueMaxAge,
    /// The secret store is chosen (and the CA key read from it) at start.
    #[serde(rename = "secrets.store")]
    SecretsStore,
    /// The create dedupe window is the lifetime of a cache built at start.
    #[serde(rename = "queue.dedupe_window")]
    QueueDedupeWindow,
    /// The cache's byte budget is fixed when it is built.
    #[serde(rename = "cache.max_bytes")]
    CacheMaxBytes,
    /// The connection limit and the CONNECT tunnel slots are sized at start.
    #[serde(rename = "limits.max_connections")]
    MaxConnections,
    /// The GitHub Status watcher is started with its settings.
    #[serde(rename = "status")]
    GithubStatus,
    #[serde(rename = "breaker.jitter")]
    BreakerJitter,
    /// The OS's metered watcher is started with `[network]`.
    #[serde(rename = "network")]
    Network,
}

impl RestartKey {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartKey::Listen => "listen",
            RestartKey::DataDir => "data_dir",
            RestartKey::Upstreams => "upstream",
            RestartKey::UpstreamProxy => "upstream_proxy",
            RestartKey::Intercept => "intercept",
            RestartKey::QueueCredentials => "queue.credentials",
            RestartKey::QueueMaxAge => "queue.max_age",
            RestartKey::SecretsStore => "secrets.store",
            RestartKey::QueueDedupeWindow => "queue.dedupe_window",
            RestartKey::CacheMaxBytes => "cache.max_bytes",
            RestartKey::MaxConnections => "limits.max_connections",
            RestartKey::GithubStatus => "status",
            RestartKey::BreakerJitter => "breaker.jitter",
            RestartKey::Network => "network",
        }
    }
}

impl std::fmt::Display for RestartKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// Several parts (origins with their roots, the status watcher's config) have no `PartialEq`;
// their `Debug` forms are complete and deterministic, which is all a "did it change" needs.
fn same<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Each restart-only setting as (key, "is it the same in `a` and `b`").
fn compare(a: &Settings, b: &Settings) -> [(RestartKey, bool); 14] {
    [
        (RestartKey::Listen, a.listen == b.listen),
        (RestartKey::DataDir, a.data_dir == b.data_dir),
        (RestartKey::Upstreams, same(&a.upstreams, &b.upstreams)),
        (
            RestartKey::UpstreamProxy,
            same(&a.upstream_proxy, &b.upstream_proxy),
        ),
        (RestartKey::Intercept, a.intercept == b.intercept),
        (
            RestartKey::QueueCredentials,
            a.queue.memory_credentials == b.queue.memory_credentials,
        ),
        (RestartKey::QueueMaxAge, a.queue.max_age == b.queue.max_age),
        (RestartKey::SecretsStore, a.secrets_store == b.secrets_store),
        (
            RestartKey::QueueDedupeWindow,
            a.queue.dedupe_window == b.queue.dedupe_window,
        ),
        (
            RestartKey::CacheMaxBytes,
            a.cache_max_bytes == b.cache_max_bytes,
        ),
        (
            RestartKey::MaxConnections,
            a.limits.max_connections == b.limits.max_connections,
        ),
        (
            RestartKey::GithubStatus,
            same(&a.github_status, &b.github_status),
        ),
        (
            RestartKey::BreakerJitter,
            a.resilience.breaker_jitter == b.resilience.breaker_jitter,
        ),
        (RestartKey::Network, a.network == b.network),
    ]
}

/// The restart-only settings that differ between `before` and `after`, in a stable order.
pub fn restart_required(before: &Settings, after: &Settings) -> Vec<RestartKey> {
    compare(before, after)
        .into_iter()
        .filter(|(_, same)| !same)
        .map(|(k, _)| k)
        .collect()
}

impl Settings {
    /// `self` with every restart-only setting taken from `running`: what a running engine can
    /// put in force now.
    pub fn with_restart_only_from(mut self, running: &Settings) -> Settings {
        self.listen = running.listen;
        self.data_dir.clone_from(&running.data_dir);
        self.upstreams.clone_from(&running.upstreams);
        self.upstream_proxy.clone_from(&running.upstream_proxy);
        self.intercept = running.intercept;
        self.queue = running.queue.clone();
        self.cache_max_bytes = running.cache_max_bytes;
        self.limits.max_connections = running.limits.max_connections;
        self.github_status.clone_from(&running.github_status);
        self.resilience.breaker_jitter = running.resilience.breaker_jitter;
        self.network.clone_from(&running.network);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_restart_keys_are_reported_and_kept() {
        let a = crate::config::parse_str("[classes.list]\nfresh_ttl = \"1s\"\n", "a").unwrap();
        let b = crate::config::parse_str(
            "listen = \"127.0.0.1:1\"\n[classes.list]\nfresh_ttl = \"9s\"\n[cache]\nmax_bytes = 5\n",
            "b",
        )
        .unwrap();
        assert_eq!(
            restart_required(&a, &b),
            [RestartKey::Listen, RestartKey::CacheMaxBytes]
        );
        let applied = b.with_restart_only_from(&a);
        assert_eq!(applied.listen, a.listen);
        assert_eq!(applied.cache_max_bytes, a.cache_max_bytes);
        assert_eq!(
            applied
                .classes
                .get(crate::config::RouteClass::List)
                .fresh_ttl,
            std::time::Duration::from_secs(9)
        );
        assert!(restart_required(&a, &applied).is_empty());
        // Every key round-trips to the name used in the config file.
        assert_eq!(
            serde_json::to_value(RestartKey::QueueCredentials).unwrap(),
            "queue.credentials"
        );
    }
}
