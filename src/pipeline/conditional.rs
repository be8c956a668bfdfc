//! Conditional requests (RFC 9110 §13). Weir's refresh of a stale copy carries that copy's
//! validators ([`with_validators`]), so an unchanged answer costs a `304` and no body (at
//! api.github.com a `304` does not count against the rate limit). And a client's own
//! `If-None-Match` / `If-Modified-Since` is answered `304` when the answer Weir would give it
//! (a cached copy or a shared refresh) carries a matching validator ([`Asked::answer`]).
//!
//! A client's conditional headers never reach a shared fetch (`super::cache` strips them), so
//! a `304` meant for one client is never stored as a body or handed to another.

use super::context::Answer;
use super::headers::CACHE_STATUS;
use super::record::{Event, Outcome};
use crate::cache::Stored;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use std::time::SystemTime;
use weir_resilience::http_date::parse_http_date;

/// `headers` with the validators of `copy`, a successful stored answer: `If-None-Match` with
/// its `ETag` and `If-Modified-Since` with its `Last-Modified`.
pub(super) fn with_validators(headers: &HeaderMap, copy: Option<&Stored>) -> HeaderMap {
    let mut out = headers.clone();
    let Some(copy) = copy.filter(|c| c.status == StatusCode::OK) else {
        return out;
    };
    if let Some(etag) = copy.headers.get(header::ETAG) {
        out.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = copy.headers.get(header::LAST_MODIFIED) {
        out.insert(header::IF_MODIFIED_SINCE, lm.clone());
    }
    out
}

/// A client's conditional GET: its `If-None-Match` list, or (only without one, RFC 9110
/// §13.1.3) its `If-Modified-Since` date.
pub(super) struct Asked {
    none_match: Vec<HeaderValue>,
    modified_since: Option<SystemTime>,
}

/// Header fields a `304` keeps of the `200` it stands for (RFC 9110 §15.4.5), plus Weir's
/// `Age` and `Cache-Status`.
const KEPT: [HeaderName; 9] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
    header::LAST_MODIFIED,
    header::AGE,
    CACHE_STATUS,
];

impl Asked {
    /// The request's conditions, or `None` for an unconditional request (the common case:
    /// two header lookups).
    ///
    /// The request path asks only when the front door's pass over the headers saw one of the
    /// two names (`super::headers::Glance::conditional`), so an unconditional request looks
    /// nothing up here.
    pub fn of(h: &HeaderMap) -> Option<Asked> {
        // No `If-None-Match`, so no list is gathered.
        if !h.contains_key(header::IF_NONE_MATCH) {
            let modified_since = h
                .get(header::IF_MODIFIED_SINCE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_http_date)?;
            return Some(Asked {
                none_match: Vec::new(),
                modified_since: Some(modified_since),
            });
        }
        let none_match: Vec<HeaderValue> =
            h.get_all(header::IF_NONE_MATCH).iter().cloned().collect();
        let modified_since = match none_match.is_empty() {
            true => h
                .get(header::IF_MODIFIED_SINCE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_http_date),
            false => None,
        };
        (!none_match.is_empty() || modified_since.is_some()).then_some(Asked {
            none_match,
            modified_since,
        })
    }

    /// Whether an answer with `headers` is the representation the client already has.
    fn current(&self, headers: &HeaderMap) -> bool {
        if !self.none_match.is_empty() {
            let Some(etag) = headers.get(header::ETAG).and_then(|v| v.to_str().ok()) else {
                return false;
            };
            let Some(ours) = opaque_tags(etag).next() else {
                return false;
            };
            return self
                .none_match
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|list| list.trim() == "*" || opaque_tags(list).any(|t| t == ours));
        }
        let last_modified = headers
            .get(header::LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date);
        matches!((last_modified, self.modified_since), (Some(lm), Some(since)) if lm <= since)
    }

    /// `answer` as this client gets it: a `304` when it is a `200` from Weir's copy (it has a
    /// `Cache-Status`) whose validator matches, else unchanged.
    pub fn answer(&self, answer: Answer, seen: &Outcome) -> Answer {
        let resp = answer?;
        if resp.status() != StatusCode::OK
            || !resp.headers().contains_key(CACHE_STATUS)
            || !self.current(resp.headers())
        {
            return Ok(resp);
        }
        seen.saw(Event::NotModified);
        let mut out = Response::new(crate::body::empty());
        *out.status_mut() = StatusCode::NOT_MODIFIED;
        for name in KEPT {
            for v in resp.headers().get_all(&name) {
                out.headers_mut().append(name.clone(), v.clone());
            }
        }
        Ok(out)
    }
}

/// The opaque tags of a list of entity-tags (`W/"a", "b"`), without their weakness
/// indicator: If-None-Match uses the weak comparison (RFC 9110 §8.8.3.2, §13.1.2). A tag may
/// hold a comma, so the list is read tag by tag; what is not a tag is skipped.
fn opaque_tags(list: &str) -> impl Iterator<Item = &str> {
    let mut rest = list;
    std::iter::from_fn(move || loop {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        if rest.is_empty() {
            return None;
        }
        let tag = rest.strip_prefix("W/").unwrap_or(rest);
        if let Some(quoted) = tag.strip_prefix('"') {
            if let Some(end) = quoted.find('"') {
                rest = &quoted[end + 1..];
                return Some(&quoted[..end]);
            }
        }
        match rest.find(',') {
            Some(i) => rest = &rest[i + 1..],
            None => rest = "",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(k: &'static str, v: &'static str) -> Asked {
        let mut h = HeaderMap::new();
        h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        Asked::of(&h).expect("conditional")
    }

    fn with(k: &'static str, v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        h
    }

    #[test]
    fn entity_tags_are_read_one_by_one_and_compared_weakly() {
        let tags: Vec<&str> = opaque_tags(r#"W/"a", "b,c" ,junk, "d""#).collect();
        assert_eq!(tags, ["a", "b,c", "d"]);
        let etag = with("etag", r#"W/"b,c""#);
        assert!(asked("if-none-match", r#""x", "b,c""#).current(&etag));
        assert!(asked("if-none-match", r#"W/"b,c""#).current(&with("etag", r#""b,c""#)));
        assert!(!asked("if-none-match", r#""b""#).current(&etag));
        assert!(asked("if-none-match", "*").current(&etag));
        // No validator on the answer: never current.
        assert!(!asked("if-none-match", "*").current(&HeaderMap::new()));
    }

    #[test]
    fn if_modified_since_counts_only_without_if_none_match() {
        let lm = with("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(asked("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT").current(&lm));
        assert!(!asked("if-modified-since", "Sat, 05 Nov 1994 08:49:37 GMT").current(&lm));
        assert!(Asked::of(&with("if-modified-since", "not a date")).is_none());
        assert!(Asked::of(&HeaderMap::new()).is_none());
        let mut both = with("if-none-match", r#""nope""#);
        both.insert(
            "if-modified-since",
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        let mut h = lm.clone();
        h.insert("etag", r#""yes""#.parse().unwrap());
        assert!(!Asked::of(&both).unwrap().current(&h));
    }
}
