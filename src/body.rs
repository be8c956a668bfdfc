//! The one response/request body type the proxy passes around: boxed, so streamed upstream
//! bodies, cached bytes and problem documents all fit.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Boxes any body whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

/// Bytes already read from a body (to decide what it is, or to see its first byte before
/// answering), then the rest of it as it comes. Used by the logs' shape decision
/// (`pipeline::shape`) and the model class's recorded stream (`pipeline::model_stream`).
pub struct Prefixed<B> {
    first: Option<Bytes>,
    rest: B,
}

impl<B> Prefixed<B> {
    /// `first` is sent first; an empty one is skipped.
    pub fn new(first: Option<Bytes>, rest: B) -> Prefixed<B> {
        Prefixed {
            first: first.filter(|b| !b.is_empty()),
            rest,
        }
    }
}

impl<B> http_body::Body for Prefixed<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        if let Some(b) = self.first.take() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(b))));
        }
        std::pin::Pin::new(&mut self.rest)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let mut h = self.rest.size_hint();
        if let Some(f) = &self.first {
            let n = f.len() as u64;
            // Upper first: `set_lower` refuses a lower bound above the upper one.
            if let Some(u) = h.upper() {
                h.set_upper(u.saturating_add(n));
            }
            h.set_lower(h.lower().saturating_add(n));
        }
        h
    }
}
