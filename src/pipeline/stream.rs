//! Phase 4 for `stream` GETs (a session's logs): each answer decides ([`super::shape`]). A
//! complete document is cached, coalesced and served stale on an upstream failure exactly like
//! a `view` answer, under the same identity keying ([`super::cache`]); a true stream is relayed
//! byte for byte to the one caller that asked, never buffered and never shared.
//!
//! `gh agent-task view --log --follow` asks for the whole log every 5 s and VS Code every 3 s
//! while a session runs; each answer repeats the one before and adds a little. Passed one for
//! one, those polls were most of a developer's upstream calls (see BENCHMARKS.md, devhour).
//!
//! A key with a cached document goes through the cache (its refreshes are shaped too); a key
//! with nothing cached, or whose last answer was a stream, asks once on its own: a stream
//! cannot wait in a flight for several callers. If a refresh finds that a document has become
//! a stream, the key is marked as streaming and its callers ask on their own from then on.
//!
//! Logs never shrink ([`never_shorter`], `crate::cache::Served`): whatever produced a log
//! document (a fresh or stale copy, a shared refresh, a hold, a rate-limited client's copy),
//! a caller never gets one shorter than the log it was already given.

use super::cache::{self, CacheHandles, Fetched};
use super::context::{Answer, Call, Ctx, Step};
use super::headers::CACHE_STATUS;
use super::record::{Event, Outcome};
use super::{forward, rescue, respond};
use crate::cache::{Cache, CacheKey, Freshness, Settled, Stored};
use crate::problem::{Problem, ProblemKind};
use crate::upstream::Upstreams;
use http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;
use tokio::time::Instant;

/// Keys whose last answer was a stream (bounded; forgotten after an hour of silence).
pub(crate) type Streamed = moka::sync::Cache<crate::cache::CacheKey, ()>;

pub(super) fn streamed() -> Streamed {
    moka::sync::Cache::builder()
        .max_capacity(10_000)
        .time_to_idle(std::time::Duration::from_secs(3600))
        .build()
}

/// A `stream` GET on a managed upstream.
pub(super) fn serve<'a>(h: CacheHandles<'a>, ctx: &'a Ctx<'_>, req: Request<Incoming>) -> Step<'a> {
    // A GET with a body is not a poll: it passes as it came.
    if !http_body::Body::is_end_stream(req.body()) {
        return Step::Upstream(Call::Forward(req));
    }
    let (parts, _empty) = req.into_parts();
    let key = cache::key_for(h, ctx, &parts);
    if !h.streamed.contains_key(&key) && cache::has_copy(h, ctx, &parts, &key) {
        // A refresh that finds a stream where the document was: ask again, on our own. A
        // wait for a flight that may end so is admitted like a fetch.
        let (stale, go) = match cache::serve_head(h, ctx, parts.clone()) {
            Step::Answered(Err(_)) if h.streamed.contains_key(&key) => (None, None),
            // Joining a flight (or waiting for a stale copy's refresh): a client over its
            // rate limit gets the copy it has.
            Step::Joins(go) => (
                h.cache
                    .get(&key)
                    .filter(|e| e.freshness(tokio::time::Instant::now()) != Freshness::Expired),
                Some(go),
            ),
            Step::Upstream(Call::Fetch { stale, go }) => (stale, Some(go)),
            other => return other,
        };
        return Step::Upstream(Call::Fetch {
            stale,
            go: Box::pin(async move {
                if let Some(go) = go {
                    match go.await {
                        Err(_) if h.streamed.contains_key(&key) => {}
                        answered => return answered,
                    }
                }
                once(h, ctx, parts, key).await
            }),
        });
    }
    Step::Upstream(Call::Fetch {
        stale: None,
        go: Box::pin(once(h, ctx, parts, key)),
    })
}

/// The one exchange of a `stream` GET with nothing usable in the cache.
async fn once(
    h: CacheHandles<'_>,
    ctx: &Ctx<'_>,
    parts: http::request::Parts,
    key: crate::cache::CacheKey,
) -> Answer {
    match cache::exchange_once(h, ctx, &parts, key).await? {
        Fetched::Stream(resp) => {
            h.streamed.insert(key, ());
            Ok(forward::relay(resp))
        }
        Fetched::Kept(s, _) if s.is_success() => {
            let kept = h.cache.get(&key).is_some_and(|e| Arc::ptr_eq(&e, &s));
            let status = match kept {
                true => "weir; fwd=miss; stored",
                false => "weir; fwd=miss",
            };
            Ok(respond::cached(&s, status))
        }
        // Nothing cached to beat it with: the upstream's error as it came.
        Fetched::Kept(failed, _) => Ok(rescue::after_upstream_error(
            None,
            ctx.seen,
            &failed,
            "weir; fwd=miss",
        )),
    }
}

/// The key a log follower's longest answer is remembered under: the request's cache key
/// under the credential's own identity, never its account's (which other credentials share,
/// and which a credential's answers move to once its account is known).
pub(super) fn follower(upstreams: &Upstreams, ctx: &Ctx<'_>, req: &Request<Incoming>) -> CacheKey {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    CacheKey::new(
        &upstreams.get(ctx.up).settings,
        &Method::GET,
        pq,
        &ctx.who.identity,
        req.headers(),
        &ctx.settings.key_headers,
    )
}

/// A log document's answer (a `200` Weir made from a copy: it has a `Cache-Status`) as the
/// follower under `key` gets it: the answer itself when it extends the log the follower was
/// given, else that longer log (`Cache-Status: weir; hit; detail=never-shorter`). A true
/// stream, an error or a problem passes as it is.
pub(super) async fn never_shorter(
    cache: &Cache,
    seen: &Outcome,
    key: CacheKey,
    answer: Answer,
) -> Answer {
    let resp = answer?;
    if resp.status() != StatusCode::OK || !resp.headers().contains_key(CACHE_STATUS) {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    // A copy's body is whole in memory: collecting it takes the one buffer, no copy.
    let body = body.collect().await.map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Internal,
            format!("a cached log could not be read: {e}"),
        )
    })?;
    let body = body.to_bytes();
    let age = super::respond::age_of(&parts.headers).unwrap_or_default();
    let now = Instant::now();
    let mut headers = parts.headers.clone();
    headers.remove(header::AGE);
    headers.remove(CACHE_STATUS);
    let candidate = Arc::new(Stored {
        status: parts.status,
        headers,
        body: body.clone(),
        stored_at: now.checked_sub(age).unwrap_or(now),
        fresh_until: now,
        revalidate_until: now,
        stale_if_error_until: now,
    });
    match cache.served().settle(key, candidate) {
        Settled::Candidate => Ok(http::Response::from_parts(parts, crate::body::full(body))),
        Settled::Longer(longer) => {
            seen.saw(Event::KeptLonger);
            Ok(respond::cached(&longer, "weir; hit; detail=never-shorter"))
        }
    }
}
