//! The request path. Every request a client sends through Weir passes these phases, in this
//! order; each policy lives in one module and is applied in one place:
//!
//! 0. **front door** ([`front`]): every listener's requests, proxied or for the control API:
//!    the request id and the header-size cap, under one settings version;
//! 1. **classify** ([`classify`]): CONNECT, a managed upstream and its route class, or
//!    anything else (passed through untouched, or tunnelled blind);
//! 2. **identity** ([`identity`]): the surface (by `User-Agent`) and the keyed credential hash;
//!    the credential's GitHub account, when known, decides which list/view answers it shares
//!    ([`crate::accounts`], resolved off the request path);
//!    2a. **provisional ids** ([`provisional`]): follow-up calls for a create Weir queued
//!    are answered from the queue, or sent on with the real id once it exists;
//!    2b. **policy** ([`policy`]): the fallback policy graph decides the `list`/`create`
//!    action for this repository, network and situation (lists from the cache only; creates
//!    queued, failed or offered to a local agent), named in `Weir-Policy`;
//! 3. **context** ([`context`]): built once — settings, upstream, class, caller, the mode's
//!    hold, the decision; the handlers below read only it;
//! 4. **class handler**, which returns a step, never calling the upstream itself:
//!    [`cache`] for `list`/`view`/`token` (smaller list pages from a larger page 1,
//!    [`page_subset`]); [`stream`] for `stream` GETs (a complete document is cached, a true
//!    stream passes, [`shape`]); [`held`] in cache-only mode, offline or under a `list =
//!    "cache"` rule (the cache alone); else the call: [`create`] (duplicate suppression),
//!    [`model`], or [`forward`]. Pass-through mode skips every phase after 1;
//! 5. **driver admission** (`admit_and_run`): the client rate limit (GCRA per surface and
//!    identity), applied here and nowhere else, only to steps that reach an upstream; a limited
//!    cache fetch gets its stale copy instead ([`limits`]);
//! 6. **upstream admission** (cooldown → breaker → bulkhead) and **attempt and retry** (one
//!    retry layer, budget, fallback): [`crate::upstream`], shared with the queue's replays;
//! 7. **rescue** ([`rescue`]): a stale answer when the upstream failed; creates go to the
//!    durable queue;
//! 8. **response headers** ([`respond`]): `X-Request-Id`, `Cache-Status`, `Age`,
//!    problem+json; before them, a log never shorter than the caller was given
//!    ([`stream::never_shorter`]), a client's own `GET /user` read for its account
//!    ([`user_answer`]), and a client's conditional GET answered `304` when its copy is current
//!    ([`conditional`]);
//! 9. **recording** ([`record`]): the phases note what happened on the request's outcome; its
//!    counters and its decision log are written from it in one place, once, when the request
//!    ends (answered, or dropped when the client went away), at the front door.
//!
//! [`model`] is the `model` class's own path (completions naming a model): a per-model
//! breaker instead of the upstream's gate, and one attempt with the fallback model
//! (`[[model_fallback]]`) before the first byte reaches the client.
//!
//! [`forward`] streams what is not cached (true streams, other managed calls, unmanaged hosts);
//! [`tunnel`] and [`intercepted`] handle CONNECT (blind, or TLS-terminated for managed hosts).
//!
//! **Handles.** The driver (`phases`, `step`, `admit_and_run`) holds the [`Proxy`]; each phase
//! gets only what it uses, so none can reach the queue, the hand-offs or the network by accident:
//! - [`classify`] (`target`), [`forward`], [`announce`]: the upstreams;
//! - [`provisional`]: the queue and the accounts;
//! - [`policy`]: `PolicyHandles` (upstreams, network, modes);
//! - [`record`]: the request's outcome, then the counters and the decision log;
//! - [`cache`], [`stream`], [`page_subset`]: `CacheHandles` (cache, coalescer, page families,
//!   streamed keys, upstreams, accounts); a detached fetch owns clones of them (`Flight`);
//! - [`held`]: `CacheHandles` and the modes (its miss: the upstreams and the modes);
//! - [`model`]: `ModelHandles` (upstreams, body budget, bus, `PolicyHandles`);
//! - [`limits`]: the client rate limiter;
//! - [`tunnel`]: `Tunnels` (settings, slots, upstreams, interceptor, connector, counters, bus);
//!   a CONNECT to intercept goes back to the driver, since [`intercepted`] re-enters the
//!   pipeline with the whole `Proxy`;
//! - [`create`]: `CreateHandles`, owned by its detached task (dedupe state, upstreams, queue,
//!   hand-offs, accounts, bus, body budget, base URL).
//!
//! **Future size.** A request's future is moved by value at each level it is awaited through
//! (the server's box, the router, the front door, the phases, the call), and each move copies
//! the whole state machine, whose size is that of its largest branch. So the paths that are
//! rare or carry kilobytes of state — CONNECT, unmanaged hosts, pass-through mode, `model`,
//! `create`, the upstream attempt and the control API — are boxed where they are awaited, and a
//! cache hit's future holds none of them (BENCHMARKS.md §2 has the sizes and the counts).

mod announce;
mod cache;
mod classify;
mod conditional;
mod context;
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
mod record;
mod rescue;
mod respond;
mod shape;
mod state;
mod stream;
mod task_events;
mod token_age;
mod tunnel;
mod user_answer;
mod waiting_tasks;

pub(crate) use classify::is_for_weir;
pub(crate) use headers::request_id;
pub(crate) use record::Outcome;
pub(crate) use state::{host_for, is_own_host_name, Proxy, ProxyParts};
pub(crate) use token_age::decoded_body;

use crate::body::Body;
use crate::config::{RouteClass, Settings};
use crate::mode::Behaviour;
use crate::problem::Problem;
use classify::Target;
use context::{Answer, Call, Ctx, Step};
use headers::REQUEST_ID;
use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use record::Recording;
use std::sync::Arc;

/// The pipeline's readers of upstream answers (a token answer's lifetimes and its aged copy,
/// an announced API host), run on `body` for the fuzz targets (`crate::fuzz_entry`).
#[cfg(feature = "fuzzing")]
pub(crate) fn read_answer_for_fuzz(headers: &http::HeaderMap, body: &[u8]) {
    let class = crate::config::ClassSettings::defaults(RouteClass::Token);
    let _ = cache::lifetimes(RouteClass::Token, &class, body);
    let _ = token_age::rewrite(headers, body, 1500);
    let _ = crate::upstream::announced_api_for_fuzz(body);
}

/// Every request's front door, whichever listener took it (the local proxy, the gateway's,
/// the admin listener, an intercepted TLS connection) and wherever it goes next (this
/// pipeline or the control API): the request id, the header-size cap — applied here and
/// nowhere else — then `next` under one settings version, the recording of what `seen`
/// says it did ([`record`]), and the response headers. Never fails: every error becomes a
/// problem response.
pub(crate) async fn front<F, Fut>(
    proxy: &Proxy,
    seen: &Outcome,
    req: Request<Incoming>,
    next: F,
) -> Response<Body>
where
    F: FnOnce(Request<Incoming>, HeaderValue, Arc<Settings>) -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    // Recorded once: when answered (below), or when the client goes away first.
    let recording = Recording::start(proxy, seen);
    let rid = request_id(req.headers());
    // Whether the client still had body bytes to send when the request arrived.
    let body_pending = !http_body::Body::is_end_stream(req.body());
    // One version of the settings for this request's own checks (a change lands on the next).
    let settings = proxy.settings();
    let result = match limits::header_size(&settings.limits, req.headers()) {
        Ok(()) => next(req, rid.clone(), settings).await,
        Err(p) => Err(p),
    };
    let refused = result.is_err();
    recording.end(refused);
    let mut resp = respond::finish(result, rid, &proxy.base_url);
    // Weir's own problem for a request with a body usually leaves the body unread (breaker
    // open, cooldown, client rate): hyper then closes an HTTP/1 connection unless the rest was
    // already in its buffer. The answer says so (`Connection: close`, `server::fit_to_connection`)
    // so a client never sends its next request on a socket about to close.
    if refused && body_pending {
        resp.extensions_mut().insert(crate::server::CloseAfter);
    }
    resp
}

/// The final response for an answer made outside the [`front`] door (the gateway's own
/// refusals and problem pages): recorded ([`record`]: a problem counts as refused) and given
/// its request id.
#[cfg(feature = "gateway")]
pub(crate) fn finish(proxy: &Proxy, result: Answer, rid: HeaderValue) -> Response<Body> {
    Recording::start(proxy, &Outcome::default()).end(result.is_err());
    respond::finish(result, rid, &proxy.base_url)
}

/// The pipeline's entry point, through the [`front`] door.
pub(crate) async fn handle(proxy: Arc<Proxy>, req: Request<Incoming>) -> Response<Body> {
    let mut rule = None;
    let seen = Outcome::default();
    let (p, s) = (&proxy, &seen);
    let r = &mut rule;
    let mut res = front(p, s, req, |req, rid, settings| {
        phases(p, req, rid, settings, s, r)
    })
    .await;
    // The rule that decided (a create's rescue may have said more, e.g. `local->queue`).
    if let Some(v) = rule {
        res.headers_mut().entry(policy::HEADER).or_insert(v);
    }
    res
}

async fn phases(
    proxy: &Arc<Proxy>,
    mut req: Request<Incoming>,
    rid: HeaderValue,
    settings: Arc<Settings>,
    seen: &Outcome,
    rule: &mut Option<HeaderValue>,
) -> Result<Response<Body>, Problem> {
    let target = classify::target(&proxy.upstreams, &settings, &req);
    let surface = identity::surface_of(req.headers());
    seen.surface(surface);
    let (up, route) = match target {
        Target::Connect => return Box::pin(connect(proxy, &settings, req)).await,
        Target::Unmanaged(port) => {
            seen.unmanaged();
            if let (Some(a), Some(port)) = (req.uri().authority(), port) {
                let allow = settings.allow_private_targets;
                private_target::check_literal(allow, a.host(), port)?;
                if settings.upstream_proxy.is_some() {
                    Box::pin(private_target::check_before_proxy(allow, a.host(), port)).await?;
                }
            }
            return Box::pin(forward::unmanaged(&proxy.upstreams, req)).await;
        }
        Target::Managed(up, route) => (up, route),
    };
    let class = route.class;
    seen.managed(up, class);
    let hold = match proxy.modes.behaviour() {
        Behaviour::PassThrough => return Box::pin(forward::untouched(&proxy.upstreams, req)).await,
        Behaviour::Hold(h) => Some(h),
        Behaviour::Normal => None,
    };
    req.headers_mut().insert(REQUEST_ID, rid);
    let who = identity::caller(&proxy.identity_key, surface, req.headers());
    // A provisional job or session id of a create Weir queued: answered from the queue, or
    // (once sent) the real id in its place. Rare, so boxed, and only a request that could
    // name one gets that far: the future is neither made nor moved for the others.
    let req = match provisional::may_follow(&proxy.queue, &req) {
        false => req,
        true => match Box::pin(provisional::follow(
            &proxy.queue,
            &proxy.accounts,
            req,
            &who,
        ))
        .await
        {
            provisional::Follow::Answer(r) => return Ok(r),
            provisional::Follow::Pass(req) => req,
        },
    };
    // Off the request path: resolution (if needed) runs in the background; a client's own
    // `GET /user` is read instead (`user_answer`).
    let user_call = who
        .credentialed
        .then(|| {
            proxy
                .accounts
                .observe(&proxy.upstreams, up, who.identity, &req)
        })
        .flatten();
    let decision = policy::decide(
        policy_handles(proxy),
        &settings,
        up,
        class,
        req.uri().path(),
        &who,
        seen,
    );
    *rule = decision.as_ref().and_then(policy::header);
    let ctx = Ctx {
        settings,
        up,
        class,
        family: route.family,
        who,
        hold,
        decision,
        seen,
    };
    let after = After::of(proxy, &ctx, &req, user_call);
    // A Task API list (minutes apart) is told the creates that wait in the queue.
    let waiting = match (ctx.family, ctx.class) {
        // Boxed: its queue read's future stays out of every request's.
        (crate::config::Family::Tasks, RouteClass::List) => {
            Box::pin(waiting_tasks::of(
                &proxy.queue,
                &proxy.accounts,
                req.method(),
                req.uri(),
                &ctx.who,
            ))
            .await
        }
        _ => Vec::new(),
    };
    let answer = match step(proxy, &ctx, req) {
        // A hit: no admission, and the driver's future is not made. (Boxing a call's instead
        // shrank every level's copy of a hit's future by ~0.1k instructions and cost a
        // pass-through request ~0.4k: callgrind.)
        Step::Answered(answer) => answer,
        step => admit_and_run(proxy, &ctx, step).await,
    };
    let answer = match waiting.is_empty() {
        true => answer,
        false => Box::pin(waiting_tasks::listed(answer, waiting)).await,
    };
    let answer = after.apply(proxy, &ctx, answer).await;
    match &ctx.decision {
        // A miss under `list = "cache"` names the rule (`explain` touches no other problem).
        Some(d) => answer.map_err(|p| policy::explain(p, d)),
        None => answer,
    }
}

/// What a cacheable or `stream` GET's answer still goes through: a log follower never gets a
/// shorter log ([`stream::never_shorter`]), and a client's own conditional request gets `304`
/// when its copy is current ([`conditional`]).
struct After {
    follower: Option<crate::cache::CacheKey>,
    asked: Option<conditional::Asked>,
    /// A client's own `GET /user`: its answer names the credential's account.
    user: Option<crate::accounts::UserCall>,
}

impl After {
    fn of(
        proxy: &Proxy,
        ctx: &Ctx<'_>,
        req: &Request<Incoming>,
        user: Option<crate::accounts::UserCall>,
    ) -> After {
        let cached = req.method() == Method::GET
            && (ctx.class.is_cacheable() || ctx.class == RouteClass::Stream);
        After {
            follower: (cached && ctx.class == RouteClass::Stream)
                .then(|| stream::follower(&proxy.upstreams, ctx, req)),
            asked: cached
                .then(|| conditional::Asked::of(req.headers()))
                .flatten(),
            user,
        }
    }

    async fn apply(self, proxy: &Proxy, ctx: &Ctx<'_>, answer: Answer) -> Answer {
        let answer = match self.follower {
            // Boxed: a log's answer is rare, and its future stays out of every request's.
            Some(key) => Box::pin(stream::never_shorter(&proxy.cache, ctx.seen, key, answer)).await,
            None => answer,
        };
        let answer = match self.user {
            Some(call) => Box::pin(user_answer::learn(&proxy.accounts, call, answer)).await,
            None => answer,
        };
        match self.asked {
            Some(asked) => asked.answer(answer, ctx.seen),
            None => answer,
        }
    }
}

/// A CONNECT: a blind tunnel ([`tunnel`]), or one for a managed https host whose decrypted
/// requests come back through this pipeline ([`intercepted`]).
async fn connect(
    proxy: &Arc<Proxy>,
    settings: &Settings,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let t = tunnel::Tunnels {
        settings,
        slots: &proxy.tunnel_slots,
        upstreams: &proxy.upstreams,
        intercept: proxy.intercept.as_ref(),
        connector: &proxy.tunnel_connector,
        global: &proxy.global,
        bus: &proxy.bus,
    };
    Ok(match tunnel::connect(t, req).await? {
        tunnel::Opened::Answered(resp) => resp,
        tunnel::Opened::Intercept {
            interceptor,
            req,
            authority,
            slot,
        } => intercepted::accept(proxy, interceptor, req, authority, slot),
    })
}

fn policy_handles(proxy: &Proxy) -> policy::PolicyHandles<'_> {
    policy::PolicyHandles {
        upstreams: &proxy.upstreams,
        network: &proxy.network,
        modes: &proxy.modes,
    }
}

/// The class handler for a managed request: what it can answer itself, or the call it needs.
fn step<'a>(proxy: &'a Arc<Proxy>, ctx: &'a Ctx<'_>, req: Request<Incoming>) -> Step<'a> {
    let (class, hold) = (ctx.class, ctx.hold);
    let h = cache::CacheHandles {
        cache: &proxy.cache,
        coalescer: &proxy.coalescer,
        page_families: &proxy.page_families,
        streamed: &proxy.streamed,
        upstreams: &proxy.upstreams,
        accounts: &proxy.accounts,
        task_groups: &proxy.task_groups,
    };
    let get = req.method() == Method::GET;
    if class.is_cacheable() && get {
        return match hold.or(policy::list_hold(ctx.decision.as_ref())) {
            Some(hold) => held::cached(h, &proxy.modes, ctx, req, hold),
            None => cache::serve(h, ctx, req),
        };
    }
    if class == RouteClass::Stream && get {
        // Answers decide: documents are cached like `view`, streams pass (see `stream`).
        return match hold {
            Some(hold) => held::cached(h, &proxy.modes, ctx, req, hold),
            None => stream::serve(h, ctx, req),
        };
    }
    if let (RouteClass::Create, Some(d)) = (class, &ctx.decision) {
        return Step::Upstream(Call::Create(req, policy::CreatePlan::new(d.clone())));
    }
    if let Some(hold) = hold {
        return Step::Answered(Err(held::miss(&proxy.upstreams, &proxy.modes, ctx, hold)));
    }
    match class {
        RouteClass::Model => Step::Upstream(Call::Model(req)),
        _ => Step::Upstream(Call::Forward(req)),
    }
}

/// Admission for what reaches an upstream — the client rate limit, applied here and nowhere
/// else (a stale copy answers a limited cache fetch) — then the call. The upstream's own
/// admission (cooldown, breaker, bulkhead) and the attempts follow inside the call.
async fn admit_and_run(proxy: &Arc<Proxy>, ctx: &Ctx<'_>, step: Step<'_>) -> Answer {
    let call = match step {
        Step::Answered(answer) => return answer,
        Step::Joins(go) => return go.await,
        Step::Upstream(call) => call,
    };
    if let Err(p) = limits::client_rate(&proxy.rate_limiter, ctx.who) {
        let stale = match call {
            Call::Fetch { stale, .. } => stale,
            _ => None,
        };
        return rescue::stale_or(stale, ctx.seen, p, "client-rate-limited");
    }
    match call {
        Call::Forward(req) => forward::managed(&proxy.upstreams, ctx, req).await,
        Call::Model(req) => {
            let h = model::ModelHandles {
                upstreams: &proxy.upstreams,
                body_budget: &proxy.body_budget,
                bus: &proxy.bus,
                policy: policy_handles(proxy),
            };
            Box::pin(model::serve(h, ctx, req)).await
        }
        Call::Create(req, plan) => {
            let h = create::CreateHandles {
                creates: proxy.creates.clone(),
                upstreams: proxy.upstreams.clone(),
                queue: proxy.queue.clone(),
                handoffs: proxy.handoffs.clone(),
                accounts: proxy.accounts.clone(),
                bus: proxy.bus.clone(),
                body_budget: proxy.body_budget.clone(),
                base_url: proxy.base_url.clone(),
            };
            Box::pin(create::serve(h, ctx, req, plan)).await
        }
        Call::Fetch { go, .. } => go.await,
    }
}
