//! The engine: binds the listener, owns the shared state, and hands out an [`EngineHandle`] that
//! the CLI, the tray and tests use (status, events, pause, shutdown).

mod shared;

pub use shared::{Shared, UpstreamState};

use crate::config::Settings;
use crate::control::StatusSnapshot;
use crate::events::Event;
use crate::identity::IdentityKey;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot listen on {addr}: {source}. Is another Weir already running? Use --listen to pick another port.")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot create data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
}

/// What the engine needs to start.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub settings: Settings,
    pub data_dir: PathBuf,
    /// The per-install control secret; `None` makes a random one for this run.
    pub control_secret: Option<String>,
    /// Weir's local CA (see `intercept::ca_store`); with it, CONNECTs to managed https
    /// upstreams are TLS-terminated unless `intercept = false`.
    pub local_ca: Option<Arc<weir_tls::LocalCa>>,
}

impl EngineOptions {
    pub fn new(settings: Settings, data_dir: PathBuf) -> EngineOptions {
        EngineOptions { settings, data_dir, control_secret: None, local_ca: None }
    }
}

/// A fresh random control secret (32 bytes, hex).
pub fn new_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// A running engine. Cheap to clone; [`EngineHandle::shutdown`] stops it.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
    task: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

pub async fn start(opts: EngineOptions) -> Result<EngineHandle, EngineError> {
    std::fs::create_dir_all(&opts.data_dir).map_err(|source| EngineError::DataDir { path: opts.data_dir.clone(), source })?;
    let addr = opts.settings.listen;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| EngineError::Bind { addr, source })?;
    let local_addr = listener.local_addr().map_err(|source| EngineError::Bind { addr, source })?;
    let secret = opts.control_secret.unwrap_or_else(new_secret);
    let mut shared = Shared::new(opts.settings, local_addr.port(), IdentityKey::random(), secret);
    shared.intercept = crate::intercept::interceptor_for(&shared.settings, opts.local_ca);
    let shared = Arc::new(shared);
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(crate::server::serve(listener, shared.clone(), async {
        let _ = rx.await;
    }));
    Ok(EngineHandle {
        shared,
        local_addr,
        stop: Arc::new(std::sync::Mutex::new(Some(tx))),
        task: Arc::new(tokio::sync::Mutex::new(Some(task))),
    })
}

impl EngineHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    pub fn dashboard_url(&self) -> String {
        format!("{}/_weir/", self.shared.base_url)
    }

    pub fn status(&self) -> StatusSnapshot {
        crate::control::snapshot(&self.shared)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    pub fn is_paused(&self) -> bool {
        self.shared.is_paused()
    }

    /// While paused, Weir passes everything through untouched.
    pub fn set_paused(&self, paused: bool) {
        crate::control::set_paused(&self.shared, paused);
    }

    /// The secret mutating control calls need (`X-Weir-Secret`).
    pub fn control_secret(&self) -> &str {
        &self.shared.control_secret
    }

    /// The dashboard URL with the control secret in its fragment (never sent to a server;
    /// the page keeps it in session storage).
    pub fn dashboard_url_with_secret(&self) -> String {
        format!("{}#secret={}", self.dashboard_url(), self.shared.control_secret)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, drains in-flight requests (bounded by `limits.drain_timeout`), returns
    /// when done. Calling it twice is harmless.
    pub async fn shutdown(&self) {
        self.shared.stopping.send_replace(true);
        if let Some(tx) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}
