//! A dedicated `LISTEN` connection per replica: a `NOTIFY` on a channel runs that channel's
//! handler (wake the replay workers, re-read shared upstream signals). Reconnects with a
//! capped backoff; after a reconnect every handler runs once, since notifications sent while
//! the connection was down are lost.

use super::PgConn;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::AsyncMessage;

/// A channel's handler; gets the notification's payload (empty after a reconnect).
pub(crate) type Handler = Arc<dyn Fn(&str) + Send + Sync>;

/// Listens on every `(channel, handler)` until `stop` turns true, as one of the engine's
/// tracked `tasks`.
pub(crate) fn spawn(
    conn: Arc<PgConn>,
    channels: Vec<(&'static str, Handler)>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    tasks: &tokio_util::task::TaskTracker,
) {
    tasks.spawn(async move {
        let mut backoff = Duration::from_millis(250);
        loop {
            tokio::select! {
                ended = listen_once(&conn, &channels) => {
                    if let Err(e) = ended {
                        tracing::warn!(db = %conn.db, error = %e, "LISTEN connection lost; reconnecting");
                    }
                }
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
}

async fn listen_once(conn: &PgConn, channels: &[(&'static str, Handler)]) -> Result<(), String> {
    let (client, mut connection) = tokio::time::timeout(
        super::conn::CONNECT_TIMEOUT,
        conn.config().connect(tokio_postgres::NoTls),
    )
    .await
    .map_err(|_| "connecting timed out".to_string())?
    .map_err(|e| e.to_string())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The connection must be polled for the LISTEN statements to complete, so it runs first.
    let pump = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
                }
                Ok(_) => {}
                Err(e) => return e.to_string(),
            }
        }
        "the server closed the connection".to_string()
    });
    for (channel, _) in channels {
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .map_err(|e| e.to_string())?;
    }
    // Anything announced while this connection was not listening.
    for (_, handler) in channels {
        handler("");
    }
    while let Some((channel, payload)) = rx.recv().await {
        if let Some((_, handler)) = channels.iter().find(|(c, _)| *c == channel) {
            handler(&payload);
        }
    }
    drop(client);
    Err(pump.await.unwrap_or_else(|e| e.to_string()))
}
