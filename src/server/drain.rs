//! Graceful shutdown of the listeners' connections (the plain listener, the team gateway's,
//! the fuzz entry), checked by a flag on each poll.
//!
//! hyper-util's `GracefulShutdown` does the same with a `watch` channel: each connection's
//! future polls a pending `Receiver::changed()` before the connection on every poll, ~0.5k
//! instructions per kept-alive pass-through request (its future, tokio's `Notified`, the
//! version check) to learn, once in the process's life, that it is time to close. Here a
//! connection reads one flag of its own, and gives the server its task's waker once (again
//! only if the waker changes), so that a shutdown can set every connection's flag and wake it
//! to close, as `watch` did.
//!
//! [`Drain::watcher`] hands out a [`Watcher`] per connection; [`Drain::shutdown`] sets every
//! connection's flag, wakes it (each starts hyper's graceful shutdown: an idle connection
//! closes, a busy one after its answer) and waits until every watched connection is done. A
//! connection can also be asked to close on its own ([`Watcher::or_when`]): an HTTP/2
//! connection idle for its limit is sent a GOAWAY this way (`server::Watched`), since hyper's
//! graceful shutdown can only be started by whoever holds the connection. The flag it is asked
//! through becomes the connection's one flag, which the shutdown sets too: a poll reads one
//! flag, not the server's and then its own (~50 instructions per request, callgrind).

use hyper_util::server::graceful::GracefulConnection;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// The server's side: hands out watchers, and closes their connections when it stops.
pub(crate) struct Drain {
    shared: Arc<Shared>,
}

struct Shared {
    closing: AtomicBool,
    next_id: AtomicU64,
    /// Each watched connection's task waker and flag, by connection; a connection leaves when
    /// it ends.
    open: Mutex<HashMap<u64, Open>>,
    /// Told when the last connection left after `closing` was set.
    all_closed: tokio::sync::Notify,
}

/// What the server keeps of one open connection: its task's waker, and the flag that tells it
/// to close (its [`Watcher`] reads the same one).
struct Open {
    waker: Waker,
    close: Arc<AtomicBool>,
}

impl Shared {
    /// Sets every open connection's flag and wakes it (`closing` is set first: a connection
    /// watched from now on starts with its flag set, [`Drain::watcher`]). Whether none was
    /// open.
    fn close_all(&self) -> bool {
        self.closing.store(true, Ordering::SeqCst);
        let open = lock(&self.open);
        for o in open.values() {
            o.close.store(true, Ordering::SeqCst);
            o.waker.wake_by_ref();
        }
        open.is_empty()
    }
}

impl Drain {
    pub(crate) fn new() -> Drain {
        Drain {
            shared: Arc::new(Shared {
                closing: AtomicBool::new(false),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
                all_closed: tokio::sync::Notify::new(),
            }),
        }
    }

    /// A watcher for one new connection.
    pub(crate) fn watcher(&self) -> Watcher {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(AtomicBool::new(false));
        {
            // Counted from now: a connection is open until its watcher (or watched future)
            // drops. `closing` is read under the lock: a shutdown that set it before took the
            // lock after this insert (and sets this flag), or it is seen here.
            let mut open = lock(&self.shared.open);
            open.insert(
                id,
                Open {
                    waker: Waker::noop().clone(),
                    close: close.clone(),
                },
            );
            if self.shared.closing.load(Ordering::SeqCst) {
                close.store(true, Ordering::SeqCst);
            }
        }
        Watcher {
            shared: self.shared.clone(),
            id,
            close,
        }
    }

    /// Starts every connection's graceful shutdown and waits until all have ended (connections
    /// accepted after this are shut down at their first poll).
    pub(crate) async fn shutdown(self) {
        let shared = &self.shared;
        loop {
            let notified = shared.all_closed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if shared.close_all() {
                return;
            }
            notified.await;
        }
    }
}

/// A server gone without a shutdown (its future dropped) still closes its connections
/// gracefully, as hyper-util's watchers see their channel closed.
impl Drop for Drain {
    fn drop(&mut self) {
        let _ = self.shared.close_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere mid-insert leaves a valid map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's view of the [`Drain`]: counted as open until dropped.
pub(crate) struct Watcher {
    shared: Arc<Shared>,
    id: u64,
    /// Set by the server's shutdown, or by the connection's own watch ([`Watcher::or_when`]),
    /// to close it gracefully.
    close: Arc<AtomicBool>,
}

impl Watcher {
    /// This watcher, closing its connection gracefully also once `asked` is set (seen at the
    /// connection's next poll: whoever sets it polls the connection next). `asked` becomes the
    /// connection's one flag: the server's shutdown sets it from now on (and now, if it
    /// already set the old one).
    pub(crate) fn or_when(mut self, asked: Arc<AtomicBool>) -> Watcher {
        {
            // Under the lock: a shutdown sets the flag it finds in the map, old or new.
            let mut open = lock(&self.shared.open);
            if self.close.load(Ordering::SeqCst) {
                asked.store(true, Ordering::SeqCst);
            }
            if let Some(o) = open.get_mut(&self.id) {
                o.close = asked.clone();
            }
        }
        self.close = asked;
        self
    }

    /// `conn`, shut down gracefully once the server drains, or once asked to.
    pub(crate) fn watch<C>(self, conn: C) -> impl Future<Output = C::Output> + Send + 'static
    where
        C: GracefulConnection + Send + 'static,
    {
        Watched {
            conn: Box::pin(conn),
            watcher: self,
            known: None,
            shut: false,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let empty = {
            let mut open = lock(&self.shared.open);
            open.remove(&self.id);
            open.is_empty()
        };
        if empty && self.shared.closing.load(Ordering::SeqCst) {
            self.shared.all_closed.notify_waiters();
        }
    }
}

/// A connection that starts hyper's graceful shutdown once its server drains, or once asked
/// to ([`Watcher::or_when`]).
struct Watched<C> {
    /// Boxed (once per connection) so that this wrapper is `Unpin`.
    conn: Pin<Box<C>>,
    watcher: Watcher,
    /// The waker the server holds for this connection (`will_wake` is a compare).
    known: Option<Waker>,
    shut: bool,
}

impl<C: GracefulConnection> Future for Watched<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        if !this.shut {
            let shared = &this.watcher.shared;
            if !this.known.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                // Given under the lock, then the flag read again: a shutdown that set it
                // before took the lock (and woke the wakers it found), so it is seen here.
                let waker = cx.waker().clone();
                if let Some(o) = lock(&shared.open).get_mut(&this.watcher.id) {
                    o.waker = waker.clone();
                }
                this.known = Some(waker);
            }
            // One flag: the server's shutdown and the connection's own watch both set it.
            if this.watcher.close.load(Ordering::SeqCst) {
                this.shut = true;
                this.conn.as_mut().graceful_shutdown();
            }
        }
        this.conn.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An idle client connection served as the listener serves one, and its client side.
    async fn idle_connection() -> (
        impl GracefulConnection<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>
            + Send
            + 'static,
        tokio::net::TcpStream,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, _) = l.accept().await.unwrap();
        let conn =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection_with_upgrades(
                    hyper_util::rt::TokioIo::new(stream),
                    hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(http::Response::new(crate::body::empty()))
                    }),
                )
                .into_owned();
        (conn, client)
    }

    /// A shutdown wakes an idle connection, starts its graceful close, and returns once the
    /// connection has ended; a server with no connection left returns at once.
    #[tokio::test]
    async fn shutdown_closes_idle_connections_and_waits_for_them() {
        let drain = Drain::new();
        let (conn, _client) = idle_connection().await;
        let done = tokio::spawn(drain.watcher().watch(conn));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!done.is_finished(), "an idle connection stays open");
        tokio::time::timeout(Duration::from_secs(5), drain.shutdown())
            .await
            .expect("the shutdown waits only for the connection to close");
        assert!(done.is_finished());
        Drain::new().shutdown().await;
    }

    /// A connection asked to close on its own starts its graceful close at its next poll and
    /// ends; the server's other connections stay open.
    #[tokio::test]
    async fn a_connection_asked_to_close_closes_alone() {
        let drain = Drain::new();
        let asked = Arc::new(AtomicBool::new(false));
        let (conn, _client) = idle_connection().await;
        let (other, _other_client) = idle_connection().await;
        let stays = tokio::spawn(drain.watcher().watch(other));
        let asked_conn = drain.watcher().or_when(asked.clone()).watch(conn);
        tokio::pin!(asked_conn);
        let waited = tokio::time::timeout(Duration::from_millis(50), asked_conn.as_mut()).await;
        assert!(waited.is_err(), "an idle connection stays open");
        // Whoever asks polls the connection next (`server::Watched::drive`).
        asked.store(true, Ordering::Relaxed);
        // (Its own result does not matter here: that it ended does.)
        let _ = tokio::time::timeout(Duration::from_secs(5), asked_conn)
            .await
            .expect("the asked connection closes");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!stays.is_finished(), "the other connection stays open");
    }

    /// A connection's own flag ([`Watcher::or_when`]) is the one the shutdown sets: a
    /// connection watched that way still closes when its server drains (and its flag reads
    /// set), and one watched after the drain started closes at its first poll.
    #[tokio::test]
    async fn the_shutdown_sets_each_connections_own_flag() {
        let drain = Drain::new();
        let asked = Arc::new(AtomicBool::new(false));
        let (conn, _client) = idle_connection().await;
        let done = tokio::spawn(drain.watcher().or_when(asked.clone()).watch(conn));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!done.is_finished(), "an idle connection stays open");
        let late = drain.watcher();
        let shared = drain.shared.clone();
        tokio::time::timeout(Duration::from_secs(5), async {
            // The late watcher holds the drain open until its connection ends.
            let shutdown = tokio::spawn(drain.shutdown());
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                asked.load(Ordering::SeqCst),
                "the shutdown set the connection's flag"
            );
            let (conn, _client) = idle_connection().await;
            let after = shared.watcher_after_close();
            drop(late);
            after.watch(conn).await.ok();
            shutdown.await.unwrap();
        })
        .await
        .expect("every connection closed");
        assert!(done.is_finished());
    }

    impl Shared {
        /// A watcher made once the drain has started, as [`Drain::watcher`] makes one (the
        /// handle made for it closes every connection again when dropped: they are closing).
        fn watcher_after_close(self: &Arc<Shared>) -> Watcher {
            Drain {
                shared: self.clone(),
            }
            .watcher()
        }
    }

    /// A server dropped without a shutdown still closes its connections.
    #[tokio::test]
    async fn a_dropped_drain_closes_its_connections() {
        let drain = Drain::new();
        let (conn, _client) = idle_connection().await;
        let done = tokio::spawn(drain.watcher().watch(conn));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!done.is_finished());
        drop(drain);
        // (An idle connection shut down before its first byte ends "cancelled".)
        let ended = tokio::time::timeout(Duration::from_secs(5), done).await;
        assert!(ended.is_ok(), "closed once its server is gone");
    }
}
