//! Copilot API hosts announced in answers passing through Weir. Two answers name the host an
//! account's agent calls go to:
//! - a token answer's `endpoints.api` (`GET api.github.com/copilot_internal/v2/token`, the
//!   `token` class, which the cache phase fetches whole): VS Code and the Copilot CLI;
//! - gh's GraphQL answer `data.viewer.copilotEndpoints.api` (`POST api.github.com/graphql`,
//!   class `other`, streamed through): gh 2.80+ (cli/cli `pkg/cmd/agent-task/capi`).
//!
//! A `*.githubcopilot.com` host no configured upstream covers is managed from then on (see
//! `crate::upstream::learned`, which also refuses every other host).

use crate::body::{Body, BoxError};
use crate::cache::Stored;
use crate::config::RouteClass;
use crate::upstream::Upstreams;
use bytes::Bytes;
use http::{HeaderMap, Method, Response};
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The most of a GraphQL answer that is copied to look for the host. gh's `viewer` answer is a
/// few hundred bytes; a larger answer is some other query and is passed on untouched.
const GRAPHQL_COPY_MAX: usize = 64 * 1024;

/// Called with every upstream answer the cache phase fetched.
pub(super) fn observe(upstreams: &Upstreams, class: RouteClass, stored: &Stored) {
    if class != RouteClass::Token || !stored.is_success() {
        return;
    }
    if let Some(body) = super::token_age::decoded_body(&stored.headers, &stored.body) {
        upstreams.learn_from(&body);
    }
}

/// Whether a request is a GraphQL query whose answer may name the Copilot API host
/// (`/graphql` on github.com's API, `/api/graphql` on GitHub Enterprise Server).
pub(super) fn is_graphql(method: &Method, path: &str) -> bool {
    method == Method::POST && matches!(path, "/graphql" | "/api/graphql")
}

/// `resp` unchanged for the client, while a copy of its first [`GRAPHQL_COPY_MAX`] bytes is
/// read for `copilotEndpoints` once it has been passed on whole. Nothing waits for the copy:
/// the client gets every frame as it arrives.
pub(super) fn watch_graphql(upstreams: Arc<Upstreams>, resp: Response<Body>) -> Response<Body> {
    if !resp.status().is_success() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let copy = Copy {
        inner: body,
        seen: Vec::new(),
        too_big: false,
        encoding: encoding_of(&parts.headers),
        upstreams: Some(upstreams),
    };
    Response::from_parts(parts, crate::body::boxed(copy))
}

/// Only the `Content-Encoding` is needed to read the copy.
fn encoding_of(headers: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in headers.get_all(http::header::CONTENT_ENCODING) {
        h.append(http::header::CONTENT_ENCODING, v.clone());
    }
    h
}

/// A body that passes every frame on and keeps a bounded copy of the data.
struct Copy {
    inner: Body,
    seen: Vec<u8>,
    too_big: bool,
    encoding: HeaderMap,
    /// Taken when the copy is read (once, at the end of the body).
    upstreams: Option<Arc<Upstreams>>,
}

impl Copy {
    fn finished(&mut self) {
        let Some(upstreams) = self.upstreams.take() else {
            return;
        };
        if self.too_big {
            return;
        }
        if let Some(body) = super::token_age::decoded_body(&self.encoding, &self.seen) {
            upstreams.learn_from(&body);
        }
    }
}

impl Drop for Copy {
    /// hyper stops polling once a body says it has ended (its `Content-Length` is met), so the
    /// clean end may never be polled (as `model_stream::Recorded` knows): a body dropped whole
    /// is read here. One dropped part-way teaches nothing.
    fn drop(&mut self) {
        if http_body::Body::is_end_stream(&self.inner) {
            self.finished();
        }
    }
}

impl http_body::Body for Copy {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if this.seen.len() + data.len() > GRAPHQL_COPY_MAX {
                        this.too_big = true;
                        this.seen = Vec::new();
                    } else if !this.too_big {
                        this.seen.extend_from_slice(data);
                    }
                }
            }
            Poll::Ready(None) => this.finished(),
            // A body cut short is not read: a partial answer names nothing reliably.
            Poll::Ready(Some(Err(_))) => this.too_big = true,
            Poll::Pending => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_graphql_posts_are_watched() {
        assert!(is_graphql(&Method::POST, "/graphql"));
        assert!(is_graphql(&Method::POST, "/api/graphql"));
        assert!(!is_graphql(&Method::GET, "/graphql"));
        assert!(!is_graphql(&Method::POST, "/graphql/extra"));
    }
}
