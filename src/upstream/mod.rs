//! The managed upstreams, one owner for everything about reaching them:
//! - [`client`]: the pooled rustls HTTP client and its typed failures;
//! - [`pool`]: how connections are made (`connect_to`, `ca_file`, `upstream_proxy`);
//! - [`admission`]: whether an attempt may go out now (cooldown → breaker → bulkhead);
//! - [`caution`]: outside signals (GitHub Status, peers) that lower the breaker's thresholds;
//! - [`attempt`]: the one attempt-and-retry machinery, for client requests and replays alike.

mod admission;
mod attempt;
pub(crate) mod caution;
mod client;
mod identity_cooldown;
mod pool;

pub(crate) use admission::SharedHold;
pub use admission::{BreakerView, ClassLatencyView, GateStatus};
pub(crate) use attempt::{fetch_problem, AttemptPolicy, Replayable};
pub use caution::{Caution, CautionSource};
pub use client::{FetchError, Timeouts, UpstreamClient};
pub(crate) use pool::{http_connector, RoutingConnector};

use crate::config::{ClassTable, Settings, UpstreamSettings};
use crate::stats::UpstreamCounters;
use admission::Gate;
use std::sync::atomic::AtomicU64;

/// Every managed upstream's client, gate and counters.
pub(crate) struct Upstreams {
    pub client: UpstreamClient,
    pub list: Vec<Upstream>,
    classes: ClassTable,
    max_body_bytes: usize,
}

/// Runtime state of one managed upstream.
pub(crate) struct Upstream {
    pub settings: UpstreamSettings,
    pub counters: UpstreamCounters,
    pub gate: Gate,
    pub fallback_attempts: AtomicU64,
}

impl Upstreams {
    pub fn new(settings: &Settings) -> Upstreams {
        let list = settings
            .upstreams
            .iter()
            .map(|u| Upstream {
                settings: u.clone(),
                counters: UpstreamCounters::default(),
                // Settings were validated, so the breaker config is valid.
                gate: Gate::new(u, &settings.resilience)
                    .unwrap_or_else(|e| unreachable!("validated breaker config: {e}")),
                fallback_attempts: AtomicU64::new(0),
            })
            .collect();
        Upstreams {
            client: UpstreamClient::for_settings(settings),
            list,
            classes: settings.classes.clone(),
            max_body_bytes: settings.limits.max_body_bytes,
        }
    }

    pub fn get(&self, up: usize) -> &Upstream {
        &self.list[up]
    }
}
