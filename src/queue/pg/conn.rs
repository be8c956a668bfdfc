//! One shared PostgreSQL connection per replica (tokio-postgres pipelines concurrent queries on
//! it), reconnected on demand, and the mapping of PostgreSQL errors to [`StoreError`]s so a
//! database that is down or read-only gives the same 503 as a full disk.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};
use weir_store::StoreError;

/// How long connecting may take before the database counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one statement may take: a database that hangs must not hold a create's request.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// What a connection attempt that ran past [`CONNECT_TIMEOUT`] says.
const CONNECT_TIMED_OUT: &str = "connecting timed out";
/// After a statement or a connection attempt timed out, the database counts as not answering
/// for this long: every call fails at once, saying so, instead of each waiting out its own
/// timeout in turn (a frozen server accepts TCP and never answers; the creates behind one
/// another on the shared connection, and on the queue's one-at-a-time admission, would
/// otherwise wait a timeout each, far past any client's deadline). Then one call tries again.
pub const NOT_ANSWERING_HOLD: Duration = Duration::from_secs(5);

pub(crate) struct PgConn {
    config: tokio_postgres::Config,
    tls: super::tls::PgTls,
    /// Host, port and database, never the password (for messages).
    pub db: String,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// When the database last failed to answer in time, and what timed out.
    stalled: std::sync::Mutex<Option<(tokio::time::Instant, &'static str)>>,
}

impl PgConn {
    pub fn new(mut config: tokio_postgres::Config, tls: super::tls::PgTls) -> PgConn {
        let db = describe(&config);
        if matches!(tls, super::tls::PgTls::Rustls(_)) {
            // A server that does not offer TLS is refused, never used in the clear.
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        PgConn {
            config,
            tls,
            db,
            client: tokio::sync::Mutex::new(None),
            stalled: std::sync::Mutex::new(None),
        }
    }

    /// A fresh connection of its own (migrations), bounded by [`CONNECT_TIMEOUT`]. A server
    /// that accepts TCP and never finishes the startup is not answering: the shared
    /// connection's callers then fail at once for [`NOT_ANSWERING_HOLD`].
    pub async fn connect_new(&self) -> Result<Client, StoreError> {
        self.connect_with(None).await
    }

    /// A fresh connection for `LISTEN`, over the same TLS as every other (a TLS database
    /// refuses a plain one), whose notifications and end arrive on the returned receiver.
    pub async fn connect_listening(
        &self,
    ) -> Result<(Client, mpsc::UnboundedReceiver<Heard>), StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        Ok((self.connect_with(Some(tx)).await?, rx))
    }

    /// Connects, and runs the connection in a task of its own: driven until it ends, or with
    /// `heard`, pumped for its notifications.
    async fn connect_with(
        &self,
        heard: Option<mpsc::UnboundedSender<Heard>>,
    ) -> Result<Client, StoreError> {
        let timed_out = |_| {
            self.stall(CONNECT_TIMED_OUT);
            self.unreachable(CONNECT_TIMED_OUT)
        };
        // Two arms: the connection's type depends on the TLS connector.
        let client = match &self.tls {
            super::tls::PgTls::Plain => {
                let (client, conn) =
                    tokio::time::timeout(CONNECT_TIMEOUT, self.config.connect(NoTls))
                        .await
                        .map_err(timed_out)?
                        .map_err(|e| self.error(e))?;
                run(conn, heard);
                client
            }
            super::tls::PgTls::Rustls(connect) => {
                let (client, conn) =
                    tokio::time::timeout(CONNECT_TIMEOUT, self.config.connect(connect.clone()))
                        .await
                        .map_err(timed_out)?
                        .map_err(|e| self.error(e))?;
                run(conn, heard);
                client
            }
        };
        Ok(client)
    }

    /// The shared connection, (re)connecting when there is none or it closed. While the
    /// database is not answering ([`NOT_ANSWERING_HOLD`]) it fails at once, also for a caller
    /// that waited for the lock behind the connection attempt that found it so.
    async fn client(&self) -> Result<Arc<Client>, StoreError> {
        self.answering()?;
        let mut slot = self.client.lock().await;
        self.answering()?;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        let c = Arc::new(self.connect_new().await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// `Err` while the database counts as not answering.
    fn answering(&self) -> Result<(), StoreError> {
        let Ok(s) = self.stalled.lock() else {
            return Ok(());
        };
        match *s {
            Some((at, what)) if at.elapsed() < NOT_ANSWERING_HOLD => {
                Err(self.unreachable(&format!(
                    "not answering: {what} {:.1} s ago; Weir asks it again within {} s",
                    at.elapsed().as_secs_f32(),
                    NOT_ANSWERING_HOLD.as_secs()
                )))
            }
            _ => Ok(()),
        }
    }

    fn stall(&self, what: &'static str) {
        if let Ok(mut s) = self.stalled.lock() {
            *s = Some((tokio::time::Instant::now(), what));
        }
    }

    /// Drops the shared connection (after a timeout: it may be stuck).
    async fn forget(&self) {
        *self.client.lock().await = None;
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let client = self.client().await?;
        match tokio::time::timeout(QUERY_TIMEOUT, client.query(sql, params)).await {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(_) => {
                self.stall("a statement timed out");
                self.forget().await;
                Err(self.unreachable("the statement timed out"))
            }
        }
    }

    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    pub async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        match tokio::time::timeout(QUERY_TIMEOUT, client.execute(sql, params)).await {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(_) => {
                self.stall("a statement timed out");
                self.forget().await;
                Err(self.unreachable("the statement timed out"))
            }
        }
    }

    pub fn unreachable(&self, detail: &str) -> StoreError {
        StoreError::Unreachable {
            db: self.db.clone(),
            detail: detail.to_string(),
        }
    }

    /// Classifies a PostgreSQL error by its SQLSTATE (or its absence: an I/O failure).
    pub fn error(&self, e: tokio_postgres::Error) -> StoreError {
        classify(&self.db, &e)
    }
}

/// The error and its causes ("error performing TLS handshake: invalid peer certificate:
/// UnknownIssuer"): tokio-postgres' own message names only the step that failed.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text = format!("{text}: {c_text}");
        }
        cause = c.source();
    }
    if text.contains("TLS handshake") {
        text.push_str(" (check gateway.postgres_sslmode and gateway.postgres_ca_file: the CA must have signed the database's certificate, for the host in postgres_url)");
    }
    text
}

/// What a `LISTEN` connection hears ([`PgConn::connect_listening`]).
#[derive(Debug)]
pub(crate) enum Heard {
    Notification {
        channel: String,
        payload: String,
    },
    /// The connection ended, and why. Nothing follows.
    Ended(String),
}

/// Runs a connection in a task of its own until it ends (its client is dropped or the server
/// goes away), passing its notifications to `heard` when there is one.
fn run<S, T>(
    mut conn: tokio_postgres::Connection<S, T>,
    heard: Option<mpsc::UnboundedSender<Heard>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Some(heard) = heard else {
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
        return;
    };
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        let why = loop {
            match messages.next().await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    let _ = heard.send(Heard::Notification {
                        channel: n.channel().to_string(),
                        payload: n.payload().to_string(),
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break e.to_string(),
                None => break "the server closed the connection".to_string(),
            }
        };
        let _ = heard.send(Heard::Ended(why));
    });
}

fn classify(db: &str, e: &tokio_postgres::Error) -> StoreError {
    let db = db.to_string();
    let detail = match e.as_db_error() {
        Some(d) => format!("{} (SQLSTATE {})", d.message(), d.code().code()),
        None => with_causes(e),
    };
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection itself failed (refused, reset, closed).
        return StoreError::Unreachable { db, detail };
    };
    if *code == SqlState::UNIQUE_VIOLATION {
        // Only the live-dedupe-key index is unique besides the id: the caller looks up which
        // live item holds the key (`existing_id` is filled in there).
        StoreError::Duplicate { existing_id: 0 }
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        StoreError::DatabaseReadOnly { db, detail }
    } else if *code == SqlState::DISK_FULL || *code == SqlState::INSUFFICIENT_RESOURCES {
        StoreError::Full {
            path: db.into(),
            detail,
        }
    } else if code.code().starts_with("08")
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
    {
        StoreError::Unreachable { db, detail }
    } else {
        StoreError::Other {
            path: db.into(),
            detail,
        }
    }
}

/// `postgresql://user@host:port/dbname` without the password, for messages and the status.
fn describe(c: &tokio_postgres::Config) -> String {
    let host = c
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().unwrap_or("");
    let db = c.get_dbname().unwrap_or("");
    format!("postgresql://{user}@{host}:{port}/{db}")
}
