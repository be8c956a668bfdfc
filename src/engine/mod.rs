//! The engine: binds the listener, builds each part with the state it owns (upstreams, queue,
//! request path, control API), wires them together, and hands out an [`EngineHandle`] — the
//! one API the CLI, the tray and tests use (typed status, events, mode, shutdown).
//!
//! Each optional part wires itself in through hooks the engine calls by name: `gateway::…`
//! (feature `gateway`: the team gateway's doors, admin token and shared queue) and `team::…`
//! (feature `team`: the NATS link). Built without a feature, the stubs of the same names in
//! `without.rs` stand in, so `start` and the steps under it name no feature. The background
//! parts, each started only when configured or waiting on an event (replays, the offline
//! detector, GitHub Status, the team link, the sessions poller), are in `background.rs`.

mod background;
#[cfg(feature = "gateway")]
mod gateway;
mod handle;
mod keys;
#[cfg(test)]
mod record_tests;
mod router;
#[cfg(feature = "team")]
mod team;
mod without;
#[cfg(not(feature = "gateway"))]
use without::gateway;
#[cfg(not(feature = "team"))]
use without::team;

pub use handle::EngineHandle;
pub use keys::new_secret;
#[cfg(feature = "fuzzing")]
pub(crate) use router::serve_io;

use crate::config::{LiveSettings, Settings};
use crate::control::Control;
use crate::events::Bus;
use crate::mode::Modes;
use crate::pipeline::{Proxy, ProxyParts};
use crate::queue::QueueState;
use crate::reload::Reloader;
use crate::secrets::SecretStore;
use crate::upstream::Upstreams;
use keys::Keys;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::oneshot;
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
    #[error("another Weir{by} is already using the data directory {path}: stop it, or give this one a data directory of its own with --data-dir", by = .held_by.map(|p| format!(" (process {p})")).unwrap_or_default())]
    DataDirInUse { path: PathBuf, held_by: Option<u32> },
    #[cfg(feature = "gateway")]
    #[error("{0}")]
    Gateway(#[from] crate::gateway::GatewayError),
    #[cfg(feature = "gateway")]
    #[error("a team gateway runs no developer's local agent: remove the [local_agent] table from the gateway's config file (on a gateway, creates whose policy says `local` are queued)")]
    LocalAgentOnGateway,
    #[cfg(feature = "gateway")]
    #[error("the gateway's shared create queue cannot be used: {0}. {fix}", fix = .0.fix())]
    SharedQueue(weir_store::StoreError),
    /// A restart read a config file that does not validate; the running engine was left
    /// running.
    #[error("not restarted, the config file is invalid: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// `[secrets] store` names a store this machine cannot give.
    #[error("{0}")]
    Secrets(#[from] crate::secrets::ChooseError),
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
    /// The team key and NATS login for `[team]`; `None` reads them from the keychain (tests
    /// and the lab pass them here).
    pub team_secrets: Option<crate::team::TeamSecrets>,
    /// Team gateway mode (`weir serve --gateway`): the TLS listeners, the admin token and the
    /// shared queue, read from `[gateway]` by [`crate::gateway::Gateway::load`].
    #[cfg(feature = "gateway")]
    pub gateway: Option<crate::gateway::Gateway>,
}

impl EngineOptions {
    pub fn new(settings: Settings, data_dir: PathBuf) -> EngineOptions {
        EngineOptions {
            settings,
            data_dir,
            control_secret: None,
            local_ca: None,
            config_file: None,
            team_secrets: None,
            #[cfg(feature = "gateway")]
            gateway: None,
        }
    }
}

pub async fn start(opts: EngineOptions) -> Result<EngineHandle, EngineError> {
    // 1. The data directory and the doors, bound before anything else opens.
    let mut doors = open_doors(&opts).await?;
    // 2. What the keychain holds: the control secret, the install id, the optional parts'.
    let keys = Keys::load(&opts).await?;
    // 3. The engine's parts, from settings to the request path (the identity key and the
    //    cache's seal come from the same store, which the queue then keeps).
    let parts = open_parts(&opts, &doors, keys.secrets).await?;
    // 4. The control API over them.
    let control = control_api(&opts, &doors, &parts, keys.secret, keys.install_id).await;
    // 5. The background work: replays, the offline detector, and what is configured.
    background::start(&opts, &parts, &control, keys.team);
    // 6. Serve, until stopped.
    let (tx, rx) = oneshot::channel::<()>();
    let (local_addr, admin_addr) = (doors.local_addr, doors.admin_addr);
    let lock = doors.lock.take();
    let task = serve_doors(&opts, doors, keys.admin_token, &parts, &control, rx);
    Ok(EngineHandle {
        control,
        options: Arc::new(opts),
        local_addr,
        admin_addr,
        stop: Arc::new(std::sync::Mutex::new(Some(tx))),
        task: Arc::new(tokio::sync::Mutex::new(Some(task))),
        data_dir_lock: Arc::new(std::sync::Mutex::new(lock)),
    })
}

/// The listeners: the clients' door (a laptop's loopback, or the gateway's TLS door on any
/// address) and, in gateway mode, the admin door.
struct Doors {
    listener: tokio::net::TcpListener,
    local_addr: SocketAddr,
    admin_listener: Option<tokio::net::TcpListener>,
    admin_addr: Option<SocketAddr>,
    /// The data dir's lock, handed to the engine's handle, which holds it until shut down.
    lock: Option<crate::paths::DirLock>,
}

async fn open_doors(opts: &EngineOptions) -> Result<Doors, EngineError> {
    crate::paths::create_private_dir(&opts.data_dir).map_err(|source| EngineError::DataDir {
        path: opts.data_dir.clone(),
        source,
    })?;
    // One engine per data dir: a second one's start-up recovery would take the first one's
    // creates in flight for a crash's and look them up, and both would replay one queue.
    let lock = match crate::paths::lock_dir(&opts.data_dir) {
        Ok(lock) => Some(lock),
        Err(crate::paths::DirLockError::Held(held_by)) => {
            return Err(EngineError::DataDirInUse {
                path: opts.data_dir.clone(),
                held_by,
            })
        }
        // A read-only data dir: Weir runs (creates are then refused, the queue says why),
        // but cannot tell whether another Weir uses the dir.
        Err(crate::paths::DirLockError::Unlockable(e)) => {
            tracing::warn!(dir = %opts.data_dir.display(), error = %e, "the data directory cannot hold a lock file; make sure no other Weir uses it");
            None
        }
        Err(crate::paths::DirLockError::Io(source)) => {
            return Err(EngineError::DataDir {
                path: opts.data_dir.clone(),
                source,
            })
        }
    };
    gateway::check(opts)?;
    let gateway = gateway::listen(opts);
    let addr = gateway.map_or(opts.settings.listen, |(clients, _)| clients);
    let listener = bind(addr).await?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| EngineError::Bind { addr, source })?;
    let admin_listener = match gateway {
        Some((_, admin)) => Some(bind(admin).await?),
        None => None,
    };
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    Ok(Doors {
        listener,
        local_addr,
        admin_listener,
        admin_addr,
        lock,
    })
}

/// The engine's parts, shared by the request path, the control API and the background work.
struct Parts {
    live: LiveSettings,
    settings: Arc<Settings>,
    bus: Bus,
    accounts: Arc<crate::accounts::Accounts>,
    upstreams: Arc<Upstreams>,
    queue: Arc<QueueState>,
    modes: Arc<Modes>,
    proxy: Arc<Proxy>,
}

async fn open_parts(
    opts: &EngineOptions,
    doors: &Doors,
    secrets: SecretStore,
) -> Result<Parts, EngineError> {
    let identity_key = match gateway::identity_key(opts) {
        Some(shared) => shared,
        None => keys::identity_key(&secrets).await,
    };
    // Before the queue takes the secret store: the disk cache's sealing key lives there too.
    let cache = crate::cache::Cache::open(
        opts.settings.cache_max_bytes,
        &opts.data_dir,
        opts.settings.cache_disk_max_bytes,
        &secrets,
    )
    .await;
    let live = LiveSettings::new(opts.settings.clone());
    let settings = live.get();
    let bus = Bus::new();
    let accounts = Arc::new(
        crate::accounts::Accounts::open(&settings, identity_key.clone(), &opts.data_dir).await,
    );
    let upstreams = Arc::new(Upstreams::new(live.clone(), accounts.clone()));
    // Idle means asleep (#32), for every task a default `weir serve` starts (see
    // `background`). Baselines: rewritten every 5 minutes.
    crate::upstream::baselines::spawn(
        upstreams.clone(),
        opts.data_dir.clone(),
        bus.stopping(),
        bus.tasks(),
    );
    let queue = Arc::new(match gateway::shared_queue(opts) {
        Some(shared) => shared.open(secrets, &settings, &upstreams, &bus).await?,
        None => open_queue(&opts.data_dir, secrets, &settings).await,
    });
    let modes = Arc::new(Modes::load(Some(&opts.data_dir), bus.clone()));
    let network = Arc::new(crate::network::Network::load(
        Some(&opts.data_dir),
        bus.clone(),
        settings.network.detect_os,
    ));
    // Only with the `metered` feature and `detect_os`: follows D-Bus signals; without a bus
    // it asks again after 1 s, doubling to once a minute.
    crate::network::spawn_watcher(network.clone(), &settings.network, &bus);
    let handoffs = Arc::new(crate::handoff::Handoffs::new(
        queue.clone(),
        bus.clone(),
        live.clone(),
        &opts.data_dir,
    ));
    // Loads the offers a run left, then sleeps until a pending offer runs out or one is made
    // (none can be without `[local_agent]`).
    handoffs.start();
    let mut proxy = Proxy::new(ProxyParts {
        modes: modes.clone(),
        intercept: crate::intercept::interceptor_for(
            &settings,
            opts.local_ca.clone(),
            gateway::ca_certificate(opts).unwrap_or_else(|| {
                crate::intercept::CaCertificate::Own(
                    crate::intercept::ca_store::CaStore::cert_path_in(&opts.data_dir),
                )
            }),
        ),
        live: live.clone(),
        port: doors.local_addr.port(),
        identity_key,
        cache,
        upstreams: upstreams.clone(),
        queue: queue.clone(),
        bus: bus.clone(),
        network,
        handoffs,
    });
    if let Some(url) = gateway::base_url(opts, doors.local_addr) {
        proxy.base_url = url;
    }
    Ok(Parts {
        live,
        settings,
        bus,
        accounts,
        upstreams,
        queue,
        modes,
        proxy: Arc::new(proxy),
    })
}

async fn control_api(
    opts: &EngineOptions,
    doors: &Doors,
    parts: &Parts,
    secret: String,
    install_id: String,
) -> Arc<Control> {
    let (proxy, bus) = (&parts.proxy, &parts.bus);
    let reload = Arc::new(Reloader::new(
        parts.live.clone(),
        proxy.clone(),
        bus.clone(),
        opts.config_file.clone(),
    ));
    // Start what is used: a config file that does not exist has nothing to watch, so a
    // zero-config start creates no config directory and runs no OS file watch. A file the
    // dashboard writes later is applied as it is written; one made by hand is read on restart.
    if opts.config_file.as_ref().is_some_and(|f| f.exists()) {
        crate::reload::watch::spawn(reload.clone(), bus.stopping(), bus.tasks());
    }
    let control = Arc::new(Control {
        proxy: proxy.clone(),
        sessions: Arc::new(crate::sessions::Sessions::new()),
        secret,
        install_id,
        reload,
        token_stored: Default::default(),
        github: std::sync::Mutex::new(None),
        // The slot `team::start` fills (the field exists only in builds with the link).
        #[cfg(feature = "team")]
        team: std::sync::OnceLock::new(),
        started_at: SystemTime::now(),
        saved: crate::control::SavedWindow::new(std::time::Instant::now()),
        gateway: gateway::status(opts, doors.local_addr, doors.admin_addr, &proxy.base_url),
    });
    let stored = crate::control::token_stored_in_keychain(&control).await;
    control
        .token_stored
        .store(stored, std::sync::atomic::Ordering::Relaxed);
    control
}

/// The doors served until `rx` fires: the gateway's two TLS doors in gateway mode, else the
/// laptop's loopback door.
fn serve_doors(
    opts: &EngineOptions,
    doors: Doors,
    admin_token: Option<String>,
    parts: &Parts,
    control: &Arc<Control>,
    rx: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    if let Some(g) = gateway::doors(opts, doors.admin_listener, admin_token) {
        let serving = g.serve(doors.listener, &parts.proxy, control, &parts.settings, rx);
        return parts.bus.spawn(serving);
    }
    serve_laptop(
        doors.listener,
        parts.live.clone(),
        &parts.proxy,
        control,
        rx,
        &parts.bus,
    )
}

/// The laptop's one door: loopback HTTP, Weir's own paths to the control API and everything
/// else into the request pipeline ([`router`]), until `stop` fires.
fn serve_laptop(
    listener: tokio::net::TcpListener,
    live: LiveSettings,
    proxy: &Arc<Proxy>,
    control: &Arc<Control>,
    stop: oneshot::Receiver<()>,
    bus: &Bus,
) -> JoinHandle<()> {
    let router = router::Router {
        proxy: proxy.clone(),
        control: control.clone(),
    };
    bus.spawn(crate::server::serve(
        listener,
        live,
        proxy.base_url.clone(),
        move |req| router.clone().route(req),
        async {
            let _ = stop.await;
        },
    ))
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, EngineError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| EngineError::Bind { addr, source })
}

/// Opens the durable create queue and recovers items a crash left mid-replay; unavailable
/// (with the reason and the fix) when it cannot be opened.
async fn open_queue(data_dir: &Path, secrets: SecretStore, settings: &Settings) -> QueueState {
    match crate::queue::Queue::open(data_dir, secrets).await {
        Ok(mut q) => {
            q.max_age = settings.queue.max_age;
            match q.store.recover_after_crash(crate::queue::now_ms()).await {
                Ok(items) if !items.is_empty() => tracing::warn!(count = items.len(), "creates were being replayed when Weir stopped; they are in doubt and will be looked up upstream before any replay"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not recover the create queue"),
            }
            QueueState::Open(q)
        }
        Err(e) => {
            tracing::error!(error = %e, fix = %e.fix(), "the create queue is unavailable; creates cannot be queued during outages");
            QueueState::Unavailable(format!("{}. {}", e.detail(), e.fix()))
        }
    }
}
