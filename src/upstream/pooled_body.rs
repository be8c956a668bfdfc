//! The body of an upstream response that drives its own HTTP/1 connection: a streamed
//! response outlives the request's future (the server's connection task polls it long after
//! the handler returned), so whoever polls the body polls the connection too, and the body's
//! end hands the connection back to [`super::conn_pool`] for the next request.

use super::conn_pool::{ConnPool, Key, H1};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// An upstream response body. Its connection (when it has one to drive) goes back to the pool
/// once the body ends, or is closed if the body is dropped unfinished or fails.
pub struct PooledBody {
    inner: Incoming,
    conn: Option<Driving>,
}

struct Driving {
    h1: H1,
    pool: ConnPool,
    key: Key,
}

impl PooledBody {
    /// A body whose connection is someone else's business (HTTP/2, or already handed back).
    pub(crate) fn detached(inner: Incoming) -> PooledBody {
        PooledBody { inner, conn: None }
    }

    /// A body that drives `h1` until it ends, then pools it under `key`.
    pub(crate) fn driving(inner: Incoming, h1: H1, pool: ConnPool, key: Key) -> PooledBody {
        PooledBody {
            inner,
            conn: Some(Driving { h1, pool, key }),
        }
    }

    /// Polls the connection once (it reads what the body is waiting for). A connection that
    /// ended is let go: its last bytes (or error) are in the body's channel already.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(d) = self.conn.as_mut() {
            if Pin::new(&mut d.h1.conn).poll(cx).is_ready() {
                self.conn = None;
            }
        }
    }

    /// The body is over: the connection goes back to the pool if it is ready for another
    /// request (the exchange finished and neither side asked to close).
    fn release(&mut self, cx: &mut Context<'_>) {
        if let Some(mut d) = self.conn.take() {
            if d.h1.settle_in(cx) {
                d.pool.put(d.key, d.h1);
            }
        }
    }
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending() && this.conn.is_some() {
            // What the body waits for comes from the connection, which only this task polls.
            this.drive(cx);
            polled = Pin::new(&mut this.inner).poll_frame(cx);
        }
        match &polled {
            Poll::Pending => {}
            Poll::Ready(Some(Err(_))) => this.conn = None,
            Poll::Ready(None) => this.release(cx),
            Poll::Ready(Some(Ok(_))) => {
                // hyper's server stops polling a body that says it has ended.
                if this.inner.is_end_stream() {
                    this.release(cx);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // Read to its end but not polled once more (a caller that stopped at `is_end_stream`):
        // the connection is still good. Unfinished, it is closed with the body.
        if self.conn.is_some() && self.inner.is_end_stream() {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            self.release(&mut cx);
        }
    }
}
