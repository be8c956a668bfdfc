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

use super::cache::{self, CacheHandles, Fetched};
use super::context::{Answer, Call, Ctx, Step};
use super::{forward, rescue, respond};
use crate::cache::Freshness;
use http::Request;
use hyper::body::Incoming;
use std::sync::Arc;

/// Keys whose last answer was a stream (bounded; forgotten after an hour of silence).
pub(crate) type Streamed = moka::sync::Cache<crate::cache::CacheKey, ()>;

pub(super) fn streamed() -> Streamed {
    moka::sync::Cache::builder()
        .max_capacity(10_000)
        .time_to_idle(std::time::Duration::from_secs(3600))
        .build()
}

/// A `stream` GET on a managed upstream.
pub(super) fn serve<'a>(h: CacheHandles<'a>, ctx: &'a Ctx, req: Request<Incoming>) -> Step<'a> {
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
    ctx: &Ctx,
    parts: http::request::Parts,
    key: crate::cache::CacheKey,
) -> Answer {
    let counters = h.upstreams.get(ctx.up).counters.class(ctx.class);
    match cache::exchange_once(h, ctx, &parts, key).await? {
        Fetched::Stream(resp) => {
            h.streamed.insert(key, ());
            Ok(forward::relay(resp))
        }
        Fetched::Kept(s) if s.is_success() => {
            let kept = h.cache.get(&key).is_some_and(|e| Arc::ptr_eq(&e, &s));
            let status = match kept {
                true => "weir; fwd=miss; stored",
                false => "weir; fwd=miss",
            };
            Ok(respond::cached(&s, status))
        }
        // Nothing cached to beat it with: the upstream's error as it came.
        Fetched::Kept(failed) => Ok(rescue::after_upstream_error(
            None,
            counters,
            &failed,
            "weir; fwd=miss",
        )),
    }
}
