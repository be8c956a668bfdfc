//! The one response/request body type the proxy passes around: boxed, so streamed upstream
//! bodies, cached bytes and problem documents all fit.

use bytes::{Bytes, BytesMut};
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

/// Why [`read_whole`] (or [`read_whole_with`]) stopped before the end of the body.
#[derive(Debug)]
pub enum ReadWholeError<E, R = std::convert::Infallible> {
    /// The body is longer than the limit.
    TooLarge,
    /// The body broke off (the peer's error).
    Body(E),
    /// [`read_whole_with`]'s `take` refused a frame's bytes.
    Refused(R),
}

/// The most [`read_whole`] reserves up front from a body's own length claim (a `Content-Length`
/// is the peer's word, not bytes in hand).
const RESERVE_AHEAD_MAX: usize = 64 * 1024;

/// Reads `body` whole into one buffer, at most `limit` bytes, copying each frame's bytes and
/// dropping the frame at once.
///
/// Why not `http_body_util`'s `collect`: it keeps every frame until the end, and each frame
/// hyper reads is a slice of its connection's read buffer (8 KiB or more per read). A peer that
/// sends a body a few bytes per packet then pins a whole read buffer per few bytes: in the soak's
/// trickle phase (8 bytes per 100 ms) each ~1 KiB answer being read held about 1 MiB, 14 MiB of
/// heap at once, and the allocator kept the pages (#31 item 8, docs/reliability.md). A copied
/// frame is dropped before the next read, so hyper reuses its buffer; the answer kept (in the
/// cache, for instance) is exactly its own bytes.
pub async fn read_whole<B>(body: B, limit: usize) -> Result<Bytes, ReadWholeError<B::Error>>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let claimed = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    let buf = BytesMut::with_capacity(claimed.min(limit).min(RESERVE_AHEAD_MAX));
    read_frames(body, limit, buf, |_| Ok(())).await
}

/// [`read_whole`] with `take` asked for each frame's bytes before they are kept (a budget of
/// bytes held, `crate::body_budget`): its `Err` stops the read. Nothing is reserved ahead of
/// the bytes `take` allowed.
pub async fn read_whole_with<B, R>(
    body: B,
    limit: usize,
    take: impl FnMut(usize) -> Result<(), R>,
) -> Result<Bytes, ReadWholeError<B::Error, R>>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    read_frames(body, limit, BytesMut::new(), take).await
}

async fn read_frames<B, R>(
    mut body: B,
    limit: usize,
    mut buf: BytesMut,
    mut take: impl FnMut(usize) -> Result<(), R>,
) -> Result<Bytes, ReadWholeError<B::Error, R>>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ReadWholeError::Body)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if buf.len() + data.len() > limit {
            return Err(ReadWholeError::TooLarge);
        }
        if !data.is_empty() {
            take(data.len()).map_err(ReadWholeError::Refused)?;
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// What hyper hands out for a body sent a few bytes per packet: each frame a few bytes
    /// sliced from its own 8 KiB read buffer. Counts the buffers still alive when the next
    /// frame is read.
    struct Trickle {
        left: usize,
        live: Arc<AtomicUsize>,
        most_live: usize,
    }

    struct ReadBuffer {
        bytes: Vec<u8>,
        live: Arc<AtomicUsize>,
    }

    impl AsRef<[u8]> for ReadBuffer {
        fn as_ref(&self) -> &[u8] {
            &self.bytes
        }
    }

    impl Drop for ReadBuffer {
        fn drop(&mut self) {
            self.live.fetch_sub(1, SeqCst);
        }
    }

    impl http_body::Body for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            self.left -= 1;
            let was_live = self.live.fetch_add(1, SeqCst);
            self.most_live = self.most_live.max(was_live);
            let buffer = ReadBuffer {
                bytes: vec![b'x'; 8192],
                live: self.live.clone(),
            };
            Poll::Ready(Some(Ok(http_body::Frame::data(
                Bytes::from_owner(buffer).slice(..8),
            ))))
        }
    }

    /// #31 item 8: a body read 8 bytes at a time keeps no earlier read buffer alive while the
    /// next is read (with `collect`, all 125 of them were: 1 MiB for a 1,000-byte answer).
    #[tokio::test]
    async fn a_trickled_body_pins_no_read_buffers() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut body = Trickle {
            left: 125,
            live: live.clone(),
            most_live: 0,
        };
        let bytes = read_whole(&mut body, 64 * 1024).await.unwrap();
        assert_eq!(bytes.len(), 1000);
        assert!(bytes.iter().all(|b| *b == b'x'));
        assert_eq!(
            body.most_live, 0,
            "read buffers alive while the next frame was read"
        );
        assert_eq!(live.load(SeqCst), 0, "the answer holds no read buffer");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let mut body = Trickle {
            left: 10,
            live: Arc::new(AtomicUsize::new(0)),
            most_live: 0,
        };
        assert!(matches!(
            read_whole(&mut body, 79).await,
            Err(ReadWholeError::TooLarge)
        ));
        let whole = read_whole(full("exactly"), 7).await.unwrap();
        assert_eq!(&whole[..], b"exactly");
    }
}
