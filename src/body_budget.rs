//! One bound on request bytes buffered in memory at once, across every connection and stream.
//! Creates and completion requests are read whole (to dedupe, to queue, to find the model);
//! each may be up to `limits.max_body_bytes`, and HTTP/2 lets one connection carry many
//! streams, so without a global bound a few clients could make Weir hold gigabytes. Bytes are
//! reserved frame by frame as they arrive, and held until the request is answered; a request
//! whose next frame finds no room gets a 503 `overloaded` problem with `Retry-After`, at once
//! (waiting would hold what it has already read).

use crate::body::ReadWholeError;
use crate::problem::{Problem, ProblemKind};
use bytes::Bytes;
use http::StatusCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is this many request bodies of the largest allowed size.
pub const BODIES: usize = 8;

/// The longest a body being read whole may send nothing: past it the request gets a 408
/// problem and gives its bytes back. Without it a client that stopped mid-body (or claimed a
/// large `Content-Length` and sent less) kept its share of the budget for as long as its
/// connection lived: nine such requests from one client left no room, and every create and
/// completion request got 503 "try again shortly" until they went away. A slow sender that
/// keeps sending is never cut off.
pub const BODY_IDLE: Duration = Duration::from_secs(30);

/// The shared budget and what it has seen (for `/metrics`).
#[derive(Debug)]
pub struct BodyBudget {
    capacity: usize,
    room: Arc<Semaphore>,
    held: AtomicUsize,
    peak: AtomicUsize,
    refused: AtomicU64,
}

/// Bytes of one request held against the budget; given back on drop.
#[derive(Debug)]
pub struct Held {
    budget: Arc<BodyBudget>,
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Relaxed);
        drop(self.permit.take());
    }
}

impl BodyBudget {
    /// A budget of `BODIES × max_body_bytes` (fixed at start; a live change of
    /// `max_body_bytes` applies per request, not to the budget).
    pub fn for_limit(max_body_bytes: usize) -> Arc<BodyBudget> {
        let capacity = max_body_bytes
            .saturating_mul(BODIES)
            .min(Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        Arc::new(BodyBudget {
            capacity,
            room: Arc::new(Semaphore::new(capacity)),
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// The most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed)
    }

    /// Requests refused because the budget was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    fn take(self: &Arc<Self>, held: &mut Held, n: usize) -> bool {
        let Ok(p) = self.room.clone().try_acquire_many_owned(n as u32) else {
            return false;
        };
        match &mut held.permit {
            Some(mine) => mine.merge(p),
            None => held.permit = Some(p),
        }
        held.bytes += n;
        let now = self.held.fetch_add(n, Relaxed) + n;
        self.peak.fetch_max(now, Relaxed);
        true
    }
}

/// Reads `body` whole, at most `limit` bytes (413 beyond, naming `what`, e.g. "a create
/// body"), each frame's bytes reserved from `budget` (503 when it is full). Keep the [`Held`]
/// for as long as the bytes are buffered.
pub async fn collect<B>(
    budget: &Arc<BodyBudget>,
    body: B,
    limit: usize,
    what: &str,
) -> Result<(Bytes, Held), Problem>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut held = Held {
        budget: budget.clone(),
        permit: None,
        bytes: 0,
    };
    let take = |n| budget.take(&mut held, n).then_some(()).ok_or(());
    let bytes = crate::body::read_whole_with(Idle::new(body, BODY_IDLE), limit, take)
        .await
        .map_err(|e| match e {
            ReadWholeError::Body(Stalled::Idle(idle)) => Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                ProblemKind::BadRequest,
                format!(
                    "the request body stalled: no bytes for {} s, so Weir stopped waiting for it",
                    idle.as_secs()
                ),
            ),
            ReadWholeError::Body(Stalled::Body(e)) => Problem::new(
                StatusCode::BAD_REQUEST,
                ProblemKind::BadRequest,
                format!("the request body broke off: {e}"),
            ),
            ReadWholeError::TooLarge => Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemKind::BodyTooLarge,
                format!("{what} may be at most {limit} bytes (limits.max_body_bytes)"),
            ),
            ReadWholeError::Refused(()) => {
                budget.refused.fetch_add(1, Relaxed);
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ProblemKind::Overloaded,
                    format!(
                        "Weir is holding {} bytes of request bodies, its bound ({} × limits.max_body_bytes); try again shortly",
                        budget.capacity, BODIES
                    ),
                )
                .retry_after(Duration::from_secs(1))
            }
        })?;
    Ok((bytes, held))
}

/// A body that fails once it has sent nothing for `idle` (see [`BODY_IDLE`]).
struct Idle<B> {
    body: B,
    idle: Duration,
    quiet: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> Idle<B> {
    fn new(body: B, idle: Duration) -> Idle<B> {
        Idle {
            body,
            idle,
            quiet: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

/// Why an [`Idle`] body stopped.
enum Stalled<E> {
    Body(E),
    Idle(Duration),
}

impl<E: std::fmt::Display> std::fmt::Display for Stalled<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stalled::Body(e) => e.fmt(f),
            Stalled::Idle(d) => write!(f, "no bytes for {} s", d.as_secs()),
        }
    }
}

impl<B> http_body::Body for Idle<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = Stalled<B::Error>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.idle;
                this.quiet.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Stalled::Body)))
            }
            Poll::Pending => match this.quiet.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Stalled::Idle(this.idle)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    /// A body that sends `first` and then nothing, ever (a client stopped mid-body).
    struct Stops(Option<Bytes>);

    impl http_body::Body for Stops {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(b) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
                None => std::task::Poll::Pending,
            }
        }
    }

    /// A stalled body is given up after `BODY_IDLE` with a 408, and its bytes go back to the
    /// budget (it held them for as long as the connection lived, and nine such requests
    /// refused every create).
    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_gives_its_bytes_back() {
        let budget = BodyBudget::for_limit(100);
        let read = collect(
            &budget,
            Stops(Some(Bytes::from(vec![b'x'; 90]))),
            100,
            "a body",
        );
        let p = tokio::time::timeout(BODY_IDLE * 2, read)
            .await
            .expect("given up, not held forever")
            .unwrap_err();
        assert_eq!(p.status, 408, "{}", p.detail);
        assert!(p.detail.contains("stalled"), "{}", p.detail);
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.peak(), 90);
    }

    #[tokio::test]
    async fn bytes_are_held_until_dropped_and_a_full_budget_refuses() {
        let budget = BodyBudget::for_limit(100);
        assert_eq!(budget.capacity(), 800);
        let body = |n: usize| Full::new(Bytes::from(vec![b'x'; n]));
        let (a, ha) = collect(&budget, body(100), 100, "a body").await.unwrap();
        assert_eq!(a.len(), 100);
        let mut kept = vec![ha];
        for _ in 0..7 {
            kept.push(collect(&budget, body(100), 100, "a body").await.unwrap().1);
        }
        assert_eq!((budget.held(), budget.peak()), (800, 800));
        let p = collect(&budget, body(1), 100, "a body").await.unwrap_err();
        assert_eq!(p.status, 503);
        assert_eq!(budget.refused(), 1);
        let p = collect(&budget, body(101), 100, "a create body")
            .await
            .unwrap_err();
        assert_eq!(p.status, 413);
        assert!(p
            .detail
            .starts_with("a create body may be at most 100 bytes"));
        kept.clear();
        assert_eq!(budget.held(), 0);
        assert!(collect(&budget, body(100), 100, "a body").await.is_ok());
    }
}
