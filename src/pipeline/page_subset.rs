//! One list, many page sizes: surfaces ask for the same session list with different
//! `page_size`s (VS Code 20, gh 50, a browser 100) and walk it with `page_number` (both
//! clients stop at a short page; neither reads `has_next_page`: cli/cli
//! `pkg/cmd/agent-task/capi/sessions.go` `ListLatestSessionsForViewer`, commit 10db3894;
//! microsoft/vscode-copilot-chat `src/platform/github/common/githubAPI.ts`
//! `makeGitHubAPIRequestWithPagination`, commit 31acd00a). Items `[(p−1)·s, p·s)` of a list are
//! a slice of page `P` of a larger size `M` whenever that range lies inside `[(P−1)·M, P·M)`, or
//! when page `P` came back short (the end of the list): then the slice is what the list holds
//! from there.
//!
//! A family is the list with everything but `page_size`/`page_number` fixed (same upstream,
//! path, filters and sort spelt canonically, key headers and sharing identity). It remembers the
//! largest page size asked for (announced when asked, so smaller sizes asked at the same moment
//! join its fetch). A smaller request whose range fits in one page of that size is answered
//! through that page's key (fresh hit, stale-while-revalidate or one coalesced fetch), so every
//! size becomes one upstream stream; a range that straddles two such pages is cut only from a
//! fresh cached page that was short, else it keeps its own key. The answer keeps the real shape:
//! `{"sessions": [...]}` with every other top-level field copied (`has_next_page`, when the page
//! had one, says whether the larger page holds more after the slice). A family whose answer has
//! no `sessions` array is marked and left alone.

use super::identity::Caller;
use crate::body::{full, Body};
use crate::cache::{canonical_params, CacheKey};
use crate::config::{UpstreamIndex, UpstreamSettings};
use crate::identity::Identity;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Response, Uri};
use http_body_util::BodyExt;
use std::time::Duration;

/// The largest page size taken part in (anything larger is its own key).
const MAX_PAGE_SIZE: u32 = 1000;
/// The furthest page taken part in (bounds the item arithmetic).
const MAX_PAGE_NUMBER: u32 = 100_000;

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

/// A list request with a `page_size` (and a `page_number`, 1 when absent).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Page {
    pub size: u32,
    pub number: u32,
    /// Path and every other parameter, canonically spelt and sorted: the family's part of the
    /// key.
    rest: String,
}

/// Where a request's items lie in a page of a larger size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Within {
    /// The larger page's number.
    pub number: u32,
    /// The first item of the request in that page.
    pub offset: usize,
    /// Whether the request's whole range lies inside that page (else it runs past its end,
    /// and only a short page can answer it).
    pub inside: bool,
}

impl Page {
    pub fn of(uri: &Uri) -> Option<Page> {
        let query = uri.query()?;
        let (mut size, mut number) = (None, None);
        let mut rest = Vec::new();
        for p in canonical_params(query) {
            let num = |v: &str, max: u32| v.parse::<u32>().ok().filter(|n| (1..=max).contains(n));
            match p.split_once('=') {
                Some(("page_size", v)) if size.is_none() => size = Some(num(v, MAX_PAGE_SIZE)?),
                Some(("page_number", v)) if number.is_none() => {
                    number = Some(num(v, MAX_PAGE_NUMBER)?)
                }
                // Twice, or another paging parameter whose meaning Weir does not know.
                Some(("page_size" | "page_number" | "page", _)) => return None,
                None if p == "page_size" || p == "page_number" || p == "page" => return None,
                _ => rest.push(p),
            }
        }
        rest.sort_unstable();
        Some(Page {
            size: size?,
            number: number.unwrap_or(1),
            rest: format!("{}?{}", uri.path(), rest.join("&")),
        })
    }

    /// The first item this page asks for.
    fn start(&self) -> u64 {
        u64::from(self.number - 1) * u64::from(self.size)
    }

    /// Where this request's items lie in the pages of size `m`.
    pub fn within(&self, m: u32) -> Within {
        let m64 = u64::from(m.max(1));
        let start = self.start();
        let end = start + u64::from(self.size);
        let number = start / m64 + 1;
        Within {
            number: u32::try_from(number).unwrap_or(u32::MAX),
            offset: (start - (number - 1) * m64) as usize,
            inside: end <= number * m64,
        }
    }

    pub fn family(
        &self,
        up: &UpstreamSettings,
        identity: &Identity,
        headers: &HeaderMap,
        key_headers: &[HeaderName],
    ) -> CacheKey {
        CacheKey::new(up, &Method::GET, &self.rest, identity, headers, key_headers)
            .derive(b"page-size family")
    }
}

/// `uri` asking for page `number` of `size` per page instead (every other parameter as sent).
/// Page 1 of a request that named no `page_number` names none either (the same key as the
/// larger request spelt that way).
pub(super) fn with_page(uri: &Uri, number: u32, size: u32) -> Option<Uri> {
    let named = uri
        .query()?
        .split('&')
        .any(|p| p.split_once('=').map_or(p, |(n, _)| n) == "page_number");
    let mut query: Vec<String> = uri
        .query()?
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| !matches!(p.split_once('=').map_or(*p, |(n, _)| n), "page_number"))
        .map(|p| match p.split_once('=') {
            Some(("page_size", _)) => format!("page_size={size}"),
            _ => p.to_string(),
        })
        .collect();
    if named || number != 1 {
        query.push(format!("page_number={number}"));
    }
    format!("{}?{}", uri.path(), query.join("&")).parse().ok()
}

/// Whether a list answer has the shape Weir knows how to cut: an object with a `sessions`
/// array (the real list answer, `{"sessions": [...]}`).
pub(super) fn has_known_shape(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("sessions").is_some_and(|s| s.is_array()))
}

/// How many sessions a page of the known shape holds.
pub(super) fn count(body: &[u8]) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(v.get("sessions")?.as_array()?.len())
}

/// `n` sessions from `offset` of a larger page, every other top-level field copied;
/// `has_next_page`, if the page had one, is true when the page holds more after the slice,
/// else what the page said.
pub(super) fn cut(body: &[u8], offset: usize, n: u32) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object_mut()?;
    let had_next = o.get("has_next_page").and_then(|h| h.as_bool());
    let sessions = o.get_mut("sessions")?.as_array_mut()?;
    let total = sessions.len();
    let from = offset.min(total);
    let to = from.saturating_add(n as usize).min(total);
    let more = to < total;
    *sessions = sessions.drain(from..to).collect();
    if let Some(had) = had_next {
        o.insert("has_next_page".into(), (more || had).into());
    }
    serde_json::to_vec(&v).ok()
}

/// Turns the larger page's answer into the request's; `None` when it cannot be (not a success,
/// not the known shape, or a range running past a page that was full): the caller then serves
/// the request under its own key.
pub(super) async fn narrow(
    resp: Response<Body>,
    at: Within,
    n: u32,
    from: u32,
) -> Option<Response<Body>> {
    if !resp.status().is_success() {
        return None;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = body.collect().await.ok()?.to_bytes();
    if !at.inside && count(&bytes)? >= from as usize {
        return None;
    }
    let cut = cut(&bytes, at.offset, n)?;
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

/// The answer to page `uri` when the cache holds it fresh (a straddling range may only be cut
/// from a page already in hand: asking for it would not spare the request's own call).
pub(super) fn fresh_page(
    h: super::cache::CacheHandles<'_>,
    settings: &crate::config::Settings,
    up: UpstreamIndex,
    keyed: &Identity,
    uri: &Uri,
    headers: &HeaderMap,
    seen: &super::record::Outcome,
) -> Option<Response<Body>> {
    let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let upstream = &h.upstreams.get(up).settings;
    let key = CacheKey::new(
        upstream,
        &Method::GET,
        pq,
        keyed,
        headers,
        &settings.key_headers,
    );
    let e = h.cache.get(&key)?;
    let now = tokio::time::Instant::now();
    if e.freshness(now) != crate::cache::Freshness::Fresh {
        return None;
    }
    seen.saw(super::record::Event::FreshHit);
    Some(super::respond::cached_static(
        &e,
        super::respond::FRESH_HIT,
        http::HeaderMap::new(),
        now,
    ))
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

    /// gh's list query as Go's `url.Values.Encode` writes it (sorted, `,` as `%2C`).
    const GH: &str = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";

    #[test]
    fn sizes_and_pages_of_one_list_are_one_family_and_others_are_not() {
        let a = page("/agents/sessions?page_size=20&sort=x").unwrap();
        let b = page("/agents/sessions?sort=x&page_number=3&page_size=100").unwrap();
        assert_eq!((a.size, a.number, b.size, b.number), (20, 1, 100, 3));
        assert_eq!(a.rest, b.rest);
        // The same sort spelt two ways is one family.
        let gh = page(GH).unwrap();
        let js = page("/agents/sessions?page_size=20&page_number=2&sort=last_updated_at,desc");
        assert_eq!(gh.rest, js.unwrap().rest);
        assert_ne!(
            a.rest,
            page("/agents/sessions?page_size=20&repo_nwo=o/r&sort=x")
                .unwrap()
                .rest
        );
        assert!(page("/agents/sessions?page_size=20&page=2").is_none());
        assert!(page("/agents/sessions?sort=x").is_none());
        assert!(page("/agents/sessions?page_size=0").is_none());
        assert!(page("/agents/sessions?page_size=20&page_number=0").is_none());
        assert!(page("/agents/sessions?page_size=20&page_size=50").is_none());
        assert!(page("/agents/sessions?page_size=20&page_number=1&page_number=2").is_none());
        let u = with_page(&GH.parse().unwrap(), 2, 100).unwrap();
        assert_eq!(
            u,
            "/agents/sessions?page_size=100&sort=last_updated_at%2Cdesc&page_number=2"
        );
        let u = with_page(
            &"/agents/sessions?page_size=20&sort=x".parse().unwrap(),
            1,
            100,
        );
        assert_eq!(u.unwrap(), "/agents/sessions?page_size=100&sort=x");
    }

    #[test]
    fn a_range_lies_inside_a_larger_page_or_runs_past_it() {
        let vs = |n: u32| page(&format!("/s?page_size=20&page_number={n}")).unwrap();
        // VS Code's pages 1 and 2 (items 0–39) lie in gh's page 1 (0–49); page 3 (40–59)
        // runs past it; page 4 (60–79) lies in gh's page 2 (50–99) from item 10.
        let w = |n: u32| vs(n).within(50);
        assert_eq!(
            w(1),
            Within {
                number: 1,
                offset: 0,
                inside: true
            }
        );
        assert_eq!(
            w(2),
            Within {
                number: 1,
                offset: 20,
                inside: true
            }
        );
        assert_eq!(
            w(3),
            Within {
                number: 1,
                offset: 40,
                inside: false
            }
        );
        assert_eq!(
            w(4),
            Within {
                number: 2,
                offset: 10,
                inside: true
            }
        );
        assert_eq!(
            vs(5).within(100),
            Within {
                number: 1,
                offset: 80,
                inside: true
            }
        );
        assert_eq!(
            vs(6).within(100),
            Within {
                number: 2,
                offset: 0,
                inside: true
            }
        );
    }

    #[test]
    fn a_cut_keeps_the_real_shape() {
        let body = serde_json::json!({
            "sessions": (0..5).map(|i| serde_json::json!({"id": i})).collect::<Vec<_>>(),
            "total": 5,
        })
        .to_string();
        assert!(has_known_shape(body.as_bytes()));
        let v: serde_json::Value =
            serde_json::from_slice(&cut(body.as_bytes(), 2, 2).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"sessions": [{"id": 2}, {"id": 3}], "total": 5})
        );
        // Past the end of a short page: what is left, then nothing.
        let v: serde_json::Value =
            serde_json::from_slice(&cut(body.as_bytes(), 4, 3).unwrap()).unwrap();
        assert_eq!(v["sessions"], serde_json::json!([{"id": 4}]));
        let v: serde_json::Value =
            serde_json::from_slice(&cut(body.as_bytes(), 9, 3).unwrap()).unwrap();
        assert_eq!(v["sessions"], serde_json::json!([]));
        // has_next_page, where a page has one, follows the slice.
        let paged = serde_json::json!({"sessions": [1, 2, 3], "has_next_page": false}).to_string();
        let v: serde_json::Value =
            serde_json::from_slice(&cut(paged.as_bytes(), 0, 2).unwrap()).unwrap();
        assert_eq!(v["has_next_page"], true);
        let v: serde_json::Value =
            serde_json::from_slice(&cut(paged.as_bytes(), 1, 2).unwrap()).unwrap();
        assert_eq!(v["has_next_page"], false);
        assert!(!has_known_shape(br#"{"items": []}"#));
        assert!(cut(b"[1,2]", 0, 1).is_none());
    }
}
