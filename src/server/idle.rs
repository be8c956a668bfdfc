//! A client connection's idle limits.
//!
//! HTTP/1: between two requests the next head must come within `header_read_timeout`. On the
//! plain listener [`Heads`] counts the heads hyper waits for and the ones it got, and the
//! connection's task closes a connection whose head is late (`server::Watched`); elsewhere
//! (an intercepted connection, the gateway's) hyper's own header-read timer does.
//!
//! HTTP/2: hyper's server has none (its keep-alive pings, which `server::http_builder` does not
//! turn on, would find dead peers only), so an HTTP/2 connection left idle after its first
//! request held its connection (or CONNECT) slot for as long as the client kept it open.
//!
//! [`Activity`] counts a connection's open streams: one opens with a request and closes when
//! its answer's body is done or dropped (a long streamed answer is activity, not idleness).
//! [`Activity::idle`] resolves once no stream has been open for the limit; the connection's
//! task then closes it (GOAWAY, then close; `server::Watched` and the intercepted loop).
//!
//! A stream that opened a CONNECT tunnel (its answer carries [`super::TunnelOpened`]) counts as
//! open until the tunnel ends: hyper drops that stream's answer once the `200` is sent and the
//! tunnel runs in its own task, so the stream would look closed while the tunnel moves bytes,
//! and closing the connection would cut the tunnel (and every other on it) mid-transfer. What
//! ends the tunnel governs it: a blind tunnel's `tunnel_idle_timeout` (none when that is
//! turned off), an intercepted one's own connection limits. Once it ends, the connection's
//! idle limit counts from then.

use crate::body::{Body, BoxError};
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// An HTTP/1 connection's request heads: begun when hyper starts waiting for one (its
/// header-read timer, `timers::HeadTimer`), finished when the handler gets it
/// (`server::Watched::wrap`). One number: odd while a head is awaited, each begun or finished
/// head one step more, so a head still awaited and the same number at two looks is the same
/// head, awaited since the first look. A connection starts awaiting its first head.
///
/// Both marks are made in the connection's own task (hyper calls its timer and the handler
/// while it is polled), so a load and a store do: the atomic is only there to be shared with
/// the builder's timer, which must be `Sync`.
#[derive(Debug)]
pub(crate) struct Heads(AtomicU64);

impl Heads {
    /// A connection's count, awaiting its first head.
    pub(crate) fn new() -> Arc<Heads> {
        Arc::new(Heads(AtomicU64::new(1)))
    }

    /// hyper starts waiting for a head (nothing when it already waits).
    pub(crate) fn begun(&self) {
        let h = self.0.load(Ordering::Relaxed);
        if h & 1 == 0 {
            self.0.store(h + 1, Ordering::Relaxed);
        }
    }

    /// A head came (nothing when none was awaited: an HTTP/2 stream after the first).
    pub(crate) fn finished(&self) {
        let h = self.0.load(Ordering::Relaxed);
        if h & 1 == 1 {
            self.0.store(h + 1, Ordering::Relaxed);
        }
    }

    /// The awaited head's number, `None` when no head is awaited (a request being served).
    pub(crate) fn awaited(&self) -> Option<u64> {
        let h = self.0.load(Ordering::Relaxed);
        (h & 1 == 1).then_some(h)
    }
}

/// The head limit of a connection's [`Heads`], looked at by one timer that stays registered
/// for the connection's life and fires once per `limit`, instead of a timer made, registered
/// and removed again for every request (hyper's; ~0.5k of a cache hit's instructions). At each
/// firing: a head awaited at this look and the last one, the same head, has been awaited for at
/// least `limit` (the looks are `limit` apart or more), and the connection is closed. So a head
/// is given at least `limit` and at most twice that (a head begun just after a look is seen at
/// the next and closed at the one after); the first head exactly `limit`, counted from the
/// connection's start, as before.
pub(crate) struct HeadGuard {
    heads: Arc<Heads>,
    limit: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The head awaited at the last look.
    seen: Option<u64>,
    /// The timer was polled (is registered): until it fires there is nothing to look at.
    armed: bool,
}

impl HeadGuard {
    /// A guard from now on, for a connection that opened now.
    pub(crate) fn new(heads: Arc<Heads>, limit: Duration) -> HeadGuard {
        let seen = heads.awaited();
        HeadGuard {
            heads,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            seen,
            armed: false,
        }
    }

    /// `Ready` once a head is late. Cheap while the timer has not fired (one load of its
    /// state, inlined into the connection's poll): it is polled, and registers the task's
    /// waker, only when it is armed anew.
    #[inline]
    pub(crate) fn poll_late(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed && !self.timer.is_elapsed() {
            return Poll::Pending;
        }
        self.look(cx)
    }

    /// The timer fired (or was never polled): a look at the heads, and the timer set again.
    #[cold]
    fn look(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Twice at most: a timer just reset is not due (a millisecond at least, the wheel's
        // tick); should it be, the task looks again at its next poll, woken now.
        for _ in 0..2 {
            if self.armed {
                let now = self.heads.awaited();
                if now.is_some() && now == self.seen {
                    return Poll::Ready(());
                }
                self.seen = now;
                // From now, not from the last deadline: two looks are always `limit` apart,
                // even after the process was held up past a deadline.
                let period = self.limit.max(Duration::from_millis(1));
                self.timer.as_mut().reset(Instant::now() + period);
            }
            self.armed = true;
            // Unconstrained: a task that spent its cooperative budget would get `Pending`
            // without the timer being registered, and `is_elapsed` would never turn true.
            let timer = tokio::task::unconstrained(self.timer.as_mut());
            if std::pin::pin!(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A connection's streams: how many are open, and when the last one closed.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    open: AtomicUsize,
    /// Milliseconds from `start` to the last time a stream closed.
    last_ms: AtomicU64,
    /// An HTTP/2 stream was seen: only then is the connection HTTP/2 (hyper-util's auto
    /// builder decides on the first bytes).
    h2: AtomicBool,
}

/// A CONNECT tunnel's hold on its stream: the stream's [`Open`], put here by [`track`], is
/// dropped (the stream closes) once the tunnel's task and the answer have both let go.
#[derive(Debug, Default)]
pub(crate) struct TunnelLife {
    stream: std::sync::Mutex<Option<Open>>,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            h2: AtomicBool::new(false),
        })
    }

    /// A stream opens; it closes when the returned guard is dropped ([`track`] keeps it with
    /// the answer's body).
    pub(crate) fn open(self: &Arc<Self>) -> Open {
        self.h2.store(true, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        Open(self.clone())
    }

    /// Whether the connection carried an HTTP/2 stream.
    pub(crate) fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// Resolves once no stream (and no CONNECT tunnel) has been open for `limit`. Wakes once
    /// per `limit` at most while streams come and go.
    pub(crate) async fn idle(&self, limit: Duration) {
        self.idle_after(self.start, limit).await;
    }

    /// [`Activity::idle`], counting from `from` at the earliest (a GOAWAY sent to a connection
    /// idle already: the time it gets to close).
    pub(crate) async fn idle_after(&self, from: Instant, limit: Duration) {
        loop {
            let (open, last) = self.open_and_last();
            let last = last.max(from);
            let deadline = if open > 0 {
                Instant::now() + limit
            } else {
                last + limit
            };
            tokio::time::sleep_until(deadline).await;
            let (open, last) = self.open_and_last();
            let last = last.max(from);
            if open == 0 && Instant::now() >= last + limit {
                return;
            }
        }
    }

    /// The open streams, and when the last one closed. `open` first (Acquire, paired with the
    /// Release in [`Open`]'s drop, which updates `last_ms` before): a count that saw a stream
    /// close also sees its `last_ms`, never an older one (which would make a connection whose
    /// long stream just ended look idle for long already, and close it at once).
    fn open_and_last(&self) -> (usize, Instant) {
        let open = self.open.load(Ordering::Acquire);
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        (open, last)
    }
}

/// One open stream (see [`Activity::open`]).
#[derive(Debug)]
pub(crate) struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = u64::try_from(a.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.last_ms.fetch_max(ms, Ordering::Relaxed);
        // Release: `last_ms` above is seen by whoever sees this count (`open_and_last`).
        a.open.fetch_sub(1, Ordering::Release);
    }
}

/// `resp` whose stream stays open until its body is done or dropped. `None`: as it is (an
/// HTTP/1 answer). The stream of an answer that opened a CONNECT tunnel
/// ([`super::TunnelOpened`]) stays open until the tunnel ends (see the module's doc).
pub(crate) fn track(resp: Response<Body>, open: Option<Open>) -> Response<Body> {
    match open {
        None => resp,
        Some(open) => match resp.extensions().get::<super::TunnelOpened>() {
            Some(tunnel) => {
                *tunnel.0.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(open);
                resp
            }
            None => resp.map(|inner| Tracked { inner, _open: open }.boxed()),
        },
    }
}

struct Tracked {
    inner: Body,
    _open: Open,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolves when `guard` finds a head late.
    async fn late(guard: &mut HeadGuard) {
        std::future::poll_fn(|cx| guard.poll_late(cx)).await
    }

    /// The first head is given exactly the limit from the connection's start; a later head at
    /// least the limit from when it was awaited and at most twice that; a request being served
    /// (a head came, the next not awaited yet) is never late, however long it takes.
    #[tokio::test(start_paused = true)]
    async fn a_late_head_is_found_within_one_to_two_limits() {
        let limit = Duration::from_secs(10);
        // The first head, never sent.
        let heads = Heads::new();
        let start = Instant::now();
        late(&mut HeadGuard::new(heads.clone(), limit)).await;
        assert_eq!(Instant::now(), start + limit);

        // A request served for ten limits, then the next head awaited at various points
        // between two looks of the guard.
        for offset in [0u64, 1, 5_000, 9_999] {
            let heads = Heads::new();
            let mut guard = HeadGuard::new(heads.clone(), limit);
            heads.finished();
            let served = tokio::time::timeout(limit * 10, late(&mut guard)).await;
            assert!(served.is_err(), "a request being served was found late");
            tokio::time::sleep(Duration::from_millis(offset)).await;
            heads.begun();
            let begun = Instant::now();
            late(&mut guard).await;
            let waited = Instant::now() - begun;
            assert!(waited >= limit, "closed after {waited:?}, under the limit");
            assert!(
                waited <= limit * 2,
                "closed after {waited:?}, past twice the limit"
            );
        }

        // Heads that keep coming within the limit are never late.
        let heads = Heads::new();
        let mut guard = HeadGuard::new(heads.clone(), limit);
        let kept = tokio::time::timeout(limit * 10, async {
            loop {
                tokio::select! {
                    () = late(&mut guard) => return,
                    () = tokio::time::sleep(limit / 3) => {}
                }
                heads.finished();
                heads.begun();
            }
        })
        .await;
        assert!(
            kept.is_err(),
            "a connection whose heads kept coming was closed"
        );
    }

    /// Marks are idempotent: a head begun twice is one head, a head finished with none
    /// awaited (an HTTP/2 stream) changes nothing.
    #[test]
    fn heads_count_each_head_once() {
        let heads = Heads::new();
        assert_eq!(heads.awaited(), Some(1));
        heads.begun();
        assert_eq!(heads.awaited(), Some(1));
        heads.finished();
        heads.finished();
        assert_eq!(heads.awaited(), None);
        heads.begun();
        heads.begun();
        assert_eq!(heads.awaited(), Some(3));
    }

    /// Idle only once no stream is open for the limit: an open one (a body still being sent)
    /// keeps the connection, its close starts the count.
    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_closed_stream() {
        let a = Activity::new();
        let limit = Duration::from_secs(10);
        let resp = track(Response::new(crate::body::full("x")), Some(a.open()));
        assert!(a.is_h2());
        let idle = a.idle(limit);
        tokio::pin!(idle);
        // 30 s with the answer's body held: not idle.
        assert!(tokio::time::timeout(Duration::from_secs(30), idle.as_mut())
            .await
            .is_err());
        let closed_at = Instant::now();
        drop(resp);
        idle.await;
        assert!(Instant::now() >= closed_at + limit);
        assert!(Instant::now() < closed_at + limit + Duration::from_secs(1));
    }

    /// After a GOAWAY to a connection idle already, the wait counts from the GOAWAY, and a
    /// stream opened meanwhile (before the client saw the GOAWAY) defers it to its end.
    #[tokio::test(start_paused = true)]
    async fn idle_after_counts_from_its_start_and_waits_for_streams() {
        let a = Activity::new();
        let limit = Duration::from_secs(10);
        drop(track(Response::new(crate::body::empty()), Some(a.open())));
        tokio::time::sleep(limit * 3).await;
        let goaway = Instant::now();
        let late = a.open();
        let wait = a.idle_after(goaway, limit);
        tokio::pin!(wait);
        assert!(tokio::time::timeout(limit * 2, wait.as_mut())
            .await
            .is_err());
        let closed_at = Instant::now();
        drop(late);
        wait.await;
        assert!(Instant::now() >= closed_at + limit);
        // No stream: one limit after the GOAWAY.
        let goaway = Instant::now();
        a.idle_after(goaway, limit).await;
        assert!(Instant::now() >= goaway + limit);
        assert!(Instant::now() < goaway + limit + Duration::from_secs(1));
    }

    /// A connection whose stream opened a CONNECT tunnel is not idle while the tunnel runs,
    /// though hyper drops that stream's answer at once: the tunnel lives on in its own task.
    /// Once the tunnel ends, the limit counts from then.
    #[tokio::test(start_paused = true)]
    async fn a_connection_is_not_idle_while_its_tunnel_runs() {
        let a = Activity::new();
        let limit = Duration::from_secs(10);
        let (mark, tunnel) = super::super::TunnelOpened::new();
        let mut opened = Response::new(crate::body::empty());
        opened.extensions_mut().insert(mark);
        drop(track(opened, Some(a.open())));
        let idle = a.idle(limit);
        tokio::pin!(idle);
        assert!(
            tokio::time::timeout(limit * 10, idle.as_mut())
                .await
                .is_err(),
            "a connection carrying a tunnel was found idle"
        );
        let ended = Instant::now();
        drop(tunnel);
        idle.await;
        assert!(Instant::now() >= ended + limit);
        assert!(Instant::now() < ended + limit + Duration::from_secs(1));
        // Another connection, whose stream got an ordinary answer, is idle after the limit.
        let b = Activity::new();
        drop(track(Response::new(crate::body::empty()), Some(b.open())));
        tokio::time::timeout(limit * 2, b.idle(limit))
            .await
            .expect("idle after the limit");
    }
}
