//! A dedicated `LISTEN` connection per replica: a `NOTIFY` on a channel runs that channel's
//! handler (wake the replay workers, re-read shared upstream signals). Reconnects with a
//! capped backoff; after a reconnect every handler runs once, since notifications sent while
//! the connection was down are lost.

use super::conn::Heard;
use super::PgConn;
use std::sync::Arc;
use std::time::Duration;

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
    // Over the database's TLS like every other connection (it used to connect in the clear,
    // which a database that requires TLS refuses: no notification ever arrived there).
    let (client, mut heard) = conn.connect_listening().await.map_err(|e| e.to_string())?;
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
    while let Some(h) = heard.recv().await {
        match h {
            Heard::Notification { channel, payload } => {
                if let Some((_, handler)) = channels.iter().find(|(c, _)| *c == channel) {
                    handler(&payload);
                }
            }
            Heard::Ended(why) => return Err(why),
        }
    }
    Err("the connection's task ended".to_string())
}
