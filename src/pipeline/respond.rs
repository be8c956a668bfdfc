//! Phase 8, response headers: every answer gets `X-Request-Id`; cached answers get `Age` and
//! `Cache-Status` (RFC 9211); Weir's own errors become problem+json with an absolute `type`.

use super::headers::{CACHE_STATUS, REQUEST_ID};
use super::policy;
use crate::body::Body;
use crate::cache::Stored;
use crate::problem::Problem;
use http::{header, HeaderValue, Response};
use tokio::time::Instant;

/// The final response: the phase's answer, or its problem rendered; plus the front door's
/// headers ([`front_headers`]: the request id, and `rule` unless the answer names a policy).
pub(super) fn finish(
    result: Result<Response<Body>, Problem>,
    rid: HeaderValue,
    rule: Option<HeaderValue>,
    base_url: &str,
) -> Response<Body> {
    let mut resp = match result {
        Ok(r) => r,
        Err(p) => p.with_base(base_url).into_response(rid.to_str().ok()),
    };
    front_headers(resp.headers_mut(), rid, rule);
    resp
}

/// The front door's headers, in its order: the request id, then the policy that decided
/// (`rule`) unless the answer names one. [`finish`] and a finished fresh hit
/// ([`FreshHit::finished`]) both write them here.
pub(super) fn front_headers(h: &mut http::HeaderMap, rid: HeaderValue, rule: Option<HeaderValue>) {
    h.insert(REQUEST_ID, rid);
    if let Some(v) = rule {
        h.entry(policy::HEADER_NAME).or_insert(v);
    }
}

/// A stored answer with its age and how the cache produced it.
pub(super) fn cached(entry: &Stored, cache_status: &str) -> Response<Body> {
    with_status(entry, HeaderValue::from_str(cache_status).ok())
}

/// A fresh hit's `Cache-Status`, checked at compile time (not copied or checked per request).
pub(super) const FRESH_HIT: HeaderValue = HeaderValue::from_static("weir; hit");

/// [`cached`] with a fixed `Cache-Status` (a fresh hit's, [`FRESH_HIT`]), written into the
/// request's own header map `room` (emptied first: [`Stored::to_response_in`]), aged at `now`
/// (the instant its freshness was judged at).
pub(super) fn cached_static(
    entry: &Stored,
    cache_status: HeaderValue,
    room: http::HeaderMap,
    now: Instant,
) -> Response<Body> {
    let mut resp = entry.to_response_in(room);
    let h = resp.headers_mut();
    h.insert(header::AGE, age_value(entry.age(now).as_secs()));
    h.insert(CACHE_STATUS, cache_status);
    resp
}

/// A fresh hit, found before its answer is made: the entry, the request's own header map
/// (the answer's room, [`Stored::to_response_in`]) and the instant its freshness was judged at.
pub(super) struct FreshHit {
    pub entry: std::sync::Arc<Stored>,
    pub room: http::HeaderMap,
    pub now: Instant,
}

impl FreshHit {
    /// The answer ([`cached_static`] with [`FRESH_HIT`]), for what may still change it (a
    /// conditional request's `304`) and then the front door's headers.
    pub fn response(self) -> Response<Body> {
        cached_static(&self.entry, FRESH_HIT, self.room, self.now)
    }

    /// The whole answer, with the front door's headers too, for an answer that nothing
    /// changes any more: what [`finish`] makes of [`FreshHit::response`] (its
    /// [`front_headers`]: the request id `rid`; `rule`, the policy that decided, unless the
    /// stored answer names one). Made in place, the answer is not moved through `finish`
    /// and the door (~0.1k instructions of a cache hit in copies, callgrind).
    ///
    /// A thread that made this entry's answer under the same `rule` before copies it, with
    /// `Age` and the request id written again ([`super::hit_copy`]); otherwise it is made by
    /// the insertions and noted there.
    pub fn finished(self, rid: HeaderValue, rule: Option<HeaderValue>) -> Response<Body> {
        let age = age_value(self.entry.age(self.now).as_secs());
        let rid = match super::hit_copy::copy(&self.entry, rule.as_ref(), age, rid) {
            Ok(resp) => return resp,
            Err(rid) => rid,
        };
        let mut resp = cached_static(&self.entry, FRESH_HIT, self.room, self.now);
        let kept_rule = rule.clone();
        front_headers(resp.headers_mut(), rid, rule);
        super::hit_copy::keep(&self.entry, kept_rule.as_ref(), &resp);
        resp
    }
}

fn with_status(entry: &Stored, cache_status: Option<HeaderValue>) -> Response<Body> {
    let mut resp = entry.to_response();
    stamp(&mut resp, entry, cache_status);
    resp
}

/// `Age` and `Cache-Status` on a stored answer's copy.
fn stamp(resp: &mut Response<Body>, entry: &Stored, cache_status: Option<HeaderValue>) {
    let h = resp.headers_mut();
    h.insert(header::AGE, age_value(entry.age(Instant::now()).as_secs()));
    if let Some(v) = cache_status {
        h.insert(CACHE_STATUS, v);
    }
}

/// The `Age` Weir wrote on one of its copies, read back (whole seconds; `None`: none, as on a
/// fresh answer).
pub(super) fn age_of(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    headers
        .get(http::header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .map(std::time::Duration::from_secs)
}

/// `Age` in seconds: under 100 from static text (a hit is usually younger than its list TTL),
/// so no value is formatted or allocated; larger ages are formatted.
fn age_value(secs: u64) -> HeaderValue {
    const PAIRS: &str = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    match secs {
        0..=9 => HeaderValue::from_static(&PAIRS[2 * secs as usize + 1..2 * secs as usize + 2]),
        10..=99 => HeaderValue::from_static(&PAIRS[2 * secs as usize..2 * secs as usize + 2]),
        _ => HeaderValue::from(secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished fresh hit has the fields, in the order, with the values that `finish` gives
    /// the same hit's answer: the policy that decided when the stored answer names none, the
    /// stored one when it does.
    #[test]
    fn a_finished_hit_has_the_fields_finish_gives() {
        use std::time::Duration;
        for stored_policy in [false, true] {
            let now = Instant::now();
            let mut headers = http::HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if stored_policy {
                headers.insert(policy::HEADER_NAME, HeaderValue::from_static("stored"));
            }
            headers.insert(
                header::DATE,
                HeaderValue::from_static("Mon, 07 Dec 2026 04:00:00 GMT"),
            );
            let entry = std::sync::Arc::new(Stored {
                status: http::StatusCode::OK,
                headers,
                body: bytes::Bytes::from_static(b"[]"),
                stored_at: now - Duration::from_secs(3),
                fresh_until: now + Duration::from_secs(60),
                revalidate_until: now + Duration::from_secs(60),
                stale_if_error_until: now + Duration::from_secs(60),
            });
            let hit = || FreshHit {
                entry: entry.clone(),
                room: http::HeaderMap::new(),
                now,
            };
            let rid = HeaderValue::from_static("0123456789abcdef0123456789abcdef");
            for rule in [None, Some(HeaderValue::from_static("rule"))] {
                let fields = |r: &Response<Body>| {
                    r.headers()
                        .iter()
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .collect::<Vec<_>>()
                };
                let finished = hit().finished(rid.clone(), rule.clone());
                let through = finish(Ok(hit().response()), rid.clone(), rule.clone(), "http://w");
                assert_eq!(
                    fields(&finished),
                    fields(&through),
                    "{stored_policy} {rule:?}"
                );
                assert_eq!(finished.status(), through.status());
                let policy = finished.headers().get(policy::HEADER_NAME);
                let want = if stored_policy {
                    Some("stored")
                } else {
                    rule.as_ref().and_then(|v| v.to_str().ok())
                };
                assert_eq!(policy.and_then(|v| v.to_str().ok()), want);
            }
        }
    }

    #[test]
    fn ages_are_spelt_as_numbers() {
        for secs in [0u64, 1, 9, 10, 42, 99, 100, 3600, u64::MAX] {
            assert_eq!(age_value(secs), HeaderValue::from(secs), "{secs}");
        }
    }
}
