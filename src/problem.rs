//! RFC 9457 problem details: every error Weir itself produces is `application/problem+json`
//! with a `type` URI that points at a page Weir serves (`/_weir/problems/<kind>`), explaining the
//! cause and what to do.

use crate::body::{full, Body};
pub use crate::problem_kind::ProblemKind;
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
    pub kind: ProblemKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<weir_resilience::State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A create that failed here may still have been made upstream (its answer was lost, then
    /// Weir could not queue it for the lookup that would have told): `true`, and the detail
    /// says to check the session list before creating again. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub maybe_created: bool,
    /// Extra response headers (e.g. `RateLimit`), not part of the JSON.
    #[serde(skip)]
    pub headers: Vec<(&'static str, String)>,
    /// For upstream failures: the request may have reached the upstream (see
    /// `FetchError::maybe_sent`). A create in that state is queued `in_doubt`.
    #[serde(skip)]
    pub maybe_sent: bool,
}

/// What the detail of a [`Problem::maybe_created`] create adds.
pub const MAYBE_CREATED: &str = "; the upstream may have received this create before failing: check its session list before creating again";

impl Problem {
    /// A problem of `kind` (see [`ProblemKind::page`]) with a human `detail` saying what happened and what to do.
    pub fn new(status: StatusCode, kind: ProblemKind, detail: impl Into<String>) -> Problem {
        Problem {
            type_uri: format!("/_weir/problems/{kind}"),
            title: kind.page().title.to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            kind,
            upstream: None,
            retry_after_s: None,
            breaker: None,
            request_id: None,
            maybe_created: false,
            headers: Vec::new(),
            maybe_sent: false,
        }
    }

    /// Marks a failed create that the upstream may have received ([`Problem::maybe_created`]),
    /// and says so in the detail.
    pub fn maybe_created(mut self) -> Problem {
        if !self.maybe_created {
            self.maybe_created = true;
            self.detail.push_str(MAYBE_CREATED);
        }
        self
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

    pub fn breaker(mut self, state: weir_resilience::State) -> Problem {
        self.breaker = Some(state);
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn renders_problem_json() {
        let p = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::BreakerOpen,
            "open",
        )
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
        for k in ProblemKind::ALL {
            let p = k.page();
            assert!(!p.cause.is_empty() && !p.fix.is_empty(), "{k}");
            assert_eq!(ProblemKind::parse(k.as_str()), Some(k));
        }
    }
}
