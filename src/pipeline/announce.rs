//! Copilot API hosts announced in answers passing through Weir, read only where Weir can
//! trust the answer to be GitHub's own word about the caller's account. Two such answers name
//! the host an account's agent calls go to:
//! - a token answer's `endpoints.api` (`GET /copilot_internal/v2/token`, the `token` class,
//!   which the cache phase fetches whole) from the `github-api` upstream: VS Code and the
//!   Copilot CLI. GitHub writes the whole answer; the client chooses nothing in it;
//! - gh's GraphQL answer `data.viewer.copilotEndpoints.api` (`POST /graphql` on the
//!   `github-api` upstream, class `other`, streamed through): gh 2.80+ (cli/cli
//!   `pkg/cmd/agent-task/shared/capi.go`). A GraphQL answer's shape is the query's, and a
//!   client may alias any field to `copilotEndpoints { api }` (`copilotEndpoints: status {
//!   api: message }`) so that GitHub's answer names any string. So the answer is read only
//!   when the request's body is exactly gh's query ([`GH_QUERY`], no aliases, no variables),
//!   checked on a bounded copy of the body as it is sent.
//!
//! Both need a credential: what is learned is kept for that credential's account (see
//! `crate::upstream::learned`, which also refuses every host outside `githubcopilot.com`).

use crate::body::{Body, BoxError};
use crate::cache::Stored;
use crate::config::UpstreamIndex;
use crate::config::{RouteClass, Settings};
use crate::identity::Identity;
use crate::upstream::{learned, Upstreams};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

/// The most of a GraphQL answer that is copied to look for the host. gh's `viewer` answer is a
/// few hundred bytes; a larger answer is some other query and is passed on untouched.
const GRAPHQL_COPY_MAX: usize = 64 * 1024;

/// gh's query for its Copilot API host, byte for byte as go-gh's GraphQL client sends it
/// (`Query("CopilotEndpoints", …)` with no variables: `{"query":"query CopilotEndpoints{…}"}`).
pub(super) const GH_QUERY: &str = "query CopilotEndpoints{viewer{copilotEndpoints{api}}}";

/// The most of a request body copied to compare with gh's query (which is 66 bytes).
const QUERY_COPY_MAX: usize = 4 * 1024;

/// Called with every upstream answer the cache phase fetched: a `github-api` token answer to a
/// credentialed request teaches the host it names.
pub(super) fn observe(
    upstreams: &Upstreams,
    settings: &Settings,
    up: UpstreamIndex,
    class: RouteClass,
    credential: Option<Identity>,
    stored: &Stored,
) {
    if class != RouteClass::Token || !stored.is_success() || !upstreams.is_github_api(up) {
        return;
    }
    let Some(credential) = credential else { return };
    if let Some(body) = super::token_age::decoded_body(&stored.headers, &stored.body) {
        if let Some(api) = learned::announced_in_token(&body) {
            upstreams.learn_announced(settings, &api, credential);
        }
    }
}

/// Whether a request is a GraphQL query whose answer may name the Copilot API host
/// (`/graphql` on github.com's API, `/api/graphql` on GitHub Enterprise Server).
pub(super) fn is_graphql(method: &Method, path: &str) -> bool {
    method == Method::POST && matches!(path, "/graphql" | "/api/graphql")
}

/// Whether `body` is gh's own `copilotEndpoints` query and nothing else: exactly [`GH_QUERY`],
/// no variables, no other operation name. Anything else (aliases, fragments, other fields,
/// other whitespace) is some other query, whose answer is passed on and never read.
pub(super) fn is_gh_query(body: &[u8]) -> bool {
    let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) else {
        return false;
    };
    o.iter().all(|(k, v)| match k.as_str() {
        "query" => v.as_str() == Some(GH_QUERY),
        "variables" => v.is_null() || v.as_object().is_some_and(|m| m.is_empty()),
        "operationName" => v.is_null() || v.as_str() == Some("CopilotEndpoints"),
        _ => false,
    }) && o.contains_key("query")
}

/// A GraphQL request on the `github-api` upstream whose answer may be read: its body is
/// compared with gh's query as it is sent, its answer read once passed on whole.
pub(super) struct GraphqlWatch {
    upstreams: Arc<Upstreams>,
    /// The request's settings snapshot (a host learned from its answer is learned under it).
    settings: Arc<Settings>,
    credential: Identity,
    /// Set once the request body has been sent whole: whether it was gh's query.
    gh_query: Arc<OnceLock<bool>>,
}

impl GraphqlWatch {
    /// A watch for a credentialed GraphQL `POST` to the `github-api` upstream; else none.
    pub(super) fn of(
        upstreams: &Arc<Upstreams>,
        settings: &Arc<Settings>,
        up: UpstreamIndex,
        credential: Option<Identity>,
        method: &Method,
        path: &str,
    ) -> Option<GraphqlWatch> {
        if !is_graphql(method, path) || !upstreams.is_github_api(up) {
            return None;
        }
        Some(GraphqlWatch {
            upstreams: upstreams.clone(),
            settings: settings.clone(),
            credential: credential?,
            gh_query: Arc::new(OnceLock::new()),
        })
    }

    /// `req` unchanged for the upstream, while its body is compared with gh's query.
    pub(super) fn request(&self, req: Request<Body>) -> Request<Body> {
        let (parts, body) = req.into_parts();
        let verdict = self.gh_query.clone();
        let copy = Tap::new(body, QUERY_COPY_MAX, move |seen: Option<&[u8]>| {
            let _ = verdict.set(seen.is_some_and(is_gh_query));
        });
        Request::from_parts(parts, crate::body::boxed(copy))
    }

    /// `resp` unchanged for the client, while a copy of its first [`GRAPHQL_COPY_MAX`] bytes
    /// is read for `copilotEndpoints` once it has been passed on whole, if the request was
    /// gh's query. Nothing waits for the copy: the client gets every frame as it arrives.
    pub(super) fn answer(self, resp: Response<Body>) -> Response<Body> {
        if !resp.status().is_success() {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let encoding = encoding_of(&parts.headers);
        let copy = Tap::new(body, GRAPHQL_COPY_MAX, move |seen: Option<&[u8]>| {
            // Only the answer to gh's own query, sent whole, says what gh's query asks.
            let Some(seen) = seen.filter(|_| self.gh_query.get() == Some(&true)) else {
                return;
            };
            if let Some(body) = super::token_age::decoded_body(&encoding, seen) {
                if let Some(api) = learned::announced_in_graphql(&body) {
                    self.upstreams
                        .learn_announced(&self.settings, &api, self.credential);
                }
            }
        });
        Response::from_parts(parts, crate::body::boxed(copy))
    }
}

/// Only the `Content-Encoding` is needed to read the copy.
fn encoding_of(headers: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in headers.get_all(http::header::CONTENT_ENCODING) {
        h.append(http::header::CONTENT_ENCODING, v.clone());
    }
    h
}

/// A body that passes every frame on and keeps a copy of its first `cap` bytes, handed to
/// `done` once, when the body has been passed on whole: `Some(copy)`, or `None` when it was
/// larger than `cap` or cut short (a partial body says nothing reliably).
struct Tap<F: FnOnce(Option<&[u8]>)> {
    inner: Body,
    seen: Vec<u8>,
    cap: usize,
    too_big: bool,
    /// Taken when the copy is handed over.
    done: Option<F>,
}

impl<F: FnOnce(Option<&[u8]>)> Tap<F> {
    fn new(inner: Body, cap: usize, done: F) -> Tap<F> {
        Tap {
            inner,
            seen: Vec::new(),
            cap,
            too_big: false,
            done: Some(done),
        }
    }

    fn finished(&mut self) {
        if let Some(done) = self.done.take() {
            done((!self.too_big).then_some(&self.seen[..]));
        }
    }
}

impl<F: FnOnce(Option<&[u8]>)> Drop for Tap<F> {
    /// hyper stops polling once a body says it has ended (its `Content-Length` is met), so the
    /// clean end may never be polled (as `model_stream::Recorded` knows): a body dropped whole
    /// is handed over here. One dropped part-way is not.
    fn drop(&mut self) {
        if http_body::Body::is_end_stream(&self.inner) {
            self.finished();
        }
    }
}

impl<F: FnOnce(Option<&[u8]>) + Unpin> http_body::Body for Tap<F> {
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
                    if this.seen.len() + data.len() > this.cap {
                        this.too_big = true;
                        this.seen = Vec::new();
                    } else if !this.too_big {
                        this.seen.extend_from_slice(data);
                    }
                }
                if this.inner.is_end_stream() {
                    this.finished();
                }
            }
            Poll::Ready(None) => this.finished(),
            Poll::Ready(Some(Err(_))) => {
                this.too_big = true;
                this.finished();
            }
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

    /// Issue 31, item 1: only gh's exact query lets its answer be read; an alias (which makes
    /// GitHub's answer name any string), another field, variables or a fragment do not.
    #[test]
    fn only_ghs_exact_copilot_endpoints_query_is_trusted() {
        // What go-gh's encoder sends (a trailing newline included).
        assert!(is_gh_query(
            b"{\"query\":\"query CopilotEndpoints{viewer{copilotEndpoints{api}}}\"}\n"
        ));
        assert!(is_gh_query(
            br#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api}}}","variables":null,"operationName":"CopilotEndpoints"}"#
        ));
        for bad in [
            r#"{"query":"query{viewer{copilotEndpoints:status{api:message}}}"}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints:status{api:message}}}"}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api:login}}}"}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api} login}}"}"#,
            r#"{"query":"query { viewer { copilotEndpoints { api } } }"}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api}}}","variables":{"a":1}}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api}}}","extensions":{}}"#,
            r#"{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api}}}","operationName":"Other"}"#,
            r#"{"variables":null}"#,
            r#"["query CopilotEndpoints{viewer{copilotEndpoints{api}}}"]"#,
            "not json",
        ] {
            assert!(!is_gh_query(bad.as_bytes()), "{bad}");
        }
    }
}
