//! The settings a running engine uses *now*: one [`LiveSettings`] cell shared by every part.
//! The request path reads it once per request ([`LiveSettings::get`]), so TTLs, thresholds,
//! limits, routes and key headers apply on the next request after a change; a part that
//! builds state from settings (a breaker, a rate limiter) reconfigures itself when told (the
//! reload module calls it) or watches [`LiveSettings::subscribe`].
//!
//! A new setting joins by being read through `get()` where it is used; if it cannot change
//! while Weir runs, it gets a [`super::RestartKey`] instead.

use super::Settings;
use arc_swap::ArcSwap;
use std::sync::Arc;
use tokio::sync::watch;

/// Cheap to clone; clones share the cell.
#[derive(Clone)]
pub struct LiveSettings {
    current: Arc<ArcSwap<Settings>>,
    changed: watch::Sender<Arc<Settings>>,
}

impl LiveSettings {
    pub fn new(settings: Settings) -> LiveSettings {
        let s = Arc::new(settings);
        LiveSettings {
            current: Arc::new(ArcSwap::new(s.clone())),
            changed: watch::channel(s).0,
        }
    }

    /// The settings in force now (one atomic load; hold the `Arc` for the whole request so
    /// it sees one consistent version).
    pub fn get(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// Puts `settings` in force for every later [`LiveSettings::get`] and tells subscribers.
    pub fn replace(&self, settings: Settings) -> Arc<Settings> {
        let s = Arc::new(settings);
        self.current.store(s.clone());
        self.changed.send_replace(s.clone());
        s
    }

    /// Sees every version put in force after this call (the latest one when several come
    /// quickly).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Settings>> {
        self.changed.subscribe()
    }
}

impl std::fmt::Debug for LiveSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveSettings").field(&self.get()).finish()
    }
}
