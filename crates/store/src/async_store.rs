//! [`AsyncStore`]: the [`Store`] operations for async code.
//!
//! One dedicated OS thread owns the connection and runs requests from a bounded channel, one
//! at a time. Chosen over `spawn_blocking` + `Arc<Mutex<Connection>>` because:
//! - a SQLite connection is serial anyway; with a mutex, a storm of creates would park up to
//!   `max_blocking_threads` (512) pool threads on the lock, each possibly sleeping in the busy
//!   timeout, starving other blocking work (DNS, file reads). Here waiting callers are cheap
//!   futures in the channel, and its bound gives back-pressure;
//! - writes run in arrival order (FIFO), which keeps "oldest first" honest;
//! - the connection never moves between threads and closes (checkpointing the WAL) when the
//!   last handle is dropped.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::item::{Item, ListFilter, NewItem, StateCounts};
use crate::store::{Store, StoreOptions};
use crate::StoreError;

type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// Requests waiting for the thread; beyond this, callers wait to enqueue (back-pressure).
const QUEUE_DEPTH: usize = 1024;

/// Clonable handle on the store thread. All clones share one connection.
#[derive(Debug, Clone)]
pub struct AsyncStore {
    tx: mpsc::Sender<Job>,
    path: Arc<PathBuf>,
}

impl AsyncStore {
    /// Opens the database (on a blocking thread) and starts the store thread.
    pub async fn open(path: impl Into<PathBuf>, options: StoreOptions) -> Result<Self, StoreError> {
        let path = path.into();
        let store = tokio::task::spawn_blocking(move || Store::open_with(path, &options))
            .await
            .map_err(|_| StoreError::Closed)??;
        AsyncStore::start(store)
    }

    /// Moves an open [`Store`] onto its own thread.
    pub fn start(store: Store) -> Result<Self, StoreError> {
        let path = Arc::new(store.path().to_path_buf());
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("weir-store".into())
            .spawn(move || run(store, rx))
            .map_err(|e| StoreError::from_io(&path, e))?;
        Ok(AsyncStore { tx, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the store thread. For anything the typed methods below do not cover, or to
    /// do several steps without other requests in between.
    pub async fn call<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |store| {
            // The caller may have gone away (request cancelled); the work is done regardless.
            let _ = reply_tx.send(f(store));
        });
        self.tx.send(job).await.map_err(|_| StoreError::Closed)?;
        reply_rx.await.map_err(|_| StoreError::Closed)?
    }

    pub async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.insert(&item, now_ms)).await
    }

    pub async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.call(move |s| s.insert_offered(&item, expires_at_ms, &offer, now_ms))
            .await
    }

    pub async fn hand_off(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.call(move |s| s.hand_off(id, &result, now_ms)).await
    }

    pub async fn record_hand_off_result(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.call(move |s| s.record_hand_off_result(id, &result, now_ms))
            .await
    }

    pub async fn requeue(&self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        let why = why.to_owned();
        self.call(move |s| s.requeue(id, &why, now_ms)).await
    }

    pub async fn withdraw(&self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        let why = why.to_owned();
        self.call(move |s| s.withdraw(id, &why, now_ms)).await
    }

    pub async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.expired_offers(now_ms)).await
    }

    pub async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        self.call(move |s| s.get(id)).await
    }

    pub async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.list(&filter)).await
    }

    pub async fn counts(&self) -> Result<StateCounts, StoreError> {
        self.call(|s| s.counts()).await
    }

    pub async fn next_due(&self, upstream: &str, now_ms: i64) -> Result<Option<Item>, StoreError> {
        let upstream = upstream.to_owned();
        self.call(move |s| s.next_due(&upstream, now_ms)).await
    }

    pub async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        let id = id.to_string();
        self.call(move |s| s.find_by_provisional_id(&id)).await
    }

    pub async fn mark_failed_with(
        &self,
        id: i64,
        reason: &str,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let reason = reason.to_string();
        self.call(move |s| s.mark_failed_with(id, &reason, &result, now_ms))
            .await
    }

    pub async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        let key = key.to_owned();
        self.call(move |s| s.find_by_dedupe_key(&key)).await
    }

    pub async fn mark_replaying(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.mark_replaying(id, now_ms)).await
    }

    pub async fn mark_done(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.call(move |s| s.mark_done(id, &result, now_ms)).await
    }

    pub async fn mark_failed(
        &self,
        id: i64,
        reason: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let reason = reason.to_owned();
        self.call(move |s| s.mark_failed(id, &reason, now_ms)).await
    }

    pub async fn reschedule(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let error = error.to_owned();
        self.call(move |s| s.reschedule(id, next_attempt_at, &error, now_ms))
            .await
    }

    pub async fn mark_in_doubt(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let error = error.to_owned();
        self.call(move |s| s.mark_in_doubt(id, next_attempt_at, &error, now_ms))
            .await
    }

    pub async fn cancel(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.cancel(id, now_ms)).await
    }

    pub async fn retry(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.retry(id, now_ms)).await
    }

    pub async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.expire_older_than(max_age_ms, now_ms))
            .await
    }

    pub async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.recover_after_crash(now_ms)).await
    }

    pub async fn purge_ended_before(
        &self,
        updated_before_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.purge_ended_before(updated_before_ms))
            .await
    }
}

/// The store thread: runs jobs until every handle is dropped, then closes the connection.
fn run(mut store: Store, mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.blocking_recv() {
        // A panicking job drops its reply sender (the caller gets `Closed`); the thread and
        // the connection stay usable for everyone else.
        if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut store))).is_err() {
            tracing::error!(db = %store.path().display(), "queue store operation panicked");
        }
    }
    tracing::debug!(db = %store.path().display(), "queue store thread stopped");
}
