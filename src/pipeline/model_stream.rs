//! The body of a `model` answer once its first bytes are in hand: those bytes, then the rest
//! streamed on, with the model breaker's verdict recorded when the stream ends or breaks.

use crate::body::{BoxError, Prefixed};
use crate::config::{RouteClass, UpstreamIndex};
use crate::upstream::Upstreams;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use weir_resilience::{Kind, Permit};

/// Records a permit: `Some(true)` a failure, `Some(false)` a success, `None` nothing (the
/// permit is released).
pub(super) fn settle(permit: Option<Permit>, failure: Option<bool>) {
    if let (Some(p), Some(f)) = (permit, failure) {
        p.record(f, false);
    }
}

/// The first non-empty data of a body; `None` when it ends without any.
pub(super) async fn first_data(b: &mut Incoming) -> Result<Option<Bytes>, hyper::Error> {
    while let Some(frame) = b.frame().await {
        if let Ok(data) = frame?.into_data() {
            if !data.is_empty() {
                return Ok(Some(data));
            }
        }
    }
    Ok(None)
}

/// A streamed success: its first bytes (already read) then the rest, recording the model
/// breaker's outcome when the stream ends (success; also when it is dropped ended) or breaks
/// (failure: never retried, the client has bytes already). A client that goes away first
/// records nothing.
pub(super) struct Recorded {
    /// The first bytes, then the rest of the upstream's body.
    pub body: Prefixed<Incoming>,
    pub permit: Option<Permit>,
    pub upstreams: Arc<Upstreams>,
    pub up: UpstreamIndex,
}

impl Drop for Recorded {
    /// hyper stops polling once the body says it has ended (its `Content-Length` is met), so
    /// the clean end may never be polled: a body dropped whole is a success. One dropped
    /// part-way (the client went away) records nothing.
    fn drop(&mut self) {
        if http_body::Body::is_end_stream(&self.body) {
            settle(self.permit.take(), Some(false));
        }
    }
}

impl http_body::Body for Recorded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                settle(self.permit.take(), Some(false));
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(Some(Err(e))) => {
                if self.permit.is_some() {
                    let c = &self.upstreams.get(self.up).counters;
                    c.error(RouteClass::Model, Kind::Connection.as_str());
                }
                settle(self.permit.take(), Some(true));
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
