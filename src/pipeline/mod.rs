//! The request path. Every request a client sends through Weir passes these phases, in this
//! order; each policy lives in one module and is applied in one place:
//!
//! 1. **classify** ([`classify`]): CONNECT, a managed upstream and its route class, or
//!    anything else (passed through untouched, or tunnelled blind);
//! 2. **identity** ([`identity`]): the surface (by `User-Agent`) and the keyed credential hash;
//!    the credential's GitHub account, when known, decides which list/view answers it shares
//!    ([`crate::accounts`], resolved off the request path);
//! 3. **limits** ([`limits`]): header size first of all; the client rate limit for requests
//!    that would reach an upstream;
//!    3a. **provisional ids** ([`provisional`]): follow-up calls for a create Weir queued
//!    are answered from the queue, or sent on with the real id once it exists;
//! 4. **cache/coalesce** ([`cache`]) for `list`/`view`/`token`, smaller list pages served from
//!    a larger page 1 ([`page_subset`]); for `stream` GETs ([`stream`]) when the answer is a
//!    complete document ([`shape`]), else streamed through; duplicate suppression ([`create`]) for creates; in
//!    cache-only mode or offline, [`held`] instead: the cache alone, creates straight to the
//!    queue, nothing upstream (pass-through mode skips every phase after 1 and forwards
//!    untouched);
//!    4a. **policy** ([`policy`]): the fallback policy graph decides the `list`/`create`
//!    action for this repository, network and situation (lists from the cache only; creates
//!    queued, failed or offered to a local agent), named in `Weir-Policy`;
//! 5. **admission** (cooldown → breaker → bulkhead) and 6. **attempt and retry** (one retry
//!    layer, budget, fallback): [`crate::upstream`], shared with the queue's replays;
//! 7. **rescue** ([`rescue`]): a stale answer when the upstream failed; creates go to the
//!    durable queue;
//! 8. **response headers** ([`respond`]): `X-Request-Id`, `Cache-Status`, `Age`,
//!    problem+json.
//!
//! [`model`] is the `model` class's own path (completions naming a model): a per-model
//! breaker instead of the upstream's gate, and one attempt with the fallback model
//! (`[[model_fallback]]`) before the first byte reaches the client.
//!
//! [`forward`] streams what is not cached (true streams, other managed calls, unmanaged hosts);
//! [`tunnel`] and [`intercepted`] handle CONNECT (blind, or TLS-terminated for managed hosts).

mod announce;
mod cache;
mod classify;
mod create;
mod forward;
mod headers;
mod held;
mod identity;
mod intercepted;
mod limits;
mod model;
mod model_body;
mod model_stream;
mod page_subset;
pub(crate) mod policy;
mod private_target;
mod provisional;
mod rescue;
mod respond;
mod shape;
mod state;
mod stream;
mod token_age;
mod tunnel;

pub(crate) use classify::is_for_weir;
pub(crate) use headers::request_id;
pub(crate) use limits::header_size;
pub(crate) use respond::finish;
pub(crate) use state::{host_for, is_own_host_name, Proxy, ProxyParts};
pub(crate) use token_age::decoded_body;

use crate::body::Body;
use crate::config::RouteClass;
use crate::mode::{Behaviour, Hold};
use crate::problem::Problem;
use classify::Target;
use headers::REQUEST_ID;
use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The pipeline's entry point: never fails, every error becomes a problem response.
pub(crate) async fn handle(proxy: Arc<Proxy>, req: Request<Incoming>) -> Response<Body> {
    let rid = request_id(req.headers());
    let mut rule = None;
    let result = phases(&proxy, req, &rid, &mut rule).await;
    let mut res = finish(result, rid, &proxy.base_url, &proxy.global);
    // The rule that decided (a create's rescue may have said more, e.g. `local->queue`).
    if let Some(v) = rule {
        res.headers_mut().entry(policy::HEADER).or_insert(v);
    }
    res
}

async fn phases(
    proxy: &Arc<Proxy>,
    mut req: Request<Incoming>,
    rid: &HeaderValue,
    rule: &mut Option<HeaderValue>,
) -> Result<Response<Body>, Problem> {
    // One version of the settings for this request's own checks (a change lands on the next).
    let settings = proxy.settings();
    limits::header_size(&settings.limits, req.headers())?;
    let target = classify::target(proxy, &settings, &req);
    let surface = identity::surface_of(req.headers());
    proxy.global.surface(surface);
    let (up, class) = match target {
        Target::Connect => return tunnel::connect(proxy, req).await,
        Target::Unmanaged(port) => {
            proxy.global.passthrough_requests.fetch_add(1, Relaxed);
            if let (Some(a), Some(port)) = (req.uri().authority(), port) {
                let allow = settings.allow_private_targets;
                private_target::check_literal(allow, a.host(), port)?;
                if settings.upstream_proxy.is_some() {
                    private_target::check_before_proxy(allow, a.host(), port).await?;
                }
            }
            return forward::unmanaged(proxy, req).await;
        }
        Target::Managed(up, class) => (up, class),
    };
    proxy
        .upstreams
        .get(up)
        .counters
        .class(class)
        .client_requests
        .fetch_add(1, Relaxed);
    let hold = match proxy.modes.behaviour() {
        Behaviour::PassThrough => return forward::untouched(proxy, req).await,
        Behaviour::Hold(h) => Some(h),
        Behaviour::Normal => None,
    };
    req.headers_mut().insert(REQUEST_ID, rid.clone());
    let who = identity::caller(&proxy.identity_key, surface, req.headers());
    // A provisional job or session id of a create Weir queued: answered from the queue, or
    // (once sent) the real id in its place.
    let req = match provisional::follow(proxy, req, &who).await {
        provisional::Follow::Answer(r) => return Ok(r),
        provisional::Follow::Pass(req) => req,
    };
    if who.credentialed {
        // Off the request path: resolution (if needed) runs in the background.
        proxy
            .accounts
            .observe(&proxy.upstreams, up, who.identity, req.headers());
    }
    let decision = policy::decide(proxy, &settings, up, class, req.uri().path(), &who);
    *rule = decision.as_ref().and_then(policy::header);
    if class.is_cacheable() && req.method() == Method::GET {
        // The cache phase applies the rate limit itself: hits and joins are never limited.
        return match hold.or(policy::list_hold(decision.as_ref())) {
            Some(Hold::Policy) => held::cached(proxy, up, class, req, who, Hold::Policy)
                .await
                .map_err(|p| match &decision {
                    Some(d) => policy::explain(p, d),
                    None => p,
                }),
            Some(h) => held::cached(proxy, up, class, req, who, h).await,
            None => cache::serve(proxy, up, class, req, who).await,
        };
    }
    if class == RouteClass::Stream && req.method() == Method::GET {
        // Answers decide: documents are cached like `view`, streams pass (see `stream`).
        return match hold {
            Some(h) => held::cached(proxy, up, class, req, who, h).await,
            None => stream::serve(proxy, up, req, who).await,
        };
    }
    if let (RouteClass::Create, Some(d)) = (class, decision) {
        limits::client_rate(proxy, who)?;
        let plan = policy::CreatePlan::new(d);
        return create::serve(proxy, up, req, who, hold, plan).await;
    }
    if let Some(h) = hold {
        return Err(held::miss(proxy, up, class, h));
    }
    limits::client_rate(proxy, who)?;
    if class == RouteClass::Model {
        return model::serve(proxy, up, req, who.scope()).await;
    }
    forward::managed(proxy, up, class, req, who.scope()).await
}
