//! [`AsyncStore`]: a [`Store`] for async code: [`AsyncStore::call`] runs any of its operations.
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

    /// Runs `f` on the store thread (several steps in one `f` run without other requests in
    /// between).
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
