//! Creates are never lost and never doubled.
//!
//! Replay credentials live in the engine's [`crate::secrets::SecretStore`] (the database holds
//! only a reference).
//!
//! - [`enqueue`]: commits a create the upstream could not take (row in SQLite, credential in
//!   the keychain); the request path (`pipeline::create`) decides when.
//! - [`replay`]: the worker that sends queued creates when the upstream is healthy again, and
//!   resolves `in_doubt` items by looking them up upstream first.

pub(crate) mod enqueue;
mod lookup;
pub(crate) mod replay;

use crate::events::Event;
use crate::secrets::SecretStore;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_store::{AsyncStore, Item, StoreError, StoreOptions};

/// The create queue as the engine runs it: open, or unavailable with the reason (creates are
/// then refused with a 503 that says why).
pub(crate) enum QueueState {
    Open(Queue),
    Unavailable(String),
}

impl QueueState {
    pub fn open(&self) -> Option<&Queue> {
        match self {
            QueueState::Open(q) => Some(q),
            QueueState::Unavailable(_) => None,
        }
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            QueueState::Open(_) => None,
            QueueState::Unavailable(e) => Some(e),
        }
    }
}

/// The durable queue and its credential store.
pub(crate) struct Queue {
    pub store: AsyncStore,
    pub secrets: SecretStore,
    /// New items wake the replay workers at once.
    pub wake: tokio::sync::Notify,
    pub max_age: Duration,
}

impl Queue {
    pub async fn open(data_dir: &Path, secrets: SecretStore) -> Result<Queue, StoreError> {
        let store =
            AsyncStore::open(data_dir.join("queue.sqlite3"), StoreOptions::default()).await?;
        Ok(Queue {
            store,
            secrets,
            wake: tokio::sync::Notify::new(),
            max_age: Duration::from_secs(24 * 3600),
        })
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The event for an item's new state.
pub(crate) fn event(item: &Item, detail: impl Into<String>) -> Event {
    Event::Queue {
        id: item.id,
        upstream: item.upstream.clone(),
        state: item.state,
        at: SystemTime::now(),
        detail: detail.into(),
    }
}
