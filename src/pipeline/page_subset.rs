//! One list, many shapes: surfaces ask for the same session list with different `page_size`s
//! (20, 50, 100). Page 1 of a smaller size is the first N sessions of page 1 of a larger one,
//! so once a larger page 1 with the known shape (`sessions` array + `has_next_page`) has been
//! fetched for a family (same upstream, path, other parameters, key headers and sharing
//! identity), smaller requests of that family are served from it: their `sessions` cut to N
//! and `has_next_page` recomputed. Anything else (another `page`, another shape, no
//! `page_size`) keeps its own key.
//!
//! The family remembers the largest page size asked for (announced when asked, so smaller
//! sizes asked at the same moment join its fetch); a smaller request is answered through that
//! size's key (fresh hit, stale-while-revalidate or one coalesced fetch), so all sizes of a
//! family become one upstream stream. A family whose answer turns out not to have the known
//! shape is marked and left alone.

use super::identity::Caller;
use crate::body::{full, Body};
use crate::cache::CacheKey;
use crate::identity::Identity;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Response, Uri};
use http_body_util::BodyExt;
use std::time::Duration;

/// The largest page size taken part in (anything larger is its own key).
const MAX_PAGE_SIZE: u32 = 1000;

/// What is known of a family of list requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// The largest page size asked for.
    Largest(u32),
    /// Its answers are not of the known shape: every size keeps its own key.
    Unshaped,
}

/// Family → what is known of it. Bounded; forgotten after a while so a family that stops
/// asking for the large size is learnt again.
pub(crate) type Families = moka::sync::Cache<CacheKey, Family>;

pub(super) fn families() -> Families {
    moka::sync::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(Duration::from_secs(600))
        .build()
}

/// A page-1 list request with a `page_size`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Page {
    pub size: u32,
    /// Path and every other parameter: the family's part of the key.
    rest: String,
}

impl Page {
    pub fn of(uri: &Uri) -> Option<Page> {
        let query = uri.query()?;
        let mut size = None;
        let mut rest = Vec::new();
        for p in query.split('&').filter(|p| !p.is_empty()) {
            match p.split_once('=') {
                Some(("page_size", v)) => {
                    if size.is_some() {
                        return None;
                    }
                    size = Some(
                        v.parse::<u32>()
                            .ok()
                            .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))?,
                    );
                }
                // Page 1 only: a later page of a smaller size is not a prefix of anything.
                Some(("page", "1")) => {}
                Some(("page", _)) => return None,
                _ => rest.push(p),
            }
        }
        rest.sort_unstable();
        Some(Page {
            size: size?,
            rest: format!("{}?{}", uri.path(), rest.join("&")),
        })
    }

    pub fn family(
        &self,
        up: usize,
        identity: &Identity,
        headers: &HeaderMap,
        key_headers: &[HeaderName],
    ) -> CacheKey {
        CacheKey::new(up, &Method::GET, &self.rest, identity, headers, key_headers)
            .derive(b"page-size family")
    }
}

/// `uri` asking for `size` per page instead.
pub(super) fn with_size(uri: &Uri, size: u32) -> Option<Uri> {
    let query: Vec<String> = uri
        .query()?
        .split('&')
        .map(|p| match p.split_once('=') {
            Some(("page_size", _)) => format!("page_size={size}"),
            _ => p.to_string(),
        })
        .collect();
    format!("{}?{}", uri.path(), query.join("&")).parse().ok()
}

/// Whether a list answer has the shape Weir knows how to cut.
pub(super) fn has_known_shape(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v.get("sessions").is_some_and(|s| s.is_array())
            && v.get("has_next_page").is_some_and(|h| h.is_boolean())
    })
}

/// The first `n` sessions of a larger page 1, with `has_next_page` recomputed: true when the
/// larger page had more than `n`, else what it said.
pub(super) fn cut(body: &[u8], n: u32) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object_mut()?;
    let had_next = o.get("has_next_page")?.as_bool()?;
    let sessions = o.get_mut("sessions")?.as_array_mut()?;
    let more = sessions.len() > n as usize;
    sessions.truncate(n as usize);
    o.insert("has_next_page".into(), (more || had_next).into());
    serde_json::to_vec(&v).ok()
}

/// Turns the larger page's answer into the smaller one's; `None` when it cannot be (not a
/// success, or not the known shape): the caller then serves the request under its own key.
pub(super) async fn narrow(resp: Response<Body>, n: u32, from: u32) -> Option<Response<Body>> {
    if !resp.status().is_success() {
        return None;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = body.collect().await.ok()?.to_bytes();
    let cut = cut(&bytes, n)?;
    // Validators name the larger page, not this one.
    for h in [header::ETAG, header::CONTENT_LENGTH, header::LAST_MODIFIED] {
        parts.headers.remove(h);
    }
    if let Some(cs) = parts
        .headers
        .get(super::headers::CACHE_STATUS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| HeaderValue::from_str(&format!("{v}; subset-of={from}")).ok())
    {
        parts.headers.insert(super::headers::CACHE_STATUS, cs);
    }
    Some(Response::from_parts(parts, full(cut)))
}

/// The identity a request's list/view answers are keyed by (see `crate::accounts`): shared
/// for credentials of one account with the same access, else the credential's own. Token
/// answers and anonymous requests always keep their own.
pub(super) fn keyed_identity(
    accounts: &crate::accounts::Accounts,
    class: crate::config::RouteClass,
    who: &Caller,
) -> Identity {
    if class == crate::config::RouteClass::Token || !who.credentialed {
        who.identity
    } else {
        accounts.sharing_identity(&who.identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(s: &str) -> Option<Page> {
        Page::of(&s.parse().unwrap())
    }

    #[test]
    fn sizes_of_one_list_are_one_family_and_others_are_not() {
        let a = page("/agents/sessions?page_size=20&sort=x").unwrap();
        let b = page("/agents/sessions?sort=x&page=1&page_size=100").unwrap();
        assert_eq!((a.size, b.size), (20, 100));
        assert_eq!(a.rest, b.rest);
        assert_ne!(
            a.rest,
            page("/agents/sessions?page_size=20&repo_nwo=o/r&sort=x")
                .unwrap()
                .rest
        );
        assert!(page("/agents/sessions?page_size=20&page=2").is_none());
        assert!(page("/agents/sessions?sort=x").is_none());
        assert!(page("/agents/sessions?page_size=0").is_none());
        assert!(page("/agents/sessions?page_size=20&page_size=50").is_none());
        let u = with_size(
            &"/agents/sessions?page_size=20&sort=x".parse().unwrap(),
            100,
        )
        .unwrap();
        assert_eq!(u, "/agents/sessions?page_size=100&sort=x");
    }

    #[test]
    fn a_cut_page_keeps_the_first_sessions_and_says_whether_more_follow() {
        let body = serde_json::json!({
            "sessions": (0..5).map(|i| serde_json::json!({"id": i})).collect::<Vec<_>>(),
            "has_next_page": false, "total": 5,
        })
        .to_string();
        assert!(has_known_shape(body.as_bytes()));
        let v: serde_json::Value =
            serde_json::from_slice(&cut(body.as_bytes(), 2).unwrap()).unwrap();
        assert_eq!(v["sessions"].as_array().unwrap().len(), 2);
        assert_eq!(v["sessions"][1]["id"], 1);
        assert_eq!(v["has_next_page"], true);
        assert_eq!(v["total"], 5);
        let v: serde_json::Value =
            serde_json::from_slice(&cut(body.as_bytes(), 5).unwrap()).unwrap();
        assert_eq!(v["has_next_page"], false);
        assert!(!has_known_shape(br#"{"sessions": [], "next": "x"}"#));
        assert!(cut(b"[1,2]", 1).is_none());
    }
}
