//! The listener: accepts connections (bounded), serves HTTP/1.1 and HTTP/2 with upgrades (for
//! CONNECT), guards against slow clients, and drains in-flight requests on shutdown.

use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use http::StatusCode;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

pub(crate) mod cork;
pub(crate) mod drain;
pub(crate) mod idle;
pub(crate) mod timers;

/// Concurrent HTTP/2 streams per client connection.
pub(crate) const H2_MAX_STREAMS: u32 = 32;

/// Runs an HTTP/2 stream's task ([`hyper::rt::Executor`]) in place first, and spawns it only
/// if it is not done by then. hyper hands every HTTP/2 request to the executor as a task of
/// its own; spawned, a cache hit paid for the task, its scheduling (often on the other worker)
/// and a wake-up of the connection's task to write the answer: an intercepted h2 hit cost
/// 1.4x the CPU of the same hit over HTTP/1.1 (#32), where hyper runs the service inline. A
/// hit's future is done at its first poll, so it now runs as HTTP/1's does, inside the
/// connection's task, and its answer goes out with that task's next write.
///
/// The first poll has no waker of its own (hyper's `execute` gives none): a future still
/// pending after it is spawned, and the spawned task polls it again at once, so every wake-up
/// it waits for is registered with the task's real waker then. A panic in the first poll is
/// caught, as tokio catches one in a spawned task, so one stream cannot end the connection.
// `pub` for `bench_api` (the lab's HTTP/2 floor runs hyper with this very executor).
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineFirst;

impl<F> hyper::rt::Executor<F> for InlineFirst
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        use std::task::{Context, Poll, Waker};
        let mut fut = Box::pin(fut);
        let mut cx = Context::from_waker(Waker::noop());
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(_)) => {}
            Ok(Poll::Pending) => {
                tokio::spawn(fut);
            }
            Err(_) => tracing::error!("an HTTP/2 stream's handler panicked; the stream is reset"),
        }
    }
}

/// A connection's future that is polled again at once, instead of being rescheduled, when it
/// wakes itself while being polled. HTTP/2's streams wake the connection's task whenever they
/// queue a frame; with [`InlineFirst`] a hit's stream runs inside that very poll, so every
/// answer woke the running task: tokio then queued it again and woke the other worker to steal
/// it, two context switches per request where HTTP/1 has one (`/proc/PID/task/*/status`,
/// 8,921 against 4,007 for 4,000 kept-alive intercepted hits). A wake-up during the poll now
/// only marks it for one more turn here (up to [`SELF_WAKE_TURNS`]); one from anywhere else
/// wakes the task as before.
///
/// HTTP/1 runs its service inside the connection's poll and does not wake itself: a connection
/// known to speak HTTP/1 ([`SelfWakeLoop::for_protocol`]) is polled straight through, with
/// the task's own waker.
pub(crate) struct SelfWakeLoop<F> {
    inner: std::pin::Pin<Box<F>>,
    /// `None`: polled straight through.
    turns: Option<Turns>,
    /// Polled straight through since the connection was found to speak HTTP/1: the loop's
    /// state, which wakes the task with the waker kept here (updated if the task's changes).
    straight: Option<(Arc<TurnState>, std::task::Waker)>,
    /// The connection's corked IO ([`cork`]): each turn's answers leave in one write when
    /// the turn ends.
    cork: Option<Box<dyn cork::Ends>>,
}

struct Turns {
    state: Arc<TurnState>,
    waker: std::task::Waker,
}

/// Turns a connection's poll may take in a row before it yields to other tasks.
const SELF_WAKE_TURNS: usize = 8;

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const POLLING_WOKEN: u8 = 2;

struct TurnState {
    state: std::sync::atomic::AtomicU8,
    task: futures_util::task::AtomicWaker,
    /// Set by the connection's service when an HTTP/1 request arrives ([`SpeaksH1`]): the
    /// loop is then dropped and the connection polled straight through.
    h1: std::sync::atomic::AtomicBool,
    /// Set once the loop polls straight through, after `task_waker` holds the waker it is
    /// polled with: registrations made with the loop's waker before still wake that task (an
    /// `AtomicWaker` gives its waker to the first wake-up only).
    straight: std::sync::atomic::AtomicBool,
    task_waker: std::sync::Mutex<Option<std::task::Waker>>,
}

/// Tells a [`SelfWakeLoop`] made by [`SelfWakeLoop::new`] that its connection speaks HTTP/1
/// (a connection whose protocol was not known when it was made: the plain listener's, where a
/// client may speak HTTP/2 with prior knowledge). HTTP/1 runs its service inside the
/// connection's poll and does not wake itself, so the loop only cost it: its waker in every
/// registration (each readiness wake-up passed through the loop's state and its
/// `AtomicWaker`, ~0.25k instructions and four atomic writes per request, callgrind) for
/// nothing. A connection that spoke HTTP/1 never becomes an HTTP/2 one (an upgrade hands its
/// bytes to a tunnel and ends it).
#[derive(Clone)]
pub(crate) struct SpeaksH1(Arc<TurnState>);

impl SpeaksH1 {
    /// A mark for [`SelfWakeLoop::until_h1`]'s loop, made before the connection it is given
    /// to (whose service notes HTTP/1 requests on it).
    pub(crate) fn new() -> SpeaksH1 {
        SpeaksH1(Arc::new(TurnState {
            state: std::sync::atomic::AtomicU8::new(IDLE),
            task: futures_util::task::AtomicWaker::new(),
            h1: std::sync::atomic::AtomicBool::new(false),
            straight: std::sync::atomic::AtomicBool::new(false),
            task_waker: std::sync::Mutex::new(None),
        }))
    }

    /// An HTTP/1 request arrived on the connection.
    pub(crate) fn note(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.0.h1.load(Relaxed) {
            self.0.h1.store(true, Relaxed);
        }
    }
}

impl std::task::Wake for TurnState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        use std::sync::atomic::Ordering::AcqRel;
        // Woken during the poll: one more turn there. Otherwise (idle) the task is woken.
        match self.state.compare_exchange(
            POLLING,
            POLLING_WOKEN,
            AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
            Ok(_) => {}
            Err(POLLING_WOKEN) => {}
            Err(_) => {
                self.task.wake();
                // Polled straight through since (HTTP/1): a wake-up registered before then
                // still reaches the task, however many come.
                if self.straight.load(std::sync::atomic::Ordering::Acquire) {
                    let waker = self
                        .task_waker
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(w) = waker.as_ref() {
                        w.wake_by_ref();
                    }
                }
            }
        }
    }
}

impl<F: Future> SelfWakeLoop<F> {
    /// Polls `inner` again in place when it wakes itself (any protocol, or one not known yet).
    pub(crate) fn new(inner: F) -> SelfWakeLoop<F> {
        SelfWakeLoop::until_h1(inner, SpeaksH1::new())
    }

    /// As [`new`](Self::new), polled straight through once `mark` says the connection speaks
    /// HTTP/1 ([`SpeaksH1`]).
    pub(crate) fn until_h1(inner: F, mark: SpeaksH1) -> SelfWakeLoop<F> {
        let state = mark.0;
        let waker = std::task::Waker::from(state.clone());
        SelfWakeLoop {
            inner: Box::pin(inner),
            turns: Some(Turns { state, waker }),
            straight: None,
            cork: None,
        }
    }

    /// As [`new`](Self::new) for a connection that negotiated HTTP/2 (`h2`: its TLS ALPN said
    /// so); an HTTP/1 one is polled straight through (the loop cost it ~0.3 % of an
    /// intercepted HTTP/1.1 hit's instructions, for nothing).
    pub(crate) fn for_protocol(h2: bool, inner: F) -> SelfWakeLoop<F> {
        if h2 {
            return SelfWakeLoop::new(inner);
        }
        SelfWakeLoop {
            inner: Box::pin(inner),
            turns: None,
            straight: None,
            cork: None,
        }
    }

    /// Ends each turn by writing what the connection's corked IO kept during it
    /// ([`cork::for_protocol`]; `None`: nothing is corked).
    pub(crate) fn corked(mut self, cork: Option<Box<dyn cork::Ends>>) -> SelfWakeLoop<F> {
        self.cork = cork;
        self
    }
}

impl<F> SelfWakeLoop<F> {
    /// The wrapped future (e.g. to start a connection's graceful shutdown).
    pub(crate) fn inner(self: std::pin::Pin<&mut Self>) -> std::pin::Pin<&mut F> {
        self.get_mut().inner.as_mut()
    }
}

impl<F: Future> Future for SelfWakeLoop<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        use std::task::Poll;
        let me = self.get_mut();
        let Some(turns) = &me.turns else {
            if let Some((state, waker)) = &mut me.straight {
                if !waker.will_wake(cx.waker()) {
                    *waker = cx.waker().clone();
                    *state
                        .task_waker
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(waker.clone());
                }
            }
            return me.inner.as_mut().poll(cx);
        };
        if turns.state.h1.load(std::sync::atomic::Ordering::Relaxed) {
            // HTTP/1 from now on: straight through, and every registration from here on is
            // the task's own waker. One made with the loop's before still reaches the task:
            // the loop's state keeps the task's waker for them.
            let state = turns.state.clone();
            *state
                .task_waker
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cx.waker().clone());
            state.straight.store(true, Release);
            me.straight = Some((state, cx.waker().clone()));
            me.turns = None;
            return me.inner.as_mut().poll(cx);
        }
        turns.state.task.register(cx.waker());
        for _ in 0..SELF_WAKE_TURNS {
            turns.state.state.store(POLLING, Release);
            let mut inner_cx = std::task::Context::from_waker(&turns.waker);
            if let Some(cork) = &me.cork {
                cork.begin();
            }
            let polled = me.inner.as_mut().poll(&mut inner_cx);
            // Before the state is looked at: a write that fails here wakes the loop, so the
            // connection is polled once more and meets the error.
            if let Some(cork) = &me.cork {
                cork.end(&mut inner_cx);
            }
            if let Poll::Ready(out) = polled {
                turns.state.state.store(IDLE, Release);
                return Poll::Ready(out);
            }
            // Not woken meanwhile: idle until a wake-up from elsewhere.
            if turns
                .state
                .state
                .compare_exchange(POLLING, IDLE, AcqRel, Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Still waking itself: yield to the other tasks, and come back.
        turns.state.state.store(IDLE, Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The HTTP/1.1 + HTTP/2 server settings every client connection gets (plain or intercepted).
pub(crate) fn http_builder(limits: &crate::config::Limits) -> auto::Builder<InlineFirst> {
    let mut builder = auto::Builder::new(InlineFirst);
    builder
        .http1()
        // Its header-read timer is reused from request to request (`timers`).
        .timer(timers::ConnectionTimer)
        // Slowloris: a client gets this long to send its whole header section.
        .header_read_timeout(limits.header_read_timeout)
        // Room for our own, friendlier 431 check; beyond this hyper refuses by itself.
        .max_buf_size((limits.max_header_bytes * 2).max(16 * 1024));
    builder
        .http2()
        .timer(timers::ConnectionTimer)
        .max_header_list_size((limits.max_header_bytes * 2) as u32)
        // hyper's default is 200 streams per connection, each of which may buffer a body:
        // a tool needs a handful; the buffered-bytes bound (`body_budget`) covers the rest.
        .max_concurrent_streams(H2_MAX_STREAMS);
    builder
}

/// Marks an answer after which Weir closes the client's HTTP/1 connection (the request's body
/// was left unread): [`fit_to_connection`] turns it into `Connection: close`, which hyper honours
/// (it closes after the answer, with TLS close_notify on an intercepted connection). HTTP/2
/// needs no word: hyper resets that one stream and the connection stays.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloseAfter;

/// Marks the `200` that opens a CONNECT tunnel: the connection becomes the tunnel's bytes, so
/// [`fit_to_connection`] gives it no keep-alive hint (it would be meaningless). The task that
/// runs the tunnel keeps a clone ([`TunnelOpened::new`]) until the tunnel ends: on HTTP/2 the
/// tunnel's stream counts as open for the connection's idle limit until then ([`idle::track`]).
#[derive(Debug, Clone)]
pub(crate) struct TunnelOpened(Arc<idle::TunnelLife>);

impl TunnelOpened {
    /// The mark for an answer, and the tunnel task's hold on it (drop it when the tunnel ends).
    pub(crate) fn new() -> (TunnelOpened, TunnelOpened) {
        let mark = TunnelOpened(Arc::default());
        (mark.clone(), mark)
    }
}

/// Fits an answer's headers to the client's connection, the last step before hyper writes it.
///
/// HTTP/1.1: tells the client how long Weir keeps its idle connection open (`Keep-Alive:
/// timeout=N`, a second under `header_read_timeout`, after which the connection may be closed:
/// hyper's timer, or on the plain listener the connection's head guard, `idle::HeadGuard`): a client
/// that honours the hint (undici, Node's agents, many pools) opens a new connection instead of
/// reusing one Weir is about to close, and never sees that race as a reset. Answers that close
/// anyway ([`CloseAfter`]: `Connection: close`), upgrades and a CONNECT's `200`
/// ([`TunnelOpened`]) get no hint. `hint` is
/// [`keep_alive_value`], made once per connection (not formatted per answer).
///
/// HTTP/2 has its own GOAWAY and forbids connection-specific headers (hyper would strip them):
/// it gets none. There, `X-Request-Id` (unique to each answer) is sent as a never-indexed
/// literal ([`never_index_request_id`]).
pub(crate) fn fit_to_connection<B>(
    version: http::Version,
    resp: &mut Response<B>,
    hint: &http::HeaderValue,
) {
    if version == http::Version::HTTP_2 {
        never_index_request_id(resp.headers_mut());
        return;
    }
    let h1 = matches!(version, http::Version::HTTP_10 | http::Version::HTTP_11);
    if h1 && resp.extensions().get::<CloseAfter>().is_some() {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        return;
    }
    if version != http::Version::HTTP_11
        || resp.status() == StatusCode::SWITCHING_PROTOCOLS
        || resp.headers().contains_key(http::header::CONNECTION)
        || resp.extensions().get::<TunnelOpened>().is_some()
    {
        return;
    }
    // Appended, not looked up first: no answer reaches here with a `Keep-Alive` of its own
    // (it is hop-by-hop: an upstream's is stripped before it is forwarded or stored, and Weir
    // sets it nowhere else), and an entry's lookup before the insert was ~0.1k of a cache
    // hit's instructions (callgrind).
    debug_assert!(!resp.headers().contains_key(KEEP_ALIVE));
    resp.headers_mut().append(KEEP_ALIVE, hint.clone());
}

thread_local! {
    /// The keep-alive hint of the HTTP/1.1 request whose handler runs on this thread now
    /// ([`connection`] sets it around the handler's call; [`take_keep_alive_hint`]): its text,
    /// made once per process ([`keep_alive_value`]), so setting and taking it per request is a
    /// pointer's copy.
    static HINT_HERE: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// For a handler, while it makes its answer in its call (not in its future): the value
/// [`fit_to_connection`] would give this answer's `Keep-Alive`, when the request is an
/// HTTP/1.1 one. Taking it is a promise: the answer already ends with `Keep-Alive` of that
/// value and is one `fit_to_connection` would only have appended it to (no `Connection`
/// field, no [`CloseAfter`] or [`TunnelOpened`], not `101`), so it is not fitted again. A
/// handler that makes its answer otherwise gives it back ([`give_back_keep_alive_hint`]).
/// A fresh cache hit copied from a kept answer takes it (`pipeline::hit_copy`): its map then
/// gets no insertion after the copy (an insertion into a cloned map grows it: a clone has no
/// spare room).
pub(crate) fn take_keep_alive_hint() -> Option<&'static str> {
    HINT_HERE.try_with(|h| h.take()).ok().flatten()
}

/// Puts back what [`take_keep_alive_hint`] gave: the answer will be fitted as any other.
pub(crate) fn give_back_keep_alive_hint(hint: Option<&'static str>) {
    if hint.is_some() {
        let _ = HINT_HERE.try_with(|h| h.set(hint));
    }
}

/// Keeps an HTTP/2 answer's `X-Request-Id` out of the connection's HPACK table. h2 indexes
/// every value it is not told otherwise about (only `Age`, `Content-Length`, `ETag` and a few
/// others are left out by name): each answer's new request id was inserted, and the table
/// (4 KiB) chains the values of one name, so every answer compared its id with the ~50 ids
/// before it, then evicted the oldest entry, and every ~50 answers the stable headers
/// (`content-type`, `cache-status`, `server`, ...) fell out and were sent as literals again.
/// HPACK encoding was 9.7k of the 64k instructions of an intercepted h2 cache hit, 6.6k now
/// (callgrind, BENCHMARKS.md session 16, #32).
///
/// h2's only per-value hook is `HeaderValue::set_sensitive`: the field is encoded as a "never
/// indexed" literal (RFC 7541 6.2.3), not inserted, Huffman-coded as before (its name, never
/// inserted either, is a literal too: ~0.25k, against ~3k saved). "Never indexed" asks
/// intermediaries to keep it so; for a value that never repeats that costs nothing, and the
/// bytes the client reads are the same. The flag is set as the answer's last step, after
/// everything in Weir that reads the id, and only on HTTP/2 answers.
fn never_index_request_id(headers: &mut http::HeaderMap) {
    if let Some(v) = headers.get_mut(REQUEST_ID) {
        v.set_sensitive(true);
    }
}

/// The request id's header, `X-Request-Id`: defined here, where answers are fitted to their
/// connection, and used by the pipeline (`pipeline::headers`), which depends on this module.
pub(crate) const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

pub(crate) const KEEP_ALIVE: http::HeaderName = http::HeaderName::from_static("keep-alive");

/// The texts [`keep_alive_value`] made, by their number of seconds.
static MADE: std::sync::Mutex<Vec<(u64, &'static str)>> = std::sync::Mutex::new(Vec::new());

/// The text [`keep_alive_value`] made for `hint` (`None`: a value it did not make). Looked up
/// once per connection ([`connection`]).
pub(crate) fn keep_alive_text(hint: &http::HeaderValue) -> Option<&'static str> {
    let made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    made.iter()
        .map(|(_, text)| *text)
        .find(|text| text.as_bytes() == hint.as_bytes())
}

/// `timeout=N` for [`fit_to_connection`]: a second under the idle limit `idle`, at least 1.
///
/// Static text: the hint is cloned into every HTTP/1.1 answer, and a clone of a value made at
/// run time is a shared count's increment (and its drop a decrement), where a static value's
/// are nothing. Each text is made once per process and kept for it: a process sees as many
/// as the idle limits it was configured with (one, usually), each a few bytes.
pub(crate) fn keep_alive_value(idle: Duration) -> http::HeaderValue {
    let secs = idle.as_secs().saturating_sub(1).max(1);
    // A poisoned lock (a panic while it was held, which nothing here can do) still holds
    // texts made whole.
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = match made.iter().find(|(s, _)| *s == secs) {
        Some((_, text)) => *text,
        None => {
            let text: &'static str = Box::leak(format!("timeout={secs}").into_boxed_str());
            made.push((secs, text));
            text
        }
    };
    // Digits and "timeout=" are always a valid value; the fallback is never used.
    http::HeaderValue::from_str(text)
        .map(|_| http::HeaderValue::from_static(text))
        .unwrap_or_else(|_| http::HeaderValue::from_static("timeout=1"))
}

/// Serves `listener` until `shutdown`, handing each request to `handler`. `base_url` makes
/// the over-the-limit problem's `type` absolute. Header limits and the drain timeout are read
/// from `live` per connection (and at shutdown); the connection limit is fixed at start.
pub(crate) async fn serve<H, Fut>(
    listener: TcpListener,
    live: crate::config::LiveSettings,
    base_url: String,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + Unpin + 'static,
{
    let max_connections = live.get().limits.max_connections;
    let graceful = drain::Drain::new();
    let connections = Arc::new(Semaphore::new(max_connections));
    tokio::pin!(shutdown);
    while let Some((stream, peer)) = next_connection(&listener, &mut shutdown).await {
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, max_connections, base_url.clone()));
            continue;
        };
        let limits = live.get().limits.clone();
        let mut watched = Watched::new();
        let builder = watched.http_builder(&limits);
        let conn = connection(
            &builder,
            TokioIo::new(stream),
            watched.watching(graceful.watcher()),
            keep_alive_value(limits.header_read_timeout),
            watched.wrap(handler.clone()),
            None::<()>,
        );
        tokio::spawn(async move {
            if let Err(e) = watched.drive(conn, limits.header_read_timeout, peer).await {
                tracing::debug!(%peer, error = %e, "connection ended with error");
            }
            drop(permit);
        });
    }
    drop(listener);
    drain(graceful, live.get().limits.drain_timeout, "").await;
}

/// The limits hyper does not keep on a client connection, for every listener:
/// - its first request head within `header_read_timeout`: hyper's timer starts only once
///   hyper-util has seen which protocol the client speaks, and that first read has no limit, so
///   a client that connected (or finished its TLS handshake) and sent nothing, or one byte of
///   `PRI`, held its connection slot forever;
/// - with a builder from [`Watched::http_builder`] (the plain listener), every later HTTP/1
///   head within it too ([`idle::HeadGuard`], in place of hyper's timer per request);
/// - HTTP/2's idle limit ([`idle`]): the same `header_read_timeout` with no stream open.
///
/// [`Watched::wrap`] notes each head's end and counts the handler's HTTP/2 streams;
/// [`Watched::drive`] polls the connection and closes it when a limit is reached: an idle
/// HTTP/2 connection gets a GOAWAY first, through the connection's drain watcher
/// ([`Watched::watching`]).
pub(crate) struct Watched {
    heads: Arc<idle::Heads>,
    /// hyper marks every head it awaits on `heads` ([`Watched::http_builder`]): the guard
    /// keeps all of them. Otherwise only the first is marked (awaited from the start), and
    /// hyper's own timer keeps the rest.
    every_head: bool,
    activity: Arc<idle::Activity>,
    /// Set when the HTTP/2 idle limit is reached: the watcher then starts hyper's graceful
    /// close (GOAWAY) at the connection's next poll.
    close: Arc<std::sync::atomic::AtomicBool>,
}

/// A wrapped handler's future: HTTP/1's as it was, an HTTP/2 stream's boxed with its count.
type Counted<Fut> = futures_util::future::Either<
    Fut,
    std::pin::Pin<Box<dyn Future<Output = Response<Body>> + Send>>,
>;

impl Watched {
    pub(crate) fn new() -> Watched {
        Watched {
            heads: idle::Heads::new(),
            every_head: false,
            activity: idle::Activity::new(),
            close: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// [`http_builder`] for this one connection, whose HTTP/1 header-read limit this
    /// [`Watched::drive`] keeps: hyper's timer only marks the heads it awaits
    /// ([`timers::HeadTimer`]), so no timer is made per request. The limit then holds within
    /// [`header_read_timeout`, twice that] ([`idle::HeadGuard`]) where hyper's was exact.
    pub(crate) fn http_builder(
        &mut self,
        limits: &crate::config::Limits,
    ) -> auto::Builder<InlineFirst> {
        self.every_head = true;
        let mut builder = http_builder(limits);
        builder
            .http1()
            .timer(timers::HeadTimer::new(self.heads.clone()));
        builder
    }

    /// `watcher`, also closing the connection gracefully when [`Watched::drive`] finds it idle.
    pub(crate) fn watching(&self, watcher: drain::Watcher) -> drain::Watcher {
        watcher.or_when(self.close.clone())
    }

    /// `handler`, noting that a request came and counting HTTP/2 streams until their answer's
    /// body ends.
    pub(crate) fn wrap<H, Fut>(
        &self,
        handler: H,
    ) -> impl Fn(Request<Incoming>) -> Counted<Fut> + Clone + Send + Sync + 'static
    where
        H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + Unpin + 'static,
    {
        use futures_util::future::Either;
        let heads = self.heads.clone();
        let streams = self.activity.clone();
        move |req| {
            heads.finished();
            // HTTP/1 pays a version check here, nothing more: only an HTTP/2 stream is
            // counted, its answer wrapped (boxed: h2 streams are rare on a plain listener).
            if req.version() != http::Version::HTTP_2 {
                return Either::Left(handler(req));
            }
            let open = streams.open();
            let answer = handler(req);
            Either::Right(Box::pin(
                async move { idle::track(answer.await, Some(open)) },
            ))
        }
    }

    /// Polls `conn` (whose handler [`Watched::wrap`] made, and whose drain watcher
    /// [`Watched::watching`] made) until it ends, or until its first head is late (any HTTP/1
    /// head, with [`Watched::http_builder`]'s builder): then it is dropped (closed). On HTTP/2
    /// idle for `limit`, it is sent a GOAWAY and given one more `limit` with no stream open to
    /// finish its close (h2 waits for the client to answer a PING, and serves the streams it
    /// opens meanwhile), then dropped.
    pub(crate) async fn drive<C, E>(
        self,
        conn: C,
        limit: Duration,
        peer: impl std::fmt::Display,
    ) -> Result<(), E>
    where
        C: Future<Output = Result<(), E>>,
    {
        let Watched {
            heads,
            every_head,
            activity,
            close,
        } = self;
        tokio::pin!(conn);
        // Without `every_head`, dropped once the first request arrives: polled beside every
        // later request, it cost each of them a look for a limit that no longer applies. And
        // once the connection speaks HTTP/2, whose idle limit is below.
        let mut head_guard = Some(idle::HeadGuard::new(heads.clone(), limit));
        // HTTP/2's idle limit (`idle`), made once the connection is known to speak it.
        let mut idle_h2: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = None;
        let ended = std::future::poll_fn(|cx| {
            use std::task::Poll;
            // The connection first: a request already in its buffer opens its stream before
            // the limits are looked at.
            if let Poll::Ready(r) = conn.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            if let Some(guard) = &mut head_guard {
                if (!every_head && heads.awaited().is_none()) || activity.is_h2() {
                    head_guard = None;
                } else if guard.poll_late(cx).is_ready() {
                    tracing::debug!(%peer, "no request head within header_read_timeout; closed");
                    return Poll::Ready(Some(Ok(())));
                }
            }
            if idle_h2.is_none() && activity.is_h2() {
                let a = activity.clone();
                idle_h2 = Some(Box::pin(async move { a.idle(limit).await }));
            }
            if let Some(idle) = &mut idle_h2 {
                if idle.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            Poll::Pending
        })
        .await;
        if let Some(r) = ended {
            return r;
        }
        tracing::debug!(%peer, "HTTP/2 connection idle for header_read_timeout; closing (GOAWAY)");
        close.store(true, std::sync::atomic::Ordering::Relaxed);
        let goaway = tokio::time::Instant::now();
        tokio::select! {
            r = conn.as_mut() => r,
            () = activity.idle_after(goaway, limit) => {
                tracing::debug!(%peer, "HTTP/2 client did not finish its close within header_read_timeout of the GOAWAY; dropped");
                Ok(())
            }
        }
    }
}

/// The next connection (`TCP_NODELAY` set), or `None` once `shutdown` resolves. An accept
/// error (usually EMFILE) backs off briefly instead of spinning.
pub(crate) async fn next_connection(
    listener: &TcpListener,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Option<(TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    return Some((stream, peer));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut *shutdown => return None,
        }
    }
}

/// One client connection served by `handler`, watched for a graceful shutdown: each request
/// gets `tag` as an extension when there is one (the gateway's verdict on its peer), and each
/// response the keep-alive `hint`.
pub(crate) fn connection<I, H, Fut, X>(
    builder: &auto::Builder<InlineFirst>,
    io: I,
    watcher: drain::Watcher,
    hint: http::HeaderValue,
    handler: H,
    tag: Option<X>,
) -> impl Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + Unpin + 'static,
    X: Clone + Send + Sync + 'static,
{
    let h1 = SpeaksH1::new();
    let hint_text = keep_alive_text(&hint);
    let speaks_h1 = h1.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        if let Some(t) = &tag {
            req.extensions_mut().insert(t.clone());
        }
        let version = req.version();
        if version != http::Version::HTTP_2 {
            speaks_h1.note();
        }
        let offered = version == http::Version::HTTP_11 && hint_text.is_some();
        if offered {
            let _ = HINT_HERE.try_with(|h| h.set(hint_text));
        }
        // Not boxed here: a handler's future is small (`Unpin`), since hyper moves the service
        // future several times per request. The router's is an answer made at once (a fresh
        // cache hit) or the phases it boxed itself (`pipeline::Handled`); the gateway's are
        // boxed where they are made. A request future of kilobytes moved unboxed cost ~16 % of
        // a pass-through request's instructions (memcpy, callgrind).
        let fut = handler(req);
        // Taken by the handler: its answer has the hint already ([`take_keep_alive_hint`]).
        let fitted = offered && HINT_HERE.try_with(|h| h.take().is_none()).unwrap_or(false);
        let hint = hint.clone();
        async move {
            let mut resp = fut.await;
            if !fitted {
                fit_to_connection(version, &mut resp, &hint);
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = builder.serve_connection_with_upgrades(io, svc).into_owned();
    // The connection's last credential is remembered in its task, and its timers are reused
    // there (`identity::per_connection`: one scope for both).
    crate::identity::per_connection(SelfWakeLoop::until_h1(watcher.watch(conn), h1))
}

/// Waits for the connections still open to finish their requests, at most `timeout`.
pub(crate) async fn drain(graceful: drain::Drain, timeout: Duration, which: &str) {
    tracing::info!("draining in-flight requests{which} (at most {timeout:?})");
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections closed{which}"),
        _ = tokio::time::sleep(timeout) => tracing::warn!("drain timeout reached; closing the remaining connections{which}"),
    }
}

/// Over the connection limit: answer a 503 problem and close, rather than queueing unboundedly.
async fn refuse(mut stream: TcpStream, max_connections: usize, base_url: String) {
    let p = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ProblemKind::TooManyConnections,
        format!(
            "Weir already has {max_connections} client connections open (limits.max_connections)"
        ),
    )
    .with_base(&base_url);
    let body = serde_json::to_string(&p).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A stream whose answer is ready at once runs before `execute` returns (no task spawned).
    #[tokio::test]
    async fn a_ready_stream_runs_in_place() {
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        InlineFirst.execute(async move {
            d.fetch_add(1, SeqCst);
        });
        assert_eq!(done.load(SeqCst), 1);
    }

    /// One that waits is spawned and finishes when what it waits for comes, woken by its task.
    #[tokio::test]
    async fn a_waiting_stream_is_spawned_and_finishes() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        InlineFirst.execute(async move {
            let v = rx.await.unwrap_or(0);
            let _ = done_tx.send(v + 1);
        });
        tokio::task::yield_now().await;
        tx.send(41).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
        assert_eq!(got.ok().and_then(Result::ok), Some(42));
    }

    /// A wake-up during the poll is a second turn at once; one from elsewhere wakes the task;
    /// a future that keeps waking itself still yields (and is polled again).
    #[tokio::test]
    async fn self_wakes_are_turns_and_others_wake_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        // Wakes itself on its first two polls, then is done.
        let f = std::future::poll_fn(move |cx| {
            let n = p.fetch_add(1, SeqCst);
            if n < 2 {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(n)
            }
        });
        assert_eq!(SelfWakeLoop::new(f).await, 2);
        assert_eq!(polls.load(SeqCst), 3);
        // Woken from another task: done once the value comes.
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let t = tokio::spawn(SelfWakeLoop::new(async move { rx.await.unwrap_or(0) }));
        tokio::task::yield_now().await;
        tx.send(7).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), t).await;
        assert_eq!(got.ok().and_then(Result::ok), Some(7));
        // Always waking itself: yields after its turns and is polled again, until done.
        let left = Arc::new(AtomicUsize::new(3 * SELF_WAKE_TURNS));
        let l = left.clone();
        let spin = std::future::poll_fn(move |cx| {
            if l.fetch_sub(1, SeqCst) == 1 {
                return std::task::Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        });
        tokio::time::timeout(Duration::from_secs(5), SelfWakeLoop::new(spin))
            .await
            .unwrap();
        assert_eq!(left.load(SeqCst), 0);
    }

    /// A connection known to speak HTTP/1 is polled with the task's own waker (no loop); an
    /// HTTP/2 one with the loop's.
    #[test]
    fn only_http2_connections_get_the_loop() {
        use std::task::{Context, Poll, Waker};
        let task = Waker::noop();
        let mut cx = Context::from_waker(task);
        for (h2, own_waker) in [(false, true), (true, false)] {
            let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = seen.clone();
            let f = std::future::poll_fn(move |cx: &mut Context<'_>| {
                s.store(cx.waker().will_wake(Waker::noop()), SeqCst);
                Poll::Ready(())
            });
            let mut conn = std::pin::pin!(SelfWakeLoop::for_protocol(h2, f));
            assert!(conn.as_mut().poll(&mut cx).is_ready());
            assert_eq!(seen.load(SeqCst), own_waker, "h2: {h2}");
        }
    }

    /// Once its connection is found to speak HTTP/1, the loop polls straight through with the
    /// task's waker, and every wake-up registered with the loop's waker before still reaches
    /// the task (two such: the first wakes it, and the second, whose resource the straight
    /// poll did not poll again, must too).
    #[tokio::test]
    async fn a_loop_that_learns_http1_is_polled_straight_and_loses_no_wake_up() {
        use std::sync::Mutex;
        use std::task::{Poll, Waker};
        let mark = SpeaksH1::new();
        let noted = mark.clone();
        let registered: Arc<Mutex<Vec<Waker>>> = Arc::default();
        let reg = registered.clone();
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        let task_waker_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = task_waker_seen.clone();
        let inner = std::future::poll_fn(move |cx| match p.fetch_add(1, SeqCst) {
            0 => {
                // The first request: HTTP/1; two resources keep the waker of this poll.
                noted.note();
                let mut r = reg.lock().unwrap();
                r.push(cx.waker().clone());
                r.push(cx.waker().clone());
                Poll::Pending
            }
            1 => {
                // Straight through: the loop's waker is no longer the one given.
                let loops = reg.lock().unwrap().iter().any(|w| w.will_wake(cx.waker()));
                seen.store(!loops, SeqCst);
                Poll::Pending
            }
            _ => Poll::Ready(()),
        });
        let task = tokio::spawn(SelfWakeLoop::until_h1(inner, mark));
        for _ in 0..100 {
            if polls.load(SeqCst) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let first = registered.lock().unwrap().remove(0);
        first.wake();
        for _ in 0..100 {
            if polls.load(SeqCst) == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(polls.load(SeqCst), 2);
        assert!(task_waker_seen.load(SeqCst));
        let second = registered.lock().unwrap().remove(0);
        second.wake();
        let done = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(matches!(done, Ok(Ok(()))));
        assert_eq!(polls.load(SeqCst), 3);
    }

    /// A panic in the first poll is caught there: it does not unwind into hyper's connection.
    #[tokio::test]
    async fn a_panic_in_place_stays_in_its_stream() {
        let r = std::panic::catch_unwind(|| {
            InlineFirst.execute(async {
                panic!("boom");
            })
        });
        assert!(r.is_ok());
    }
}
