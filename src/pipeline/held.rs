//! Phase 4 while Weir holds upstream calls: cache only (the user's choice) or offline
//! (automatic found every upstream unreachable). Nothing goes upstream from here, with one
//! exception:
//!
//! - `list`/`view` GETs get any entry the cache still holds: fresh as a plain hit, older ones
//!   as `Cache-Status: weir; hit; fwd=stale; detail=cache_only` (or `detail=offline`); no
//!   background refresh is started. No entry: 503 `cache_only_miss` / `offline_miss`.
//! - `token` GETs are served from the cache while the cached token is usable (until it
//!   expires, minus `token_margin`); with none usable the token is fetched as usual. A tool
//!   without a token cannot even ask for the cached lists, so that is the one upstream call
//!   these modes allow.
//! - creates are queued durably (202) without an attempt (see [`super::create`]); the replay
//!   worker holds them until the mode ends, then sends each once.
//! - `stream` GETs get a cached document the same way (a session's logs, when they were
//!   answered as one); a true stream is never cached, so it is a miss;
//! - everything else on a managed upstream (`other`, non-GET): 503, as a miss.
//!
//! A fallback policy rule `list = "cache"` ([`super::policy`]) answers one `list` request the
//! same way (`Hold::Policy`, `detail=policy`), with its own miss (`policy_cache_miss`).

use super::cache::CacheHandles;
use super::context::{Ctx, Step};
use super::record::Event;
use super::{cache, respond};
use crate::cache::Freshness;
use crate::config::RouteClass;
use crate::mode::{Hold, Modes};
use crate::problem::{Problem, ProblemKind};
use crate::upstream::Upstreams;
use http::{Request, StatusCode};
use hyper::body::Incoming;
use tokio::time::Instant;

/// A cacheable (or `stream`) GET while upstream calls are held.
pub(super) fn cached<'a>(
    h: CacheHandles<'a>,
    modes: &Modes,
    ctx: &'a Ctx<'_>,
    req: Request<Incoming>,
    hold: Hold,
) -> Step<'a> {
    let class = ctx.class;
    let (parts, body) = req.into_parts();
    let key = cache::key_for(h, ctx, &parts);
    let mut entry = h.cache.get(&key);
    if class == RouteClass::Token {
        entry = entry.map(|e| super::token_age::aged(e, Instant::now()));
    }
    let freshness = entry.as_ref().map(|e| e.freshness(Instant::now()));
    match (entry, freshness) {
        // A token past its usable life is no use to anyone: resolve it (below).
        (Some(_), Some(Freshness::Expired)) if class == RouteClass::Token => {}
        (Some(e), Some(Freshness::Fresh)) => {
            ctx.seen.saw(Event::FreshHit);
            return Step::Answered(Ok(respond::cached_static(
                &e,
                respond::FRESH_HIT,
                http::HeaderMap::new(),
                Instant::now(),
            )));
        }
        (Some(e), _) => {
            ctx.seen.saw(Event::StaleHit);
            let status = format!("weir; hit; fwd=stale; detail={}", hold.detail());
            return Step::Answered(Ok(respond::cached(&e, &status)));
        }
        (None, _) => {}
    }
    if class == RouteClass::Token {
        return cache::serve(h, ctx, Request::from_parts(parts, body));
    }
    Step::Answered(Err(miss(h.upstreams, modes, ctx, hold)))
}

/// The answer to a request these modes cannot serve without the upstream.
pub(super) fn miss(upstreams: &Upstreams, modes: &Modes, ctx: &Ctx<'_>, hold: Hold) -> Problem {
    let class = ctx.class;
    let name = &upstreams.get(ctx.up).settings.name;
    // A `stream` answer is cached when it is a document (see `super::stream`).
    let what = if class.is_cacheable() || class == RouteClass::Stream {
        format!(
            "Weir has no cached answer for this `{}` request to {name}",
            class.as_str()
        )
    } else {
        format!(
            "`{}` requests to {name} are never cached, so they cannot be answered",
            class.as_str()
        )
    };
    let p = match hold {
        Hold::CacheOnly => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::CacheOnlyMiss,
            format!("Weir is in cache-only mode and sends nothing upstream; {what}. Switch back with `weir mode automatic` (or the tray's or dashboard's mode switch)."),
        ),
        Hold::Offline => {
            let since = modes
                .status()
                .offline
                .map(|o| format!(" since {}", o.since))
                .unwrap_or_default();
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::OfflineMiss,
                format!("Weir is offline{since}: every managed upstream is unreachable at the network level; {what}. Check your network; Weir probes the upstreams and goes back online by itself."),
            )
            .retry_after(ctx.settings.offline.probe_base)
        }
        // The policy phase adds which rule (see `super::policy`).
        Hold::Policy => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::PolicyCacheMiss,
            format!("a fallback policy rule says lists come from the cache only now, and nothing is sent upstream for them; {what}."),
        ),
    };
    p.upstream(name)
}
