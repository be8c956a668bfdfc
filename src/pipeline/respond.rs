//! Phase 8, response headers: every answer gets `X-Request-Id`; cached answers get `Age` and
//! `Cache-Status` (RFC 9211); Weir's own errors become problem+json with an absolute `type`.

use super::headers::{CACHE_STATUS, REQUEST_ID};
use crate::body::Body;
use crate::cache::Stored;
use crate::problem::Problem;
use crate::stats::GlobalCounters;
use http::{header, HeaderValue, Response};
use std::sync::atomic::Ordering::Relaxed;
use tokio::time::Instant;

/// The final response: the phase's answer, or its problem rendered; plus the request id.
pub(crate) fn finish(
    result: Result<Response<Body>, Problem>,
    rid: HeaderValue,
    base_url: &str,
    global: &GlobalCounters,
) -> Response<Body> {
    let mut resp = match result {
        Ok(r) => r,
        Err(p) => {
            global.rejected.fetch_add(1, Relaxed);
            p.with_base(base_url).into_response(rid.to_str().ok())
        }
    };
    resp.headers_mut().insert(REQUEST_ID, rid);
    resp
}

/// A stored answer with its age and how the cache produced it.
pub(super) fn cached(entry: &Stored, cache_status: &str) -> Response<Body> {
    let mut resp = entry.to_response();
    let h = resp.headers_mut();
    h.insert(
        header::AGE,
        HeaderValue::from(entry.age(Instant::now()).as_secs()),
    );
    if let Ok(v) = HeaderValue::from_str(cache_status) {
        h.insert(CACHE_STATUS, v);
    }
    resp
}
