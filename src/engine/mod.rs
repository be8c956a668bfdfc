//! The engine: binds the listener, builds each part with the state it owns (upstreams, queue,
//! request path, control API), wires them together, and hands out an [`EngineHandle`] — the
//! one API the CLI, the tray and tests use (typed status, events, mode, shutdown).

#[cfg(feature = "gateway")]
mod gateway;
mod router;
pub(crate) use router::serve_io;

use crate::config::{LiveSettings, Settings};
use crate::control::Control;
use crate::events::{Bus, Event};
use crate::identity::IdentityKey;
use crate::mode::{ChosenBy, Mode, ModeStatus, Modes};
use crate::pipeline::{Proxy, ProxyParts};
use crate::queue::replay::Replayer;
use crate::queue::QueueState;
use crate::reload::Reloader;
use crate::secrets::{Account, SecretStore};
use crate::status::StatusSnapshot;
use crate::upstream::Upstreams;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
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

/// A fresh random control secret (32 bytes, hex).
pub fn new_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// A running engine. Cheap to clone; [`EngineHandle::shutdown`] stops it.
#[derive(Clone)]
pub struct EngineHandle {
    control: Arc<Control>,
    /// What this engine was started with (a restart starts from them).
    options: Arc<EngineOptions>,
    local_addr: SocketAddr,
    /// The gateway's admin listener, in gateway mode.
    admin_addr: Option<SocketAddr>,
    stop: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
    task: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

pub async fn start(opts: EngineOptions) -> Result<EngineHandle, EngineError> {
    // 1. The data directory and the doors, bound before anything else opens.
    let doors = open_doors(&opts).await?;
    // 2. What the keychain holds: the control secret, the install id, the optional parts'.
    #[cfg_attr(not(feature = "gateway"), allow(unused_mut))]
    let mut keys = Keys::load(&opts).await?;
    #[cfg(feature = "gateway")]
    let admin_token = keys.extra.admin_token.take();
    // 3. The engine's parts, from settings to the request path (the identity key and the
    //    cache's seal come from the same store, which the queue then keeps).
    let parts = open_parts(&opts, &doors, keys.secrets).await?;
    // 4. The control API over them.
    let control = control_api(&opts, &doors, &parts, keys.secret, keys.install_id).await;
    // 5. The background work: replays, the offline detector, and what is configured.
    start_background(&opts, &parts, &control, keys.extra);
    // 6. Serve, until stopped.
    let (tx, rx) = oneshot::channel::<()>();
    let (local_addr, admin_addr) = (doors.local_addr, doors.admin_addr);
    #[rustfmt::skip]
    let task = serve_doors(&opts, doors, #[cfg(feature = "gateway")] admin_token, &parts, &control, rx);
    Ok(EngineHandle {
        control,
        options: Arc::new(opts),
        local_addr,
        admin_addr,
        stop: Arc::new(std::sync::Mutex::new(Some(tx))),
        task: Arc::new(tokio::sync::Mutex::new(Some(task))),
    })
}

/// The listeners: the clients' door (a laptop's loopback, or the gateway's TLS door on any
/// address) and, in gateway mode, the admin door.
struct Doors {
    listener: tokio::net::TcpListener,
    local_addr: SocketAddr,
    #[cfg(feature = "gateway")]
    admin_listener: Option<tokio::net::TcpListener>,
    admin_addr: Option<SocketAddr>,
}

async fn open_doors(opts: &EngineOptions) -> Result<Doors, EngineError> {
    crate::paths::create_private_dir(&opts.data_dir).map_err(|source| EngineError::DataDir {
        path: opts.data_dir.clone(),
        source,
    })?;
    #[cfg(feature = "gateway")]
    if opts.gateway.is_some() && opts.settings.local_agent.is_some() {
        return Err(EngineError::LocalAgentOnGateway);
    }
    #[cfg(feature = "gateway")]
    let addr = opts
        .gateway
        .as_ref()
        .map_or(opts.settings.listen, |g| g.settings.listen);
    #[cfg(not(feature = "gateway"))]
    let addr = opts.settings.listen;
    let listener = bind(addr).await?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| EngineError::Bind { addr, source })?;
    #[cfg(feature = "gateway")]
    let admin_listener = match &opts.gateway {
        Some(g) => Some(bind(g.settings.admin_listen).await?),
        None => None,
    };
    #[cfg(feature = "gateway")]
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    #[cfg(not(feature = "gateway"))]
    let admin_addr = None;
    Ok(Doors {
        listener,
        local_addr,
        #[cfg(feature = "gateway")]
        admin_listener,
        admin_addr,
    })
}

/// What is read from (or first created in) the secret store at start.
struct Keys {
    secrets: SecretStore,
    secret: String,
    install_id: String,
    extra: Extra,
}

/// The secrets of the optional parts.
#[derive(Default)]
struct Extra {
    #[cfg(feature = "team")]
    team_secrets: Option<crate::team::TeamSecrets>,
    #[cfg(feature = "gateway")]
    admin_token: Option<String>,
}

impl Keys {
    async fn load(opts: &EngineOptions) -> Result<Keys, EngineError> {
        let secrets = SecretStore::open(
            &opts.data_dir,
            opts.settings.secrets_store,
            opts.settings.queue.memory_credentials,
        )
        .await?;
        let secret = match opts.control_secret.clone() {
            Some(s) => s,
            None => control_secret(&secrets).await,
        };
        let install_id = install_id(&secrets).await;
        #[cfg_attr(not(any(feature = "team", feature = "gateway")), allow(unused_mut))]
        let mut extra = Extra::default();
        #[cfg(feature = "team")]
        {
            extra.team_secrets = match (&opts.settings.team, opts.team_secrets.clone()) {
                (None, _) => None,
                (Some(_), Some(given)) => Some(given),
                (Some(_), None) => Some(crate::team::TeamSecrets::load(&secrets).await),
            };
        }
        #[cfg(feature = "gateway")]
        {
            extra.admin_token = match &opts.gateway {
                Some(g) => Some(match &g.admin_token {
                    Some(t) => t.clone(),
                    None => gateway::admin_token(&secrets).await?,
                }),
                None => None,
            };
        }
        Ok(Keys {
            secrets,
            secret,
            install_id,
            extra,
        })
    }
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
    #[cfg(feature = "gateway")]
    let shared = opts.gateway.as_ref().and_then(|g| g.postgres.clone());
    #[cfg(feature = "gateway")]
    let identity_key = match &shared {
        // Every replica keys identities alike: one caller, one key, whichever replica.
        Some((_, key)) => IdentityKey::new(key.identity_key()),
        None => identity_key(&secrets).await,
    };
    #[cfg(not(feature = "gateway"))]
    let identity_key = identity_key(&secrets).await;
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
    // Idle means asleep (#32), for every task a default `weir serve` starts: each runs only
    // when configured, waits on an event, or wakes no more often than once a minute unless
    // something is due. Baselines: rewritten every 5 minutes.
    crate::upstream::baselines::spawn(
        upstreams.clone(),
        opts.data_dir.clone(),
        bus.stopping(),
        bus.tasks(),
    );
    #[cfg(feature = "gateway")]
    let queue = match (&shared, &opts.gateway) {
        (Some((pg, key)), Some(g)) => Arc::new(
            gateway::open_shared_queue(g, pg.clone(), key, secrets, &settings, &upstreams, &bus)
                .await?,
        ),
        _ => Arc::new(open_queue(&opts.data_dir, secrets, &settings).await),
    };
    #[cfg(not(feature = "gateway"))]
    let queue = Arc::new(open_queue(&opts.data_dir, secrets, &settings).await);
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
    #[cfg_attr(not(feature = "gateway"), allow(unused_mut))]
    let mut proxy = Proxy::new(ProxyParts {
        modes: modes.clone(),
        intercept: crate::intercept::interceptor_for(&settings, opts.local_ca.clone()),
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
    #[cfg(feature = "gateway")]
    if let Some(g) = &opts.gateway {
        // Problem `type` URLs name the clients' door as the clients reach it (it serves the
        // problem pages), not the laptop's loopback.
        proxy.base_url = crate::gateway::public_base_url(&g.settings, doors.local_addr);
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
    #[cfg(not(feature = "gateway"))]
    let _ = doors;
    let control = Arc::new(Control {
        proxy: proxy.clone(),
        sessions: Arc::new(crate::sessions::Sessions::new()),
        secret,
        install_id,
        reload,
        token_stored: Default::default(),
        github: std::sync::Mutex::new(None),
        #[cfg(feature = "team")]
        team: std::sync::OnceLock::new(),
        started_at: SystemTime::now(),
        saved: crate::control::SavedWindow::new(std::time::Instant::now()),
        #[cfg(feature = "gateway")]
        gateway: opts
            .gateway
            .as_ref()
            .map(|g| gateway::status(g, doors.local_addr, doors.admin_addr, &proxy.base_url)),
        #[cfg(not(feature = "gateway"))]
        gateway: None,
    });
    let stored = crate::control::token_stored_in_keychain(&control).await;
    control
        .token_stored
        .store(stored, std::sync::atomic::Ordering::Relaxed);
    control
}

fn start_background(opts: &EngineOptions, parts: &Parts, control: &Arc<Control>, extra: Extra) {
    let (upstreams, bus, settings) = (&parts.upstreams, &parts.bus, &parts.settings);
    Replayer {
        queue: parts.queue.clone(),
        accounts: parts.accounts.clone(),
        upstreams: upstreams.clone(),
        bus: bus.clone(),
        modes: parts.modes.clone(),
        lookups: Default::default(),
    }
    .spawn_workers();
    // Replay workers and the queue's expiry sleep until something is due or the queue
    // changes (`queue::housekeeping`). The offline detector waits for an upstream to turn
    // unreachable and probes only while offline.
    crate::mode::spawn_detector(
        parts.modes.clone(),
        upstreams.clone(),
        settings.offline.clone(),
        bus,
    );
    // On by default (`watch_github_status = false` turns it off): one check a minute, longer
    // while failing.
    if let Some(cfg) = settings.github_status.clone() {
        let watcher = crate::github_status::start(upstreams.client.clone(), bus, cfg);
        crate::github_status::drive_caution(watcher.watch(), upstreams.clone(), bus);
        if let Ok(mut g) = control.github.lock() {
            *g = Some(watcher);
        }
    }
    forward_breaker_events(upstreams, bus);
    #[cfg(feature = "team")]
    if let (Some(team), Some(team_secrets)) = (settings.team.clone(), extra.team_secrets) {
        start_team(control, team, team_secrets, &opts.data_dir, upstreams, bus);
    }
    #[cfg(not(feature = "team"))]
    let _ = (opts, extra);
    // The sessions poller waits for a token change while none is stored (no timer, no
    // request); it reads the keychain once at start, since a locked keychain reads as "no
    // token" to `token_stored` and is asked again once a minute.
    let watcher_view = control.clone();
    crate::sessions::poller::Poller {
        sessions: control.sessions.clone(),
        proxy: parts.proxy.clone(),
        github: Arc::new(move || {
            watcher_view
                .github
                .lock()
                .ok()
                .and_then(|g| g.as_ref().map(|h| h.snapshot()))
        }),
    }
    .spawn();
}

/// The doors served until `rx` fires: the gateway's two TLS doors in gateway mode, else the
/// laptop's loopback door.
fn serve_doors(
    opts: &EngineOptions,
    doors: Doors,
    #[cfg(feature = "gateway")] admin_token: Option<String>,
    parts: &Parts,
    control: &Arc<Control>,
    rx: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    #[cfg(feature = "gateway")]
    if let (Some(gateway), Some(admin_listener), Some(admin_token)) =
        (opts.gateway.clone(), doors.admin_listener, admin_token)
    {
        let d = gateway::Doors {
            gateway,
            admin_listener,
            admin_token,
        };
        let serving = d.serve(doors.listener, &parts.proxy, control, &parts.settings, rx);
        return parts.bus.spawn(serving);
    }
    #[cfg(not(feature = "gateway"))]
    let _ = opts;
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

/// The install id `/_weir/api/health` answers (not a secret): kept in the keychain with the
/// control secret, so the CLI can tell this install's Weir from anything else on the port.
async fn install_id(secrets: &SecretStore) -> String {
    secrets
        .load_or_create(
            Account::InstallId,
            || hex::encode(rand::random::<[u8; 16]>()),
            |s: &String| s.clone(),
            |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty()),
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

/// Starts the team link (`[team]`); it connects in the background and never delays start.
#[cfg(feature = "team")]
fn start_team(
    control: &Arc<Control>,
    settings: crate::config::TeamSettings,
    secrets: crate::team::TeamSecrets,
    data_dir: &Path,
    upstreams: &Arc<Upstreams>,
    bus: &Bus,
) {
    let weak = Arc::downgrade(control);
    let team = crate::team::Team::start(crate::team::TeamParts {
        settings,
        secrets,
        me: crate::team::peer_id(data_dir),
        upstreams: upstreams.clone(),
        bus: bus.clone(),
        indicator: Box::new(move || {
            let ctl = weak.upgrade()?;
            let g = ctl.github.lock().ok()?;
            let snap = g.as_ref()?.snapshot();
            crate::team::fact::Indicator::parse(snap.indicator.as_deref()?)
        }),
    });
    if control.team.set(team).is_err() {
        tracing::warn!("the team link was started twice; keeping the first");
    }
}

/// Turns every breaker transition into an engine [`Event::Breaker`] (tray, dashboard, logs).
fn forward_breaker_events(upstreams: &Upstreams, bus: &Bus) {
    for u in &upstreams.list {
        crate::events::forward(u.gate.breaker.subscribe(), bus, |e| {
            tracing::warn!(upstream = %e.breaker, from = %e.from, to = %e.to, reason = %e.reason, "circuit breaker changed");
            Event::Breaker {
                upstream: e.breaker,
                from: e.from,
                to: e.to,
                at: e.at,
                reason: e.reason,
            }
        });
    }
}

impl EngineHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The gateway's admin listener (gateway mode only).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> &str {
        &self.control.proxy.base_url
    }

    pub fn dashboard_url(&self) -> String {
        format!("{}/_weir/", self.base_url())
    }

    /// The whole status document, queue counts included (read from SQLite off the async
    /// workers), exactly as `/_weir/api/status` serves it.
    pub async fn status(&self) -> StatusSnapshot {
        crate::control::snapshot_full(&self.control).await
    }

    /// The status document without the queue counts and the keychain check (`queue.counts`
    /// is `null`): no SQLite or keychain read, so it is cheap enough to poll, and it never
    /// leaves the async runtime (tests on paused time rely on that).
    pub fn status_now(&self) -> StatusSnapshot {
        crate::control::snapshot(&self.control)
    }

    /// The sessions companion's part of the status, without the queue's database read (the
    /// tray's sessions line and submenu can read it as often as they like).
    pub fn sessions(&self) -> crate::status::SessionsStatus {
        self.control.sessions.status()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.control.proxy.bus.subscribe()
    }

    /// Local-agent hand-off offers (#14): make one ([`crate::handoff::Handoffs::offer`]; the
    /// policy phase does this for creates whose action is `local`), list, confirm, decline.
    /// The tray confirms and declines through it.
    pub fn handoffs(&self) -> &crate::handoff::Handoffs {
        &self.control.proxy.handoffs
    }

    /// The network as fallback policy sees it (metered or not): `.status()` is the tray's
    /// "Network:" line (changes are announced as [`Event::Network`]); the tray's toggle calls
    /// [`EngineHandle::set_network_metered`] (kept across restarts; `force` is in memory only).
    pub fn network(&self) -> Arc<crate::network::Network> {
        self.control.proxy.network.clone()
    }

    /// The mode (automatic, offline, cache only, pass-through), who chose it and why.
    pub fn mode(&self) -> ModeStatus {
        self.control.proxy.modes.status()
    }

    /// Chooses a mode: applied at once, kept across restarts, announced as
    /// [`Event::ModeChanged`].
    pub fn set_mode(&self, mode: Mode, by: ChosenBy) -> ModeStatus {
        self.control.proxy.modes.choose(mode, by)
    }

    /// The metered override: `Some(true)`/`Some(false)` force it, `None` follows the OS again;
    /// kept across restarts (the tray's toggle passes [`ChosenBy::Tray`]).
    pub fn set_network_metered(
        &self,
        metered: Option<bool>,
        by: ChosenBy,
    ) -> crate::network::NetworkStatus {
        self.control.proxy.network.choose(metered, by)
    }

    /// Whether the mode is pass-through (its old name was "pause").
    pub fn is_paused(&self) -> bool {
        self.control.proxy.is_paused()
    }

    /// The tray's old pause switch: `true` chooses pass-through, `false` goes from
    /// pass-through back to automatic. New code calls [`EngineHandle::set_mode`].
    pub fn set_paused(&self, paused: bool) {
        self.control.proxy.set_paused(paused, ChosenBy::Tray);
    }

    /// This install's id, as `/_weir/api/health` answers it.
    pub fn install_id(&self) -> &str {
        &self.control.install_id
    }

    /// The secret mutating control calls need (`X-Weir-Secret`).
    pub fn control_secret(&self) -> &str {
        &self.control.secret
    }

    /// The dashboard URL with the control secret in its fragment (never sent to a server;
    /// the page keeps it in session storage).
    pub fn dashboard_url_with_secret(&self) -> String {
        format!("{}#secret={}", self.dashboard_url(), self.control.secret)
    }

    /// The TLS interceptor, when CONNECTs to managed https upstreams are TLS-terminated.
    pub fn interceptor(&self) -> Option<&crate::intercept::Interceptor> {
        self.control.proxy.intercept.as_deref()
    }

    /// The GitHub Status watcher's current view, when it runs.
    pub fn github_status(&self) -> Option<weir_status::GithubStatus> {
        self.control
            .github
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|h| h.snapshot()))
    }

    /// Asks the GitHub Status watcher to check now (the tray's refresh).
    pub fn refresh_github_status(&self) {
        if let Some(w) = self
            .control
            .github
            .lock()
            .ok()
            .as_ref()
            .and_then(|g| g.as_ref())
        {
            w.refresh();
        }
    }

    /// The tools still pointed at this Weir (proxy variables of this process's environment,
    /// VS Code, git, the desktop's PAC URL), for the tray's warning on quit. Blocking (it
    /// reads files and runs `git`/`gsettings`): call it from `spawn_blocking`.
    pub fn pointed_tools(&self) -> Vec<crate::client_setup::PointedTool> {
        let mut settings = (*self.settings()).clone();
        // The address clients were given is the one actually bound (`:0` in a config means
        // "any free port").
        settings.listen = self.local_addr;
        let install = crate::client_setup::Install::new(settings, self.options.data_dir.clone());
        crate::client_setup::pointed_at_weir(
            &install,
            &crate::client_setup::Sources::for_this_user(),
        )
    }

    /// The settings in force now (they change while running: `crate::reload`).
    pub fn settings(&self) -> Arc<Settings> {
        self.control.proxy.settings()
    }

    /// What a restart would start with: the config file as it is now, keeping this engine's
    /// listening address and data dir unless the file changed them (so a `--listen` or
    /// `--data-dir` given at launch still holds), its control secret and its local CA.
    pub fn restart_options(&self) -> Result<EngineOptions, EngineError> {
        let mut opts = (*self.options).clone();
        let pending = self.control.reload.status().restart_required;
        if let Some(file) = opts.config_file.as_ref().filter(|f| f.exists()) {
            opts.settings = crate::config::load_file(file)?;
        } else {
            opts.settings = (*self.settings()).clone();
        }
        if !pending.contains(&crate::config::RestartKey::Listen) {
            opts.settings.listen = self.local_addr;
        }
        if pending.contains(&crate::config::RestartKey::DataDir) {
            if let Some(d) = opts.settings.data_dir.clone() {
                opts.data_dir = d;
            }
        }
        opts.control_secret = Some(self.control.secret.clone());
        Ok(opts)
    }

    /// **Restart engine** (the tray's menu item when `status.settings.restart_required` is
    /// not empty): reads [`EngineHandle::restart_options`] first, so a bad config file leaves
    /// this engine running ([`EngineError::Config`]); then stops this engine (drained) and
    /// starts a new one, paused if this one was. Use the returned handle from then on (and
    /// subscribe to its events again). If the new one cannot start, this one is already
    /// stopped: show the error and offer to start again.
    pub async fn restart(&self) -> Result<EngineHandle, EngineError> {
        let mut opts = self.restart_options()?;
        if opts.local_ca.is_some() {
            // The CA's name constraints follow the managed hosts, which may have changed.
            let (s, d) = (opts.settings.clone(), opts.data_dir.clone());
            if let Ok(ca) = tokio::task::spawn_blocking(move || {
                crate::intercept::ca_store::load_local_ca(&s, &d)
            })
            .await
            {
                opts.local_ca = ca;
            }
        }
        let paused = self.is_paused();
        self.shutdown().await;
        let new = start(opts).await?;
        new.set_paused(paused);
        Ok(new)
    }

    /// Empties the cache in memory and on disk (the tray's "Clear cache"); the number of
    /// entries that were in memory.
    pub async fn clear_cache(&self) -> Result<u64, crate::ClearError> {
        let cache = &self.control.proxy.cache;
        let before = cache.entry_count();
        cache.clear().await.map(|()| before)
    }

    /// Waits until every cache entry handed to the disk writer so far is on disk (tests and
    /// benchmarks; `shutdown` does this by itself).
    pub async fn flush_cache(&self) {
        self.control.proxy.cache.flush(false).await;
    }

    /// Stops accepting, drains in-flight requests (bounded by `limits.drain_timeout`), returns
    /// when done. Calling it twice is harmless.
    pub async fn shutdown(&self) {
        self.control.proxy.bus.stop();
        let watcher = self.control.github.lock().ok().and_then(|mut g| g.take());
        if let Some(w) = watcher {
            w.stop().await;
        }
        if let Some(tx) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
        // Entries stored by the last requests reach the disk before the engine is gone.
        self.control.proxy.cache.flush(true).await;
        crate::upstream::baselines::save(&self.control.proxy.upstreams, &self.options.data_dir);
        // Every task this engine spawned has been told to stop (`bus.stop`); wait for them,
        // but no longer than the drain allows (a local agent's command may still run).
        let tasks = self.control.proxy.bus.tasks();
        tasks.close();
        let drain = self.settings().limits.drain_timeout;
        if tokio::time::timeout(drain, tasks.wait()).await.is_err() {
            tracing::warn!(
                left = tasks.len(),
                "some background tasks did not stop within the drain timeout"
            );
        }
    }

    /// How many of this engine's tracked tasks are still running (0 after
    /// [`EngineHandle::shutdown`] unless the drain timeout cut it short).
    pub fn running_tasks(&self) -> usize {
        self.control.proxy.bus.tasks().len()
    }
}
