//! The engine: binds the listener, owns the shared state, and hands out an [`EngineHandle`] that
//! the CLI, the tray and tests use (status, events, pause, shutdown).

mod shared;

pub use shared::{Shared, UpstreamState};

use crate::config::Settings;
use crate::control::StatusSnapshot;
use crate::events::Event;
use crate::identity::IdentityKey;
use crate::secrets::{Account, Namespace, SecretStore};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot listen on {addr}: {source}. Is another Weir already running? Use --listen to pick another port.")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
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
    /// Where the dashboard's settings panel saves changes (the file read at start, or the OS
    /// default location); `None`: settings are read-only.
    pub config_file: Option<PathBuf>,
}

impl EngineOptions {
    pub fn new(settings: Settings, data_dir: PathBuf) -> EngineOptions {
        EngineOptions {
            settings,
            data_dir,
            control_secret: None,
            local_ca: None,
            config_file: None,
        }
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
    std::fs::create_dir_all(&opts.data_dir).map_err(|source| EngineError::DataDir {
        path: opts.data_dir.clone(),
        source,
    })?;
    let addr = opts.settings.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| EngineError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| EngineError::Bind { addr, source })?;
    let secrets = SecretStore::detect(
        &Namespace::for_data_dir(&opts.data_dir),
        opts.settings.queue.memory_credentials,
    )
    .await;
    let secret = match opts.control_secret {
        Some(s) => s,
        None => control_secret(&secrets).await,
    };
    let max_age = opts.settings.queue.max_age;
    let config_file = opts.config_file.clone();
    let mut shared = Shared::new(
        opts.settings,
        local_addr.port(),
        identity_key(&secrets).await,
        secret,
    );
    match crate::queue::Queue::open(&opts.data_dir, secrets).await {
        Ok(mut q) => {
            q.max_age = max_age;
            match q.store.recover_after_crash(crate::queue::now_ms()).await {
                Ok(items) if !items.is_empty() => tracing::warn!(count = items.len(), "creates were being replayed when Weir stopped; they are in doubt and will be looked up upstream before any replay"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not recover the create queue"),
            }
            shared.queue = Some(q);
        }
        Err(e) => {
            tracing::error!(error = %e, fix = %e.fix(), "the create queue is unavailable; creates cannot be queued during outages");
            shared.queue_error = Some(format!("{}. {}", e.detail(), e.fix()));
        }
    }
    shared.config_file = config_file;
    shared.intercept = crate::intercept::interceptor_for(&shared.settings, opts.local_ca);
    let shared = Arc::new(shared);
    let stored = crate::control::token_stored_in_keychain(&shared).await;
    shared
        .token_stored
        .store(stored, std::sync::atomic::Ordering::Relaxed);
    crate::queue::replay::spawn_workers(&shared);
    if let Some(cfg) = shared.settings.github_status.clone() {
        let watcher = crate::github_status::start(&shared, cfg);
        if let Ok(mut g) = shared.github.lock() {
            *g = Some(watcher);
        }
    }
    forward_breaker_events(&shared);
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

/// The per-install control secret: kept in the keychain so the CLI and tray can read it; a
/// random per-run secret when there is no keychain or it cannot be read right now.
async fn control_secret(secrets: &SecretStore) -> String {
    secrets
        .load_or_create(
            Account::ControlSecret,
            new_secret,
            |s: &String| s.clone(),
            |s: &str| Some(s.to_string()),
        )
        .await
}

/// The per-install identity key, kept in the keychain so cache/dedupe keys (and a queued
/// create's dedupe key) stay the same across restarts; per-run random without a keychain.
async fn identity_key(secrets: &SecretStore) -> IdentityKey {
    let key = secrets
        .load_or_create(
            Account::IdentityKey,
            rand::random::<[u8; 32]>,
            |k: &[u8; 32]| hex::encode(k),
            |s: &str| {
                hex::decode(s.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
            },
        )
        .await;
    IdentityKey::new(key)
}

/// Turns every breaker transition into an engine [`Event::Breaker`] (tray, dashboard, logs).
fn forward_breaker_events(shared: &Arc<Shared>) {
    for st in &shared.upstreams {
        crate::events::forward(
            st.guard.breaker.subscribe(),
            shared.events.clone(),
            shared.stopping.subscribe(),
            |e| {
                tracing::warn!(upstream = %e.breaker, from = %e.from, to = %e.to, reason = %e.reason, "circuit breaker changed");
                Event::Breaker {
                    upstream: e.breaker,
                    from: e.from.as_str().to_string(),
                    to: e.to.as_str().to_string(),
                    at: e.at,
                    reason: e.reason,
                }
            },
        );
    }
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
        format!(
            "{}#secret={}",
            self.dashboard_url(),
            self.shared.control_secret
        )
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, drains in-flight requests (bounded by `limits.drain_timeout`), returns
    /// when done. Calling it twice is harmless.
    pub async fn shutdown(&self) {
        self.shared.stopping.send_replace(true);
        let watcher = self.shared.github.lock().ok().and_then(|mut g| g.take());
        if let Some(w) = watcher {
            w.stop().await;
        }
        if let Some(tx) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}
