//! The state every request handler shares, behind one `Arc`.

use crate::cache::{Cache, Stored};
use crate::coalesce::Coalescer;
use crate::config::Settings;
use crate::events::Event;
use crate::identity::{Identity, IdentityKey};
use crate::problem::Problem;
use crate::resilience::Guard;
use crate::stats::{GlobalCounters, UpstreamCounters};
use crate::surface::Surface;
use crate::upstream::UpstreamClient;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::broadcast;
use weir_resilience::KeyedRateLimiter;

pub struct Shared {
    pub settings: Settings,
    /// `http://127.0.0.1:PORT`, Weir's own base URL (problem `type` URIs, dashboard).
    pub base_url: String,
    pub port: u16,
    pub identity_key: IdentityKey,
    pub cache: Cache,
    pub coalescer: Coalescer<Stored, Problem>,
    pub client: UpstreamClient,
    pub upstreams: Vec<UpstreamState>,
    pub global: GlobalCounters,
    pub events: broadcast::Sender<Event>,
    pub paused: AtomicBool,
    pub started_at: SystemTime,
    /// Secret that mutating control calls must carry (`X-Weir-Secret`).
    pub control_secret: String,
    /// Flipped to true when shutdown starts, so long-lived streams (SSE) end and drain finishes.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// Per (surface, identity) limits on requests that would reach an upstream.
    pub rate_limiter: Option<KeyedRateLimiter<(Surface, Identity)>>,
    /// The durable create queue; `None` (with the reason) if it could not be opened.
    pub queue: Option<crate::queue::Queue>,
    pub queue_error: Option<String>,
    /// Successful creates within the dedupe window, by dedupe key.
    pub recent_creates: moka::sync::Cache<String, Arc<Stored>>,
    pub create_flights: Coalescer<Stored, Problem>,
    /// The GitHub Status watcher, once started.
    pub github: std::sync::Mutex<Option<weir_status::StatusHandle>>,
    pub config_file: Option<std::path::PathBuf>,
    /// Whether a GitHub token is in the keychain (read at start, kept current by the token
    /// API) so status calls never wait on the keychain.
    pub token_stored: std::sync::atomic::AtomicBool,
    /// CONNECT tunnels open (blind or intercepted), bounded by limits.max_connections.
    pub tunnel_slots: Arc<tokio::sync::Semaphore>,
    /// TLS interception of managed https upstreams; `None` keeps every CONNECT a blind tunnel.
    pub intercept: Option<std::sync::Arc<crate::intercept::Interceptor>>,
    /// How blind CONNECT tunnels reach their target (`connect_to`, `upstream_proxy`).
    pub tunnel_connector: crate::upstream_pool::RoutingConnector,
}

/// Runtime state of one managed upstream.
pub struct UpstreamState {
    pub counters: UpstreamCounters,
    pub guard: Guard,
    pub fallback_attempts: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub fn new(
        settings: Settings,
        port: u16,
        identity_key: IdentityKey,
        control_secret: String,
    ) -> Shared {
        let upstreams = settings
            .upstreams
            .iter()
            .map(|u| {
                // Settings were validated, so the breaker config is valid.
                let guard = Guard::new(u, &settings.resilience)
                    .unwrap_or_else(|e| unreachable!("validated breaker config: {e}"));
                UpstreamState {
                    counters: UpstreamCounters::default(),
                    guard,
                    fallback_attempts: Default::default(),
                }
            })
            .collect();
        let rate_limiter = settings
            .resilience
            .rate_limit
            .as_ref()
            .and_then(|c| KeyedRateLimiter::new(c).ok());
        let (events, _) = broadcast::channel(256);
        Shared {
            base_url: format!(
                "http://{}",
                crate::control::host_for(settings.listen.ip(), port)
            ),
            port,
            identity_key,
            cache: Cache::new(settings.cache_max_bytes),
            coalescer: Coalescer::default(),
            client: UpstreamClient::for_settings(&settings),
            upstreams,
            global: GlobalCounters::default(),
            events,
            paused: AtomicBool::new(false),
            started_at: SystemTime::now(),
            control_secret,
            stopping: tokio::sync::watch::channel(false).0,
            rate_limiter,
            queue: None,
            queue_error: None,
            recent_creates: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(settings.queue.dedupe_window)
                .build(),
            create_flights: Coalescer::default(),
            github: std::sync::Mutex::new(None),
            config_file: None,
            token_stored: Default::default(),
            tunnel_slots: Arc::new(tokio::sync::Semaphore::new(settings.limits.max_connections)),
            intercept: None,
            tunnel_connector: crate::upstream_pool::RoutingConnector::for_settings(
                crate::upstream_pool::http_connector(),
                &settings,
            ),
            settings,
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub fn emit(&self, e: Event) {
        // No receivers is normal (headless, nobody watching).
        let _ = self.events.send(e);
    }
}
