//! The gateway's hooks into the engine (feature `gateway`): the refusal of a local agent, the
//! doors' addresses, the admin token, the identity key and the shared queue in PostgreSQL, the
//! public base URL, the status block, and the two TLS doors served in place of the laptop's
//! loopback one. Each hook answers `None` outside gateway mode; built without the feature, the
//! stubs of the same names in `without.rs` stand in.

use super::{EngineError, EngineOptions};
use crate::config::Settings;
use crate::control::Control;
use crate::events::Bus;
use crate::gateway::Gateway;
use crate::identity::IdentityKey;
use crate::intercept::CaCertificate;
use crate::pipeline::Proxy;
use crate::queue::sealed::GatewayKey;
use crate::queue::QueueState;
use crate::secrets::{Account, SecretStore};
use crate::upstream::Upstreams;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A team gateway runs no developer's local agent.
pub(super) fn check(opts: &EngineOptions) -> Result<(), EngineError> {
    if opts.gateway.is_some() && opts.settings.local_agent.is_some() {
        return Err(EngineError::LocalAgentOnGateway);
    }
    Ok(())
}

/// The clients' door and the admin door, in gateway mode (`[gateway] listen`, `admin_listen`).
pub(super) fn listen(opts: &EngineOptions) -> Option<(SocketAddr, SocketAddr)> {
    let g = opts.gateway.as_ref()?;
    Some((g.settings.listen, g.settings.admin_listen))
}

/// The admin token, in gateway mode: from `gateway.admin_token_file`, else the keychain.
pub(super) async fn admin_token(
    opts: &EngineOptions,
    secrets: &SecretStore,
) -> Result<Option<String>, EngineError> {
    Ok(match &opts.gateway {
        Some(g) => Some(match &g.admin_token {
            Some(t) => t.clone(),
            None => stored_admin_token(secrets).await?,
        }),
        None => None,
    })
}

/// With a shared queue, every replica keys identities alike: one caller, one key, whichever
/// replica.
pub(super) fn identity_key(opts: &EngineOptions) -> Option<IdentityKey> {
    let (_, key) = opts.gateway.as_ref()?.postgres.as_ref()?;
    Some(IdentityKey::new(key.identity_key()))
}

/// The CA certificate a gateway's clients must trust: the one `[gateway]` names
/// (`intercept_ca_cert_file`) when the engine runs with it, else the replica's own CA in its
/// data dir. Either way it is the gateway's, handed out to its clients: a client's own
/// `weir ca install` would install the client's CA, so the hints do not offer it.
pub(super) fn ca_certificate(opts: &EngineOptions) -> Option<CaCertificate> {
    let g = opts.gateway.as_ref()?;
    let shared = match (&g.intercept_ca, &opts.local_ca, &g.settings.intercept_ca) {
        (Some(shared), Some(used), Some((cert, _))) if Arc::ptr_eq(shared, used) => {
            Some(cert.clone())
        }
        _ => None,
    };
    Some(CaCertificate::Gateway(shared.unwrap_or_else(|| {
        crate::intercept::ca_store::CaStore::cert_path_in(&opts.data_dir)
    })))
}

/// The shared create queue a gateway's `[gateway]` names, to be opened.
pub(super) struct SharedQueue<'a> {
    g: &'a Gateway,
    pg: &'a tokio_postgres::Config,
    key: &'a GatewayKey,
}

pub(super) fn shared_queue(opts: &EngineOptions) -> Option<SharedQueue<'_>> {
    let g = opts.gateway.as_ref()?;
    let (pg, key) = g.postgres.as_ref()?;
    Some(SharedQueue { g, pg, key })
}

impl SharedQueue<'_> {
    pub async fn open(
        self,
        secrets: SecretStore,
        settings: &Settings,
        upstreams: &Arc<Upstreams>,
        bus: &Bus,
    ) -> Result<QueueState, EngineError> {
        let (g, pg, key) = (self.g, self.pg.clone(), self.key);
        open_shared_queue(g, pg, key, secrets, settings, upstreams, bus).await
    }
}

/// Problem `type` URLs name the clients' door as the clients reach it (it serves the problem
/// pages), not the laptop's loopback.
pub(super) fn base_url(opts: &EngineOptions, local_addr: SocketAddr) -> Option<String> {
    let g = opts.gateway.as_ref()?;
    Some(crate::gateway::public_base_url(&g.settings, local_addr))
}

/// The gateway's two doors, in gateway mode with its admin door bound and its token read.
pub(super) fn doors(
    opts: &EngineOptions,
    admin_listener: Option<tokio::net::TcpListener>,
    admin_token: Option<String>,
) -> Option<Doors> {
    Some(Doors {
        gateway: opts.gateway.clone()?,
        admin_listener: admin_listener?,
        admin_token: admin_token?,
    })
}

/// The shared queue for a gateway whose `[gateway]` names a PostgreSQL database.
async fn open_shared_queue(
    g: &Gateway,
    config: tokio_postgres::Config,
    key: &GatewayKey,
    secrets: SecretStore,
    settings: &Settings,
    upstreams: &Arc<Upstreams>,
    bus: &Bus,
) -> Result<QueueState, EngineError> {
    let (lease, tls) = match &g.settings.postgres {
        Some(p) => (
            p.lease,
            crate::queue::pg::PgTls::new(p.sslmode, &p.extra_roots),
        ),
        None => (
            std::time::Duration::from_secs(30),
            crate::queue::pg::PgTls::Plain,
        ),
    };
    migrate_and_listen(config, tls, lease, key, secrets, settings, upstreams, bus).await
}

/// The gateway's shared queue in PostgreSQL: migrated, expired leases recovered, and a
/// `LISTEN` connection that wakes this replica's workers on new items and applies other
/// replicas' upstream holds. Unlike the laptop's queue, a database that cannot be reached at
/// start stops the replica (a supervisor restarts it): a replica that cannot queue must not
/// take traffic behind the load balancer.
#[allow(clippy::too_many_arguments)]
async fn migrate_and_listen(
    config: tokio_postgres::Config,
    tls: crate::queue::pg::PgTls,
    lease: std::time::Duration,
    key: &GatewayKey,
    secrets: SecretStore,
    settings: &Settings,
    upstreams: &Arc<Upstreams>,
    bus: &Bus,
) -> Result<QueueState, EngineError> {
    use crate::queue::pg;
    let conn = Arc::new(pg::PgConn::new(config, tls));
    let mut q = crate::queue::Queue::open_postgres(conn.clone(), lease, key, secrets)
        .await
        .map_err(EngineError::SharedQueue)?;
    q.max_age = settings.queue.max_age;
    if let Ok(items) = q.store.recover_after_crash(crate::queue::now_ms()).await {
        if !items.is_empty() {
            tracing::warn!(count = items.len(), "creates were being replayed by a replica that stopped; they are in doubt and will be looked up upstream before any replay");
        }
    }
    let wake = q.wake.clone();
    // The same name the queue's leases carry (`Queue::open_postgres`).
    let owner = pg::owner_name();
    let signals = crate::gateway::signals::start(conn.clone(), owner, upstreams.clone(), bus);
    pg::listen::spawn(
        conn,
        vec![
            (
                pg::QUEUE_CHANNEL,
                Arc::new(move |_: &str| wake.notify_waiters()),
            ),
            (crate::gateway::signals::SIGNALS_CHANNEL, signals),
        ],
        bus.stopping(),
        bus.tasks(),
    );
    Ok(QueueState::Open(q))
}

/// The gateway's admin token, kept in the keychain when no `gateway.admin_token_file` names
/// one (created on first start under this data directory's keychain service, account
/// `gateway-admin-token`; operators read it with the keychain's own tools).
async fn stored_admin_token(secrets: &SecretStore) -> Result<String, EngineError> {
    if !secrets.kind().is_persistent() {
        return Err(crate::gateway::GatewayError::AdminToken(
            "there is no usable secret store on this machine (keychain or file)".into(),
        )
        .into());
    }
    Ok(secrets
        .load_or_create(
            Account::GatewayAdminToken,
            super::keys::new_secret,
            |s: &String| s.clone(),
            |s: &str| Some(s.trim().to_string()).filter(|s| s.len() >= 16),
        )
        .await)
}

/// `gateway` in the status document, in gateway mode.
pub(super) fn status(
    opts: &EngineOptions,
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    base_url: &str,
) -> Option<crate::status::GatewayStatus> {
    let g = opts.gateway.as_ref()?;
    Some(crate::status::GatewayStatus {
        listen: local_addr.to_string(),
        admin_listen: admin_addr.map(|a| a.to_string()).unwrap_or_default(),
        allow: g.settings.allow.iter().map(|n| n.to_string()).collect(),
        replica: crate::queue::pg::owner_name(),
        shared_queue: g.postgres.is_some(),
        shared_intercept_ca: g.intercept_ca.is_some(),
        trusted_proxies: g
            .settings
            .trusted_proxies
            .iter()
            .flatten()
            .map(|n| n.to_string())
            .collect(),
        postgres_sslmode: g.settings.postgres.as_ref().map(|p| p.sslmode),
        public_url: base_url.to_string(),
    })
}

/// A gateway's two doors: the clients' TLS listener (allow-list, PROXY protocol) and the
/// admin listener (the admin token instead).
pub(super) struct Doors {
    gateway: Gateway,
    admin_listener: tokio::net::TcpListener,
    admin_token: String,
}

impl Doors {
    /// Serves both doors until `stop` fires.
    pub fn serve(
        self,
        listener: tokio::net::TcpListener,
        proxy: &Arc<Proxy>,
        control: &Arc<Control>,
        settings: &Settings,
        stop: oneshot::Receiver<()>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        use futures_util::FutureExt;
        let g = self.gateway;
        let stop = async {
            let _ = stop.await;
        }
        .shared();
        let doors = crate::gateway::admin::Doors {
            proxy: proxy.clone(),
            control: control.clone(),
            admin_token: self.admin_token.into(),
        };
        let (clients, admins) = (doors.clone(), doors);
        let main = crate::gateway::listener::serve_tls(
            listener,
            g.tls.clone(),
            crate::gateway::listener::Admission {
                allow: Some(Arc::new(g.settings.allow.clone())),
                trusted_proxies: g.settings.trusted_proxies.clone().map(Arc::new),
            },
            settings.limits.clone(),
            move |req| Box::pin(clients.clone().client(req)),
            stop.clone(),
        );
        let admin = crate::gateway::listener::serve_tls(
            self.admin_listener,
            g.tls.clone(),
            // The admin listener has the token instead, and no load balancer in front.
            crate::gateway::listener::Admission::default(),
            settings.limits.clone(),
            move |req| Box::pin(admins.clone().admin(req)),
            stop,
        );
        async move {
            tokio::join!(main, admin);
        }
    }
}
