//! The managed upstreams, one owner for everything about reaching them:
//! - [`client`]: the pooled rustls HTTP client and its typed failures;
//! - [`pool`]: how connections are made (`connect_to`, `ca_file`, `upstream_proxy`);
//! - [`admission`]: whether an attempt may go out now (cooldown → breaker → bulkhead);
//! - [`caution`]: outside signals (GitHub Status, peers) that lower the breaker's thresholds;
//! - [`attempt`]: the one attempt-and-retry machinery, for client requests and replays alike;
//!   its failures are an internal `AttemptError` ([`attempt_error`]), made a `Problem` at
//!   the edge;
//! - [`resolve`]: the one lookup of a connection to an unmanaged host, checked for private
//!   addresses;
//! - [`reachability`]: whether each upstream can be reached at the network level (offline);
//! - [`baselines`]: the breakers' latency baselines kept in the data dir across restarts;
//! - [`learned`]: Copilot API hosts announced in trusted answers, per account, managed from
//!   then on;
//! - [`model_breakers`]: per-(upstream, model) breakers of completion requests, kept apart
//!   from the gates so a model's outage never opens the agent-sessions breaker.

mod admission;
mod attempt;
mod attempt_error;
pub(crate) mod baselines;
pub(crate) mod caution;
mod client;
mod identity_cooldown;
pub(crate) mod learned;
mod model_breakers;
mod pool;
mod reachability;
pub(crate) mod resolve;
pub(crate) mod roots;
mod user_api;

pub(crate) use admission::Admitted;
#[cfg(feature = "gateway")]
pub(crate) use admission::SharedHold;
pub use admission::{BreakerView, ClassLatencyView, GateStatus};
pub(crate) use attempt::{fetch_problem, kind_of, AttemptPolicy, Attempted, Replayable};
pub(crate) use attempt_error::AttemptError;
pub use caution::{Caution, CautionSource};
pub use client::{FetchError, TimeoutPhase as ClientTimeoutPhase, Timeouts, UpstreamClient};
pub(crate) use model_breakers::{EpisodeChange, ModelBreakers};
pub use model_breakers::{ModelEpisode, ModelStatus};
pub(crate) use pool::{http_connector, RoutingConnector};
pub(crate) use reachability::{Reach, Reachability};

use crate::config::UpstreamIndex;
use crate::config::{LiveSettings, Settings, UpstreamSettings};
use crate::stats::UpstreamCounters;
use admission::Gate;
use std::sync::atomic::AtomicU64;

/// Every managed upstream's client, gate and counters.
pub(crate) struct Upstreams {
    pub client: UpstreamClient,
    /// For requests to hosts Weir does not manage (see [`UpstreamClient::for_unmanaged`]).
    pub unmanaged: UpstreamClient,
    /// Told of every 401, which drops the credential's account mapping.
    pub accounts: std::sync::Arc<crate::accounts::Accounts>,
    pub list: Vec<Upstream>,
    /// Copilot API hosts learned at run time, at the indices after `list`'s.
    pub learned: learned::Learned,
    /// What the network said on the last exchange with each upstream.
    pub reach: Reachability,
    /// Per-(upstream, model) breakers of the `model` class, apart from every gate.
    pub models: ModelBreakers,
    /// Read only for calls Weir makes for itself ([`Upstreams::settings_now`]): a client's
    /// request brings its own snapshot to every attempt.
    live: LiveSettings,
}

/// Runtime state of one managed upstream.
pub(crate) struct Upstream {
    pub settings: UpstreamSettings,
    pub counters: UpstreamCounters,
    pub gate: Gate,
    pub fallback_attempts: AtomicU64,
    /// Says when the upstream answers well again after failing (the queue's replay worker
    /// waits on it, so creates queued through an outage go as soon as it ends).
    pub recovery: Recovery,
}

/// Whether an upstream's last exchange failed, and a wake-up for when one goes well again.
#[derive(Default)]
pub(crate) struct Recovery {
    failing: std::sync::atomic::AtomicBool,
    pub recovered: tokio::sync::Notify,
}

impl Recovery {
    /// Records an exchange's outcome: a success after a failure wakes the waiters.
    pub fn observe(&self, failed: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        // Read first: every attempt reports, and a healthy upstream's flag never changes, so
        // the shared line is written only on a change.
        if self.failing.load(Relaxed) != failed && self.failing.swap(failed, Relaxed) && !failed {
            self.recovered.notify_waiters();
        }
    }
}

impl Upstreams {
    pub fn new(
        live: LiveSettings,
        accounts: std::sync::Arc<crate::accounts::Accounts>,
    ) -> Upstreams {
        let settings = &*live.get();
        let list: Vec<Upstream> = settings
            .upstreams
            .iter()
            .map(|u| Upstream {
                settings: u.clone(),
                counters: UpstreamCounters::default(),
                // Settings were validated, so the breaker config is valid.
                gate: Gate::new(u, &settings.resilience)
                    .unwrap_or_else(|e| unreachable!("validated breaker config: {e}")),
                fallback_attempts: AtomicU64::new(0),
                recovery: Recovery::default(),
            })
            .collect();
        Upstreams {
            accounts,
            learned: learned::Learned::new(list.len()),
            client: UpstreamClient::for_settings(settings),
            unmanaged: UpstreamClient::for_unmanaged(settings),
            reach: Reachability::new(list.len()),
            models: ModelBreakers::default(),
            list,
            live,
        }
    }

    /// The settings in force now, for a call Weir makes for itself from stored data (a queued
    /// create's replay, its lookup, a `/user` resolution): taken once when it starts, as a
    /// client's request takes its own.
    pub(crate) fn settings_now(&self) -> std::sync::Arc<Settings> {
        self.live.get()
    }

    /// Puts new resilience settings in force on every upstream's gate (state kept).
    pub fn apply(&self, settings: &Settings) {
        for u in self.list.iter().chain(self.learned.iter().map(|(_, u)| u)) {
            u.gate.apply(&settings.resilience);
        }
    }

    /// The upstream at `up`: a configured one, or a learned one (an index is only ever handed
    /// out by [`Upstreams::find`] or [`Upstreams::learn`], after its slot was set).
    pub fn get(&self, up: UpstreamIndex) -> &Upstream {
        match self.list.get(up.index()).or_else(|| self.learned.get(up)) {
            Some(u) => u,
            None => unreachable!("upstream index {up} was never handed out"),
        }
    }

    /// The upstream that manages `scheme://host:port`: a configured one (as `settings` says),
    /// else a learned one.
    pub fn find(
        &self,
        settings: &Settings,
        scheme: &str,
        host: &str,
        port: u16,
    ) -> Option<UpstreamIndex> {
        settings
            .upstream_for(scheme, host, port)
            .or_else(|| self.learned.find(scheme, host, port))
    }

    /// The configured upstreams' indices, in the order configured.
    pub fn configured(&self) -> impl Iterator<Item = UpstreamIndex> {
        (0..self.list.len()).map(UpstreamIndex::at)
    }

    /// Every configured upstream with its index.
    pub fn configured_with(&self) -> impl Iterator<Item = (UpstreamIndex, &Upstream)> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, u)| (UpstreamIndex::at(i), u))
    }

    /// Whether `up` is the `github-api` upstream: the only one whose token answers and gh
    /// GraphQL answers are trusted to name a Copilot API host.
    pub fn is_github_api(&self, up: UpstreamIndex) -> bool {
        self.accounts.github_api() == Some(up)
    }

    /// Learns the Copilot API base URL `api` that a trusted answer to `credential`'s request
    /// announced (see `crate::pipeline`'s `announce` for which answers are trusted).
    /// `settings`: the snapshot of the request whose answer announced it.
    pub fn learn_announced(
        &self,
        settings: &Settings,
        api: &str,
        credential: crate::identity::Identity,
    ) -> learned::Announced {
        let who = learned::Announcer {
            credential,
            account: self.accounts.record(&credential).map(|r| r.account_id),
        };
        let found = self.learned.learn(
            api,
            who,
            |o| settings.upstream_for(o.scheme().as_str(), o.host(), o.port()),
            &settings.resilience,
            std::time::Instant::now(),
        );
        if let learned::Announced::Refused(why) = &found {
            tracing::debug!(%why, "an announced API host is not managed");
        }
        found
    }

    /// The upstream announced to the GitHub token `token` (stored in the keychain), or to
    /// another credential of its account: the account's own per-plan host, if one was
    /// announced in the last day.
    pub fn announced_to_token(&self, token: &str) -> Option<UpstreamIndex> {
        let ids: Vec<_> = ["Bearer", "token"]
            .iter()
            .filter_map(|scheme| {
                let v = http::HeaderValue::from_str(&format!("{scheme} {token}")).ok()?;
                let mut h = http::HeaderMap::new();
                h.insert(http::header::AUTHORIZATION, v);
                Some(self.accounts.identify(&h))
            })
            .collect();
        let account = ids
            .iter()
            .find_map(|id| self.accounts.record(id))
            .map(|r| r.account_id);
        self.learned
            .announced_for(&ids, account, std::time::Instant::now())
    }
}

/// The API host a token or GraphQL answer announces, read as the trusted answers are read
/// (`learned::announced_in_token`, `learned::announced_in_graphql`), for the fuzz targets
/// (`crate::fuzz_entry`).
#[cfg(feature = "fuzzing")]
pub(crate) fn announced_api_for_fuzz(body: &[u8]) -> Option<String> {
    learned::announced_in_token(body).or_else(|| learned::announced_in_graphql(body))
}
