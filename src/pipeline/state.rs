//! What the request path owns: the per-identity cache and its coalescer, the client rate
//! limiter, the create dedupe state and counters; and what it borrows from the other parts
//! (upstreams, queue, event bus, the mode).

use crate::cache::{Cache, Stored};
use crate::coalesce::Coalescer;
use crate::config::{LiveSettings, Settings};
use crate::events::Bus;
use crate::identity::{Identity, IdentityKey};
use crate::intercept::Interceptor;
use crate::mode::{Behaviour, ChosenBy, Mode, Modes};
use crate::problem::Problem;
use crate::queue::QueueState;
use crate::stats::GlobalCounters;
use crate::surface::Surface;
use crate::upstream::{RoutingConnector, Upstreams};
use std::sync::Arc;
use weir_resilience::{KeyedRateLimiter, RateLimitConfig};

pub(crate) struct Proxy {
    /// The settings in force; read once per request through [`Proxy::settings`].
    pub live: LiveSettings,
    /// `http://127.0.0.1:PORT`, Weir's own base URL (problem `type` URIs, queue links).
    pub base_url: String,
    pub port: u16,
    pub identity_key: IdentityKey,
    /// Which account each credential belongs to (shared with the upstreams and the queue).
    pub accounts: Arc<crate::accounts::Accounts>,
    pub cache: Cache,
    /// Page-size families of list requests (see `page_subset`).
    pub page_families: super::page_subset::Families,
    pub coalescer: Coalescer<super::cache::Refreshed, Problem>,
    /// `stream` keys whose last answer was a true stream (see `stream`).
    pub streamed: super::stream::Streamed,
    /// The Task API's tasks and their followed events pages (see `task_events`).
    pub(super) task_groups: super::task_events::Groups,
    /// Per (surface, identity) limits on requests that would reach an upstream; rebuilt when
    /// `[rate_limit]` changes.
    pub rate_limiter: arc_swap::ArcSwap<ClientRateLimit>,
    pub creates: Creates,
    pub global: GlobalCounters,
    /// Automatic (or offline), cache only, pass-through: read once per managed request.
    pub modes: Arc<Modes>,
    pub upstreams: Arc<Upstreams>,
    pub queue: Arc<QueueState>,
    pub bus: Bus,
    /// CONNECT tunnels open (blind or intercepted), bounded by limits.max_connections.
    pub tunnel_slots: Arc<tokio::sync::Semaphore>,
    /// TLS interception of managed https upstreams; `None` keeps every CONNECT a blind tunnel.
    pub intercept: Option<Arc<Interceptor>>,
    /// How blind CONNECT tunnels reach their target (`connect_to`, `upstream_proxy`).
    pub tunnel_connector: RoutingConnector,
    /// Metered or not (the OS and the developer's override), for fallback policy.
    pub network: Arc<crate::network::Network>,
    /// Offers of creates to a local agent (create action `local`).
    pub handoffs: Arc<crate::handoff::Handoffs>,
    /// The fallback policy's recent decisions (status).
    pub policy_log: crate::policy::DecisionLog,
    /// The one bound on request bytes buffered at once (creates, completion requests).
    pub body_budget: Arc<crate::body_budget::BodyBudget>,
}

/// The client rate limiter and the settings it was built from (`None`: turned off).
pub(crate) struct ClientRateLimit {
    config: Option<RateLimitConfig>,
    pub limiter: Option<KeyedRateLimiter<(Surface, Identity)>>,
}

impl ClientRateLimit {
    fn new(config: Option<&RateLimitConfig>) -> ClientRateLimit {
        ClientRateLimit {
            config: config.cloned(),
            limiter: config.and_then(|c| KeyedRateLimiter::new(c).ok()),
        }
    }
}

/// Duplicate suppression for creates: in flight (joined) and recently succeeded (answered
/// again).
#[derive(Clone)]
pub(crate) struct Creates {
    pub recent: moka::sync::Cache<String, Arc<Stored>>,
    pub flights: Coalescer<Stored, Problem>,
}

/// The answers of recently succeeded creates are kept in at most this many bytes (a count
/// alone would let 10,000 large answers take gigabytes).
const RECENT_CREATES_BYTES: u64 = 16 << 20;

fn recent_creates(window: std::time::Duration) -> moka::sync::Cache<String, Arc<Stored>> {
    moka::sync::Cache::builder()
        .max_capacity(RECENT_CREATES_BYTES)
        .weigher(|k: &String, v: &Arc<Stored>| v.weight().saturating_add(k.len() as u32))
        .time_to_live(window)
        .build()
}

/// The parts a [`Proxy`] is built from.
pub(crate) struct ProxyParts {
    pub live: LiveSettings,
    pub port: u16,
    pub identity_key: IdentityKey,
    /// Built (and loaded from disk) by the engine, which owns the secret store.
    pub cache: Cache,
    pub upstreams: Arc<Upstreams>,
    pub queue: Arc<QueueState>,
    pub bus: Bus,
    pub intercept: Option<Arc<Interceptor>>,
    pub modes: Arc<Modes>,
    pub network: Arc<crate::network::Network>,
    pub handoffs: Arc<crate::handoff::Handoffs>,
}

impl Proxy {
    pub fn new(p: ProxyParts) -> Proxy {
        let s = &*p.live.get();
        let rate_limiter = ClientRateLimit::new(s.resilience.rate_limit.as_ref());
        Proxy {
            base_url: format!("http://{}", host_for(s.listen.ip(), p.port)),
            port: p.port,
            identity_key: p.identity_key,
            accounts: p.upstreams.accounts.clone(),
            cache: p.cache,
            page_families: super::page_subset::families(),
            coalescer: Coalescer::tracked(p.bus.tasks().clone()),
            streamed: super::stream::streamed(),
            task_groups: Default::default(),
            rate_limiter: arc_swap::ArcSwap::from_pointee(rate_limiter),
            creates: Creates {
                recent: recent_creates(s.queue.dedupe_window),
                flights: Coalescer::tracked(p.bus.tasks().clone()),
            },
            global: GlobalCounters::default(),
            modes: p.modes,
            upstreams: p.upstreams,
            queue: p.queue,
            bus: p.bus,
            tunnel_slots: Arc::new(tokio::sync::Semaphore::new(s.limits.max_connections)),
            intercept: p.intercept,
            tunnel_connector: RoutingConnector::for_settings(
                crate::upstream::http_connector(false),
                s,
            ),
            live: p.live,
            network: p.network,
            handoffs: p.handoffs,
            policy_log: crate::policy::DecisionLog::default(),
            body_budget: crate::body_budget::BodyBudget::for_limit(s.limits.max_body_bytes),
        }
    }

    /// The settings in force now. Each request reads this once and keeps the `Arc`, so it
    /// sees one version even if a change lands while it runs.
    pub fn settings(&self) -> Arc<Settings> {
        self.live.get()
    }

    /// Rebuilds what the request path built from settings that just changed: the client rate
    /// limiter (its buckets start full again, a new quota cannot reuse the old ones).
    pub fn apply(&self, s: &Settings) {
        let rl = s.resilience.rate_limit.as_ref();
        if self.rate_limiter.load().config.as_ref() != rl {
            self.rate_limiter.store(Arc::new(ClientRateLimit::new(rl)));
        }
    }

    /// Pass-through, under its old name.
    pub fn is_paused(&self) -> bool {
        self.modes.behaviour() == Behaviour::PassThrough
    }

    /// The old pause switch: `true` chooses pass-through; `false` leaves pass-through for
    /// automatic (and leaves cache only alone: "resume" only ever undid a pause).
    pub fn set_paused(&self, paused: bool, by: ChosenBy) {
        if paused {
            self.modes.choose(Mode::PassThrough, by);
        } else if self.modes.chosen() == Mode::PassThrough {
            self.modes.choose(Mode::Automatic, by);
        }
    }
}

/// The names a browser uses for Weir itself.
pub(crate) fn is_own_host_name(host: &str) -> bool {
    let h = host.trim_matches(['[', ']']);
    h.eq_ignore_ascii_case("localhost") || h == "127.0.0.1" || h == "::1"
}

pub(crate) use crate::config::host_for;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_creates_are_bounded_by_bytes() {
        let c = recent_creates(std::time::Duration::from_secs(60));
        let now = tokio::time::Instant::now();
        for i in 0..64 {
            let s = Stored {
                status: http::StatusCode::CREATED,
                headers: http::HeaderMap::new(),
                body: bytes::Bytes::from(vec![0u8; 1 << 20]),
                stored_at: now,
                fresh_until: now,
                revalidate_until: now,
                stale_if_error_until: now,
            };
            c.insert(format!("k{i}"), Arc::new(s));
        }
        c.run_pending_tasks();
        assert!(
            c.weighted_size() <= RECENT_CREATES_BYTES,
            "{}",
            c.weighted_size()
        );
        assert!(c.entry_count() < 64);
    }
}
