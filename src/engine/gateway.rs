//! The engine's gateway parts (feature `gateway`): the shared queue in PostgreSQL, the admin
//! token, the status block, and the two TLS doors served in place of the laptop's loopback one.

use super::EngineError;
use crate::config::Settings;
use crate::control::Control;
use crate::events::Bus;
use crate::pipeline::Proxy;
use crate::queue::QueueState;
use crate::secrets::{Account, SecretStore};
use crate::upstream::Upstreams;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The shared queue for a gateway whose `[gateway]` names a PostgreSQL database.
pub(super) async fn open_shared_queue(
    g: &crate::gateway::Gateway,
    config: tokio_postgres::Config,
    key: &crate::queue::sealed::GatewayKey,
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
    key: &crate::queue::sealed::GatewayKey,
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
pub(super) async fn admin_token(secrets: &SecretStore) -> Result<String, EngineError> {
    if !secrets.kind().is_persistent() {
        return Err(crate::gateway::GatewayError::AdminToken(
            "there is no usable secret store on this machine (keychain or file)".into(),
        )
        .into());
    }
    Ok(secrets
        .load_or_create(
            Account::GatewayAdminToken,
            super::new_secret,
            |s: &String| s.clone(),
            |s: &str| Some(s.trim().to_string()).filter(|s| s.len() >= 16),
        )
        .await)
}

/// `gateway` in the status document.
pub(super) fn status(
    g: &crate::gateway::Gateway,
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    base_url: &str,
) -> crate::status::GatewayStatus {
    crate::status::GatewayStatus {
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
    }
}

/// A gateway's two doors: the clients' TLS listener (allow-list, PROXY protocol) and the
/// admin listener (the admin token instead).
pub(super) struct Doors {
    pub gateway: crate::gateway::Gateway,
    pub admin_listener: tokio::net::TcpListener,
    pub admin_token: String,
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
            move |req| clients.clone().client(req),
            stop.clone(),
        );
        let admin = crate::gateway::listener::serve_tls(
            self.admin_listener,
            g.tls.clone(),
            // The admin listener has the token instead, and no load balancer in front.
            crate::gateway::listener::Admission::default(),
            settings.limits.clone(),
            move |req| admins.clone().admin(req),
            stop,
        );
        async move {
            tokio::join!(main, admin);
        }
    }
}
