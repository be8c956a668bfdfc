//! Whether one upstream answer is a complete document or a stream, decided from the answer
//! itself (a `stream` route such as a session's logs may send either): a document is read
//! whole, so it can be cached and shared like `view`; a stream passes on byte for byte, with
//! whatever was read while deciding sent first.
//!
//! Both real clients of the logs route read the answer whole (gh `io.ReadAll`, VS Code
//! `response.text()`), polling it every 5 s and 3 s; neither reads it as events. What the real
//! server sends is not known (see `tests/corpus/answers.json`, `session_logs`), so nothing
//! here depends on it:
//! - `text/event-stream` without a `Content-Length`: a stream, at once (no event is held back);
//! - a `Content-Length` above `max_body_bytes`: a stream, at once;
//! - anything else is read for at most [`DOCUMENT_WINDOW`] and `max_body_bytes`: if it ends in
//!   time it is a document, else it becomes a stream (what was read goes first). So an answer
//!   that never ends is never buffered beyond the cap, nor held back longer than the window.

use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::Instant;

/// How long an answer of unknown shape may take to end before it is passed on as a stream: a
/// document of a few hundred kilobytes arrives well within it; a stream's first bytes are held
/// back at most this long.
pub(super) const DOCUMENT_WINDOW: Duration = Duration::from_secs(2);

/// One answer, shaped.
pub(super) enum Shaped {
    /// Complete, read whole.
    Document(Response<Bytes>),
    /// Still running (or too large): relayed as it comes.
    Stream(Response<Body>),
}

/// Reads `resp` as far as needed to tell a document from a stream (see the module docs).
pub(super) async fn read(
    resp: Response<Body>,
    cap: usize,
    window: Duration,
) -> Result<Shaped, BoxError> {
    let (parts, mut body) = resp.into_parts();
    // A `304` (an answer to Weir's conditional refresh) has no body, whatever its headers say.
    if parts.status == http::StatusCode::NOT_MODIFIED {
        return Ok(Shaped::Document(Response::from_parts(parts, Bytes::new())));
    }
    let length = content_length(&parts.headers);
    let streams_at_once = match length {
        Some(n) => n > cap as u64,
        None => is_event_stream(&parts.headers),
    };
    if streams_at_once {
        return Ok(Shaped::Stream(Response::from_parts(parts, body)));
    }
    let deadline = Instant::now() + window;
    let mut read = BytesMut::new();
    loop {
        if body.is_end_stream() {
            return Ok(Shaped::Document(Response::from_parts(parts, read.freeze())));
        }
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => break,
            Ok(None) => return Ok(Shaped::Document(Response::from_parts(parts, read.freeze()))),
            Ok(Some(Err(e))) => return Err(e),
            Ok(Some(Ok(frame))) => {
                // Trailers end a body: what was read is the whole document.
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                }
                if read.len() > cap {
                    break;
                }
            }
        }
    }
    let rest = crate::body::Prefixed::new(Some(read.freeze()), body);
    Ok(Shaped::Stream(Response::from_parts(
        parts,
        crate::body::boxed(rest),
    )))
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::StreamBody;

    /// A body that sends `chunks` and then, if `open`, never ends.
    fn body(chunks: &[&'static str], open: bool) -> Body {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes()))))
            .collect();
        let s = futures_util::stream::iter(frames);
        if open {
            crate::body::boxed(StreamBody::new(s.chain(futures_util::stream::pending())))
        } else {
            crate::body::boxed(StreamBody::new(s))
        }
    }

    fn resp(headers: &[(&'static str, &'static str)], b: Body) -> Response<Body> {
        let mut r = Response::new(b);
        for (k, v) in headers {
            r.headers_mut()
                .insert(*k, http::HeaderValue::from_static(v));
        }
        r
    }

    async fn all(r: Response<Body>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    use futures_util::StreamExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_chunked_answer_that_ends_is_a_document() {
        let r = resp(
            &[("content-type", "text/plain")],
            body(&["data: a\n", "data: b\n"], false),
        );
        match read(r, 1024, DOCUMENT_WINDOW).await.unwrap() {
            Shaped::Document(d) => assert_eq!(&d.body()[..], b"data: a\ndata: b\n"),
            Shaped::Stream(_) => panic!("a body that ended is a document"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_stream_with_a_length_is_a_document() {
        let r = resp(
            &[
                ("content-type", "text/event-stream"),
                ("content-length", "8"),
            ],
            body(&["data: a\n"], false),
        );
        assert!(matches!(
            read(r, 1024, DOCUMENT_WINDOW).await.unwrap(),
            Shaped::Document(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_stream_without_a_length_streams_at_once_and_intact() {
        let r = resp(
            &[("content-type", "text/event-stream; charset=utf-8")],
            body(&["data: a\n", "data: b\n"], false),
        );
        match read(r, 1024, DOCUMENT_WINDOW).await.unwrap() {
            Shaped::Stream(s) => assert_eq!(&all(s).await[..], b"data: a\ndata: b\n"),
            Shaped::Document(_) => panic!("an event stream is streamed"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_never_ends_becomes_a_stream_after_the_window() {
        let r = resp(
            &[("content-type", "text/plain")],
            body(&["data: a\n"], true),
        );
        let started = Instant::now();
        let Shaped::Stream(s) = read(r, 1024, DOCUMENT_WINDOW).await.unwrap() else {
            panic!("an open body is not a document");
        };
        assert_eq!(started.elapsed(), DOCUMENT_WINDOW);
        let mut b = s.into_body();
        // What was read while deciding comes first, unchanged.
        let first = b.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"data: a\n");
    }

    #[tokio::test(start_paused = true)]
    async fn more_than_the_cap_becomes_a_stream_with_every_byte() {
        let r = resp(&[], body(&["0123456789", "abcdefghij", "klm"], false));
        let Shaped::Stream(s) = read(r, 15, DOCUMENT_WINDOW).await.unwrap() else {
            panic!("beyond the cap is never buffered whole");
        };
        assert_eq!(&all(s).await[..], b"0123456789abcdefghijklm");
        let big = resp(&[("content-length", "100")], body(&[], true));
        assert!(matches!(
            read(big, 15, DOCUMENT_WINDOW).await.unwrap(),
            Shaped::Stream(_)
        ));
    }
}
