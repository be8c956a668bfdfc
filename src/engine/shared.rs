//! The state every request handler shares, behind one `Arc`.

use crate::cache::{Cache, Stored};
use crate::coalesce::Coalescer;
use crate::config::Settings;
use crate::events::Event;
use crate::identity::IdentityKey;
use crate::stats::{GlobalCounters, UpstreamCounters};
use crate::upstream::{FetchError, UpstreamClient};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;
use tokio::sync::broadcast;

pub struct Shared {
    pub settings: Settings,
    /// `http://127.0.0.1:PORT`, Weir's own base URL (problem `type` URIs, dashboard).
    pub base_url: String,
    pub port: u16,
    pub identity_key: IdentityKey,
    pub cache: Cache,
    pub coalescer: Coalescer<Stored, FetchError>,
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
    /// TLS interception of managed https upstreams; `None` keeps every CONNECT a blind tunnel.
    pub intercept: Option<std::sync::Arc<crate::intercept::Interceptor>>,
    /// How blind CONNECT tunnels reach their target (`connect_to`, `upstream_proxy`).
    pub tunnel_connector: crate::upstream_pool::RoutingConnector,
}

/// Runtime state of one managed upstream.
pub struct UpstreamState {
    pub counters: UpstreamCounters,
}

impl Shared {
    pub fn new(settings: Settings, port: u16, identity_key: IdentityKey, control_secret: String) -> Shared {
        let upstreams = settings
            .upstreams
            .iter()
            .map(|_| UpstreamState { counters: UpstreamCounters::default() })
            .collect();
        let (events, _) = broadcast::channel(256);
        Shared {
            base_url: format!("http://{}", crate::control::host_for(settings.listen.ip(), port)),
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
            intercept: None,
            tunnel_connector: crate::upstream_pool::RoutingConnector::for_settings(crate::upstream_pool::http_connector(), &settings),
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
