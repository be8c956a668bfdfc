//! RFC 9457 problem details: every error Weir itself produces is `application/problem+json`
//! with a `type` URI that points at a page Weir serves (`/_weir/problems/<kind>`), explaining the
//! cause and what to do.

use crate::body::{full, Body};
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;
use std::time::Duration;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// A problem document. `kind` selects the explanation page and is also sent as an extension.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Extra response headers (e.g. `RateLimit`), not part of the JSON.
    #[serde(skip)]
    pub headers: Vec<(&'static str, String)>,
    /// For upstream failures: the request may have reached the upstream (see
    /// `FetchError::maybe_sent`). A create in that state is queued `in_doubt`.
    #[serde(skip)]
    pub maybe_sent: bool,
}

impl Problem {
    /// A problem of `kind` (see [`page`]) with a human `detail` saying what happened and what to do.
    pub fn new(status: StatusCode, kind: &str, detail: impl Into<String>) -> Problem {
        Problem {
            type_uri: format!("/_weir/problems/{kind}"),
            title: page(kind)
                .map(|p| p.title)
                .unwrap_or("Weir error")
                .to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            kind: kind.to_string(),
            upstream: None,
            retry_after_s: None,
            breaker: None,
            request_id: None,
            headers: Vec::new(),
            maybe_sent: false,
        }
    }

    pub fn upstream(mut self, name: &str) -> Problem {
        self.upstream = Some(name.to_string());
        self
    }

    pub fn retry_after(mut self, d: Duration) -> Problem {
        // Round up: telling a client "0" would invite it straight back.
        self.retry_after_s = Some(d.as_secs() + u64::from(d.subsec_nanos() > 0));
        self
    }

    pub fn breaker(mut self, state: &str) -> Problem {
        self.breaker = Some(state.to_string());
        self
    }

    /// Makes `type` absolute against Weir's own base URL (`http://127.0.0.1:PORT`).
    pub fn with_base(mut self, base: &str) -> Problem {
        if self.type_uri.starts_with('/') {
            self.type_uri = format!("{base}{}", self.type_uri);
        }
        self
    }

    pub fn into_response(mut self, request_id: Option<&str>) -> Response<Body> {
        if let Some(id) = request_id {
            self.request_id = Some(id.to_string());
        }
        let json = serde_json::to_vec_pretty(&self).unwrap_or_else(|_| b"{}".to_vec());
        let mut resp = Response::new(full(json));
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(s) = self.retry_after_s {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        for (name, value) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(*name, v);
            }
        }
        resp
    }
}

/// The explanation page of a problem kind.
pub struct Page {
    pub kind: &'static str,
    pub title: &'static str,
    pub cause: &'static str,
    pub fix: &'static str,
}

const PAGES: &[Page] = &[
    Page { kind: "header_too_large", title: "Request headers too large", cause: "The request's header section is larger than Weir accepts (limits.max_header_bytes).", fix: "Send fewer or smaller headers (large cookies are the usual cause), or raise limits.max_header_bytes in Weir's config." },
    Page { kind: "body_too_large", title: "Request body too large", cause: "The request body is larger than Weir buffers (limits.max_body_bytes).", fix: "Send a smaller body, or raise limits.max_body_bytes in Weir's config." },
    Page { kind: "bad_request", title: "Bad request", cause: "Weir could not understand the request (for example a proxy request without a host, or a malformed URI).", fix: "Point the client at Weir as an HTTP proxy (HTTPS_PROXY/HTTP_PROXY=http://127.0.0.1:9347) rather than as a server, and check the URL." },
    Page { kind: "forbidden_host", title: "Control API refused: foreign Host", cause: "Weir's control API only answers requests whose Host is one of its own loopback names. A web page using DNS rebinding sends a foreign Host, so it gets nothing.", fix: "Use http://127.0.0.1:PORT/_weir/ or http://localhost:PORT/_weir/ directly." },
    Page { kind: "forbidden_origin", title: "Control API refused: foreign Origin", cause: "A request from another web origin tried to use Weir's control API.", fix: "Open the dashboard from Weir's own address; other sites cannot drive Weir." },
    Page { kind: "unauthorized", title: "Control secret required", cause: "Calls that change Weir's state need the per-install control secret in the X-Weir-Secret header.", fix: "Use the `weir` CLI or the tray, or open the dashboard link printed by `weir serve` (it carries the secret)." },
    Page { kind: "not_found", title: "Not found", cause: "There is nothing at this path on Weir's control API.", fix: "See http://127.0.0.1:PORT/_weir/ for the dashboard and /_weir/api/status for status." },
    Page { kind: "connection", title: "Upstream unreachable", cause: "Weir could not connect to the upstream (connection refused or reset, or its name did not resolve).", fix: "Check your network and GitHub Status; Weir serves cached answers where it has them and queues creates." },
    Page { kind: "timeout", title: "Upstream timed out", cause: "The upstream did not answer in time (connecting, sending headers, or sending the body).", fix: "Usually a GitHub slowdown: wait and retry later; Weir already retried within its budget." },
    Page { kind: "server_error", title: "Upstream server error", cause: "The upstream answered 500, 502 or 504.", fix: "Usually a GitHub incident: check GitHub Status. Weir retried within its budget." },
    Page { kind: "overloaded", title: "Upstream overloaded", cause: "The upstream answered 503 or 529, or Weir's concurrency limit for it was full and the request was shed.", fix: "Wait for the Retry-After time and try again." },
    Page { kind: "rate_limited", title: "Rate limited", cause: "Either the upstream rate-limited this install (Weir then holds back every surface until the limit resets), or this client exceeded Weir's own per-client limit.", fix: "Wait for the Retry-After time. Reduce polling in the client if it happens often." },
    Page { kind: "breaker_open", title: "Upstream circuit breaker open", cause: "Too many recent calls to this upstream failed or were slow, so Weir stopped sending it calls for a while to let it recover.", fix: "Wait for the Retry-After time. Cached answers are still served; creates are queued." },
    Page { kind: "upstream_protocol", title: "Bad upstream response", cause: "The upstream's response could not be read or was too large to share between waiting clients.", fix: "Retry; if it persists, report it with the request id." },
    Page { kind: "auth", title: "Upstream refused the credentials", cause: "The upstream answered 401 or 403.", fix: "Sign in again (gh auth login / VS Code) and check the token's scopes." },
    Page { kind: "policy_blocked", title: "Blocked by organisation policy", cause: "GitHub refused the call because of an organisation or enterprise policy.", fix: "Ask an organisation owner to enable Copilot coding agent for this repository." },
    Page { kind: "fatal", title: "Upstream rejected the request", cause: "The upstream answered with a client error that retrying cannot fix.", fix: "Fix the request; see the upstream's message." },
    Page { kind: "too_many_connections", title: "Too many connections", cause: "Weir is at its limit of concurrent client connections (limits.max_connections).", fix: "Close idle clients or raise limits.max_connections." },
    Page { kind: "paused", title: "Weir is paused", cause: "Weir passes everything through untouched while paused.", fix: "Resume from the tray or dashboard." },
    Page { kind: "queue_unavailable", title: "Create could not be queued", cause: "The upstream could not take the create and Weir could not store it durably (database or keychain problem).", fix: "See the detail for the exact cause; nothing that was already queued is lost." },
    Page { kind: "internal", title: "Internal error", cause: "Weir hit an unexpected condition.", fix: "Retry; if it persists, report it with the request id and Weir's log." },
];

pub fn page(kind: &str) -> Option<&'static Page> {
    PAGES.iter().find(|p| p.kind == kind)
}

pub fn pages() -> &'static [Page] {
    PAGES
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn renders_problem_json() {
        let p = Problem::new(StatusCode::SERVICE_UNAVAILABLE, "breaker_open", "open")
            .upstream("copilot-api")
            .retry_after(Duration::from_millis(1500))
            .with_base("http://127.0.0.1:9347");
        let r = p.into_response(Some("rid-1"));
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let b = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v["type"],
            "http://127.0.0.1:9347/_weir/problems/breaker_open"
        );
        assert_eq!(v["kind"], "breaker_open");
        assert_eq!(v["retry_after_s"], 2);
        assert_eq!(v["request_id"], "rid-1");
        assert_eq!(v["title"], "Upstream circuit breaker open");
    }

    #[test]
    fn every_page_has_text() {
        for p in pages() {
            assert!(!p.cause.is_empty() && !p.fix.is_empty(), "{}", p.kind);
        }
    }
}
