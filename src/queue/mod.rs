//! Creates are never lost and never doubled.
//!
//! Replay credentials live in the engine's [`crate::secrets::SecretStore`] (the database holds
//! only a reference), or, for gateway replicas sharing a PostgreSQL queue, sealed in the
//! database ([`sealed`]).
//!
//! - [`backend`]: the queue operations as one trait, over SQLite (default) or PostgreSQL
//!   ([`pg`]).
//! - `lazy_sqlite`: the laptop's queue file, made by the first create queued (a file from an
//!   earlier run is opened at start).
//! - [`enqueue`]: commits a create the upstream could not take (row in the queue, credential in
//!   the keychain or sealed); the request path (`pipeline::create`) decides when.
//! - [`provisional`]: the provisional job and session ids a queued create is answered with,
//!   and the job and session objects Weir serves for them in the real clients' shapes.
//! - `credential`: a replay credential as `HeaderValue`s, and its stored form.
//! - `decide`: the replay's decisions, pure (what was learned → the next step).
//! - [`replay`]: the worker that sends queued creates when the upstream is healthy again, and
//!   resolves `in_doubt` items by looking them up upstream first; idle, it sleeps until the
//!   next item is due or the queue changes ([`Queue::wake`]).
//! - `housekeeping`: expiry (past `queue.max_age`) and purge (ended items after
//!   [`replay::KEEP_ENDED`]), run when something can expire.

pub mod backend;
mod credential;
mod decide;

/// The queue's readers of a create's answer (the job it made, or why it was refused), run on
/// `body` for the fuzz targets (`crate::fuzz_entry`).
#[cfg(feature = "fuzzing")]
pub(crate) fn read_answer_for_fuzz(status: u16, body: &[u8]) {
    let _ = decide::summarise(status, body);
    let _ = decide::refusal(status, body, "fuzz");
}
pub(crate) mod enqueue;
mod housekeeping;
#[cfg(test)]
mod idle_tests;
mod lazy_sqlite;
mod lookup;
mod lookup_budget;
// The PostgreSQL backend and its sealed credentials are the gateway's (feature `gateway`).
#[cfg(feature = "gateway")]
pub(crate) mod pg;
pub(crate) mod provisional;
pub(crate) mod replay;
#[cfg(feature = "gateway")]
pub mod sealed;

use crate::events::Event;
use crate::secrets::{SecretError, SecretStore};
use backend::QueueBackend;
use credential::Credential;
#[cfg(feature = "gateway")]
use sealed::SealedVault;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use weir_store::{Item, StoreError};

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
    /// SQLite (this Weir's own file) or PostgreSQL (a gateway's shared queue).
    pub store: Box<dyn QueueBackend>,
    /// The engine's secret store (the keychain): replay credentials unless `sealed`.
    pub secrets: SecretStore,
    /// A shared queue's credentials, sealed in PostgreSQL (gateway replicas).
    /// Boxed: the AES key schedule is large, and most Weirs have none.
    #[cfg(feature = "gateway")]
    pub sealed: Option<Box<SealedVault>>,
    /// New items (and retries, offers back in the queue) wake the replay workers and the
    /// housekeeping at once (a `NOTIFY` too, for a shared queue). Every change that makes an
    /// item due must call `notify_waiters` on it: idle workers sleep until the next due time.
    pub wake: Arc<tokio::sync::Notify>,
    pub max_age: Duration,
    /// Creates this engine stored since it started (the status's `saved.creates_kept`).
    pub kept: std::sync::atomic::AtomicU64,
    /// Held from the caps' check to the insert (see `enqueue`).
    pub(crate) admitting: tokio::sync::Mutex<()>,
}

impl Queue {
    pub async fn open(data_dir: &Path, secrets: SecretStore) -> Result<Queue, StoreError> {
        let store = lazy_sqlite::LazySqlite::open(data_dir.join("queue.sqlite3")).await?;
        Ok(Queue {
            store: Box::new(store),
            secrets,
            #[cfg(feature = "gateway")]
            sealed: None,
            wake: Arc::new(tokio::sync::Notify::new()),
            max_age: Duration::from_secs(24 * 3600),
            kept: Default::default(),
            admitting: tokio::sync::Mutex::new(()),
        })
    }

    /// The shared queue in PostgreSQL: migrates it (from empty, or from an older Weir's
    /// schema) before anything else touches it.
    #[cfg(feature = "gateway")]
    pub async fn open_postgres(
        conn: Arc<pg::PgConn>,
        lease: Duration,
        key: &sealed::GatewayKey,
        secrets: SecretStore,
    ) -> Result<Queue, StoreError> {
        let applied = pg::migrations::migrate(&conn).await?;
        if !applied.is_empty() {
            tracing::info!(db = %conn.db, ?applied, "migrated the shared create queue");
        }
        Ok(Queue {
            sealed: Some(Box::new(SealedVault::new(conn.clone(), key))),
            store: Box::new(pg::PgQueue {
                conn,
                owner: pg::owner_name(),
                lease,
            }),
            secrets,
            wake: Arc::new(tokio::sync::Notify::new()),
            max_age: Duration::from_secs(24 * 3600),
            kept: Default::default(),
            admitting: tokio::sync::Mutex::new(()),
        })
    }

    /// Where replay credentials are kept (`queue.credentials` in the status).
    pub fn credentials_kind(&self) -> crate::secrets::Backend {
        #[cfg(feature = "gateway")]
        if self.sealed.is_some() {
            return crate::secrets::Backend::Sealed;
        }
        self.secrets.kind()
    }

    pub async fn put_credential(
        &self,
        account: &str,
        credential: &Credential,
    ) -> Result<(), SecretError> {
        let secret = credential.to_secret();
        #[cfg(feature = "gateway")]
        if let Some(v) = &self.sealed {
            return v.put(account, secret).await;
        }
        self.secrets.put(account, secret).await
    }

    pub async fn get_credential(&self, account: &str) -> Result<Option<String>, SecretError> {
        #[cfg(feature = "gateway")]
        if let Some(v) = &self.sealed {
            return v.get(account).await;
        }
        self.secrets.get(account).await
    }

    pub async fn delete_credential(&self, account: &str) {
        #[cfg(feature = "gateway")]
        if let Some(v) = &self.sealed {
            return v.delete(account).await;
        }
        self.secrets.delete(account).await
    }
}

// The clock lives in the `time_fmt` leaf, so that `accounts` need not import the queue for it.
pub(crate) use crate::time_fmt::now_ms;

/// The event for an item's new state.
pub(crate) fn event(item: &Item, detail: impl Into<String>) -> Event {
    Event::Queue {
        id: item.id,
        upstream: item.upstream.to_string(),
        state: item.state,
        at: SystemTime::now(),
        detail: detail.into(),
    }
}
