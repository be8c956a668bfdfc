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
//! 5. **driver admission** (`admit_and_run`; a plain forward's in `Managed::run` itself, the
//!    same check): the client rate limit (GCRA per surface and identity), applied here and
//!    nowhere else, only to steps that reach an upstream; a limited cache fetch gets its stale
//!    copy instead ([`limits`]);
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
//! **No future for what need not wait.** [`handle`] runs the front door and the phases above
//! in order, synchronously, until one must wait: a fresh cache hit never does, so it is
//! answered before any future is made ([`Handled::Ready`]: nothing allocated, moved or
//! polled). What must wait ([`Waits`]: a miss, a call, a provisional follow-up, CONNECT,
//! unmanaged hosts, pass-through mode) continues from where the phases stopped, in one boxed
//! future that owns the request's outcome ([`record::Pending`]).
//!
//! **Future size.** That future is moved by value at each level it is awaited through, and
//! each move copies the whole state machine, whose size is that of its largest branch. So the
//! paths that are rare or carry kilobytes of state — CONNECT, unmanaged hosts, pass-through
//! mode, `model`, `create`, the upstream attempt and the control API — are boxed where they are
//! awaited (BENCHMARKS.md §2 has the sizes and the counts).

mod announce;
mod cache;
mod classify;
mod conditional;
mod context;
mod create;
mod forward;
mod headers;
mod held;
mod hit_copy;
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
// The gateway's admin door answers with the same request ids.
#[cfg(feature = "gateway")]
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
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
/// problem response. The pipeline's own requests pass the same door without a future
/// ([`handle`], [`Door`]).
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
    let (door, settings) = Door::open(proxy, &req, req.headers().get(&REQUEST_ID));
    let size = headers::header_bytes(req.headers());
    let result = match limits::header_size(&settings.limits, size) {
        Ok(()) => next(req, door.rid.clone(), settings).await,
        Err(p) => Err(p),
    };
    recording.end(result.is_err());
    door.answer(proxy, result, None)
}

/// What the front door keeps of a request for its answer: the request id, and whether the
/// client still had body bytes to send when the request arrived.
struct Door {
    rid: HeaderValue,
    body_pending: bool,
}

impl Door {
    /// A door not opened yet ([`phases`] opens it).
    fn unopened() -> Door {
        const NONE: HeaderValue = HeaderValue::from_static("");
        Door {
            rid: NONE,
            body_pending: false,
        }
    }

    /// The request's id (`given`: the client's `X-Request-Id`, kept when sane), and one
    /// version of the settings for this request's own checks (a change lands on the next).
    /// The header-size cap follows ([`limits::header_size`]).
    fn open(
        proxy: &Proxy,
        req: &Request<Incoming>,
        given: Option<&HeaderValue>,
    ) -> (Door, Arc<Settings>) {
        let door = Door {
            rid: headers::request_id_given(given),
            body_pending: !http_body::Body::is_end_stream(req.body()),
        };
        (door, proxy.settings())
    }

    /// The final response: the answer or its problem, the request id, and the rule that
    /// decided (`Weir-Policy`; a create's rescue may have said more, e.g. `local->queue`).
    fn answer(self, proxy: &Proxy, result: Answer, rule: Option<HeaderValue>) -> Response<Body> {
        let refused = result.is_err();
        let mut resp = respond::finish(result, self.rid, rule, &proxy.base_url);
        // Weir's own problem for a request with a body usually leaves the body unread (breaker
        // open, cooldown, client rate): hyper then closes an HTTP/1 connection unless the rest
        // was already in its buffer. The answer says so (`Connection: close`,
        // `server::fit_to_connection`) so a client never sends its next request on a socket
        // about to close.
        if refused && self.body_pending {
            resp.extensions_mut().insert(crate::server::CloseAfter);
        }
        resp
    }
}

/// The final response for an answer made outside the [`front`] door (the gateway's own
/// refusals and problem pages): recorded ([`record`]: a problem counts as refused) and given
/// its request id.
#[cfg(feature = "gateway")]
pub(crate) fn finish(proxy: &Proxy, result: Answer, rid: HeaderValue) -> Response<Body> {
    Recording::start(proxy, &Outcome::default()).end(result.is_err());
    respond::finish(result, rid, None, &proxy.base_url)
}

/// A request's answer, as [`handle`] gives it: made at once, or the phases that must wait.
///
/// A fresh cache hit (and a refusal at the door) is decided without waiting for anything, so
/// it is answered before any future is made: no request future is allocated, moved through
/// the levels it is awaited at, or polled. Only a request that must wait (a miss, a call, a
/// CONNECT, the control API) has its remaining phases boxed, once (the box is what the server
/// used to make for every request: the phases' state is kilobytes, and hyper moves the
/// service's future, BENCHMARKS.md §2).
pub(crate) enum Handled {
    Ready(Option<Response<Body>>),
    Waiting(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
}

impl Future for Handled {
    type Output = Response<Body>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<Body>> {
        match self.get_mut() {
            // Taken once; a poll after that (which no caller makes) gets an empty `500`.
            Handled::Ready(resp) => Poll::Ready(resp.take().unwrap_or_else(|| {
                let mut r = Response::new(crate::body::empty());
                *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                r
            })),
            Handled::Waiting(f) => f.as_mut().poll(cx),
        }
    }
}

/// The pipeline's entry point, through the front door ([`front`]'s checks, made here without
/// a future): the phases run in order until one must wait; a fresh cache hit never does
/// ([`Handled`]).
pub(crate) fn handle(proxy: Arc<Proxy>, req: Request<Incoming>) -> Handled {
    // The phases run here, in hyper's call of the service, not in the request's future: for an
    // HTTP/2 stream that call is made in the connection's own poll, outside the stream task's
    // `catch_unwind` (`server::InlineFirst`), so a panic in them would end every stream of
    // the connection. It is caught here and answered `500` (recorded once: the request's
    // recording is dropped with the unwind).
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| phases_now(&proxy, req))) {
        Ok(handled) => handled,
        Err(_) => {
            tracing::error!("a request's handler panicked; it is answered 500");
            let p = Problem::new(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                crate::problem::ProblemKind::Internal,
                "Weir failed on this request (a bug; the log has it). Other requests are not affected.",
            );
            Handled::Ready(Some(p.with_base(&proxy.base_url).into_response(None)))
        }
    }
}

/// A test's way to make [`phases_now`] panic (`engine::record_tests`); in no build.
#[cfg(test)]
pub(crate) const TEST_PANIC: &str = "x-weir-test-panic";

/// [`handle`] made without the catch: the door, then the phases until one must wait.
fn phases_now(proxy: &Arc<Proxy>, req: Request<Incoming>) -> Handled {
    let seen = Outcome::default();
    // Recorded once: when answered, or (handed to the waiting phases) when the client goes
    // away first.
    let recording = Recording::start(proxy, &seen);
    #[cfg(test)]
    if req.headers().contains_key(TEST_PANIC) {
        panic!("a test asked the phases to panic");
    }
    let mut rule = None;
    // Opened by the phases, first (an out-parameter: a pair returned with the phases' state,
    // kilobytes, was copied whole once more).
    let mut door = Door::unopened();
    let phased = phases(proxy, req, &seen, &mut rule, &mut door);
    let waits = match phased {
        Phased::Answered(result) => {
            recording.end(result.is_err());
            return Handled::Ready(Some(door.answer(proxy, result, rule)));
        }
        Phased::Finished(resp) => {
            recording.end(false);
            return Handled::Ready(Some(resp));
        }
        // A plain forward, its call started by the phases: the request's future holds the
        // attempt's box and the answer's last steps (a few hundred bytes, served by glibc's
        // per-thread cache), not the request, its context and the frames of the phases
        // around the call (~4 KB, each copied in, boxed past that cache).
        Phased::Sending(sending) => {
            recording.hand_over();
            let pending = record::Pending::new(proxy.clone(), seen);
            let proxy = proxy.clone();
            return Handled::Waiting(Box::pin(async move {
                let result = sending.await;
                pending.end(result.is_err());
                door.answer(&proxy, result, rule)
            }));
        }
        Phased::Waits(waits) => waits,
    };
    recording.hand_over();
    let pending = record::Pending::new(proxy.clone(), seen);
    // Boxed where it is made: passed to a function first, the future (kilobytes in any state)
    // was copied once more (pass-through +0.26k instructions, callgrind). A managed request,
    // the common one, runs its phases without the level that matches the others.
    let proxy = proxy.clone();
    match waits {
        Waits::Managed(m) => Handled::Waiting(Box::pin(async move {
            let result = m.run(&proxy, pending.seen()).await;
            pending.end(result.is_err());
            door.answer(&proxy, result, rule)
        })),
        waits => Handled::Waiting(Box::pin(async move {
            let result = waits.run(&proxy, pending.seen(), &mut rule).await;
            pending.end(result.is_err());
            door.answer(&proxy, result, rule)
        })),
    }
}

/// How far the phases got without waiting.
// Made once per request and taken apart at once; a box would be an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Phased<F> {
    Answered(Answer),
    /// A fresh hit's answer with the front door's headers already written
    /// ([`respond::FreshHit::finished`]): what [`Door::answer`] would make of it.
    Finished(Response<Body>),
    /// A plain forward's call, started ([`plain_forward`]).
    Sending(forward::Sending<F>),
    Waits(Waits),
}

/// A managed call's future, as the attempt phase makes it ([`forward::send`]).
type Attempt = Result<crate::upstream::Attempted<Body>, crate::upstream::AttemptError>;

/// The phases a request still has to go through, each of which may wait; owned, so the
/// request's future can carry them.
// Moved once, into the request's boxed future; a box of its own would be one more allocation
// per request that waits.
#[allow(clippy::large_enum_variant)]
enum Waits {
    Connect(Arc<Settings>, Request<Incoming>),
    Unmanaged(Arc<Settings>, Request<Incoming>, Option<u16>),
    /// Pass-through mode.
    Untouched(Request<Incoming>),
    /// A follow-up call that may name a create Weir queued ([`provisional`]), then the rest.
    Follow(Request<Incoming>, Classified),
    /// A managed request from its class handler on.
    Managed(Managed),
}

/// Phases 0–2 for a managed request: where it goes and who asks.
struct Classified {
    settings: Arc<Settings>,
    up: crate::config::UpstreamIndex,
    route: crate::config::Route,
    hold: Option<crate::mode::Hold>,
    who: identity::Caller,
}

/// A managed request as its class handler gets it ([`Ctx`] without the outcome, which the
/// request's future owns), and what its answer still goes through.
struct Managed {
    req: Request<Incoming>,
    ctx: context::Detached,
    after: After,
}

/// The phases in order, as far as they go without waiting: a fresh cache hit is answered
/// here; anything else returns what it still has to do ([`Waits::run`]). The front door comes
/// first (its request id and header-size cap, under one settings version: [`Door`]); what it
/// and the phases read of the headers is gathered in one pass over them ([`headers::Glance`]).
fn phases(
    proxy: &Arc<Proxy>,
    mut req: Request<Incoming>,
    seen: &Outcome,
    rule: &mut Option<HeaderValue>,
    door: &mut Door,
) -> Phased<impl Future<Output = Attempt> + Send + 'static> {
    // 0. the front door
    let glance = headers::Glance::of(req.headers());
    let settings;
    (*door, settings) = Door::open(proxy, &req, glance.request_id);
    let phased = 'phased: {
        if let Err(p) = limits::header_size(&settings.limits, glance.bytes) {
            break 'phased Phased::Answered(Err(p));
        }
        // 1. classify
        let target = classify::target(&proxy.upstreams, &settings, &req);
        let surface = identity::surface_of(glance.user_agent);
        seen.surface(surface);
        let (up, route) = match target {
            Target::Connect => break 'phased Phased::Waits(Waits::Connect(settings, req)),
            Target::Unmanaged(port) => {
                seen.unmanaged();
                break 'phased Phased::Waits(Waits::Unmanaged(settings, req, port));
            }
            Target::Managed(up, route) => (up, route),
        };
        seen.managed(up, route.class);
        let hold = match proxy.modes.behaviour() {
            Behaviour::PassThrough => break 'phased Phased::Waits(Waits::Untouched(req)),
            Behaviour::Hold(h) => Some(h),
            Behaviour::Normal => None,
        };
        // 2. identity
        let who = identity::caller(&proxy.identity_key, surface, &glance.credentials);
        let conditional = glance.conditional;
        let classified = Classified {
            settings,
            up,
            route,
            hold,
            who,
        };
        // 2a. A provisional job or session id of a create Weir queued: answered from the
        // queue, or (once sent) the real id in its place. Only a request that could name one
        // waits for the queue.
        if provisional::may_follow(&proxy.queue, &req) {
            req.headers_mut().insert(REQUEST_ID, door.rid.clone());
            break 'phased Phased::Waits(Waits::Follow(req, classified));
        }
        // 2b–3. policy, context
        let (ctx, after) = managed(proxy, &req, classified, conditional, seen, rule);
        // 4. the class handler, when it can answer at once: a fresh cache hit. Unless a
        // condition may still turn it into a `304`, its answer is finished here, the front
        // door's headers with the cache's in one go (as `Door::answer` would add them).
        if let Some(hit) = fresh_hit(proxy, &ctx, &after, &mut req) {
            if after.asked.is_none() {
                let rid = std::mem::replace(&mut door.rid, Door::unopened().rid);
                break 'phased Phased::Finished(hit.finished(rid, rule.take()));
            }
            break 'phased Phased::Answered(after.now(&ctx, Ok(hit.response())));
        }
        // What goes on carries the request id upstream (a hit's answer gets it at the door).
        req.headers_mut().insert(REQUEST_ID, door.rid.clone());
        // 4–5. A plain forward (an `other` call, the common call that waits): the client rate
        // and the call, started here ([`Managed::run`] does the same for one that waits).
        if plain_forward(&ctx, &after, req.method()) {
            break 'phased match limits::client_rate(&proxy.rate_limiter, ctx.who) {
                Err(p) => Phased::Answered(rescue::stale_or(None, seen, p, "client-rate-limited")),
                Ok(()) => Phased::Sending(forward::send(&proxy.upstreams, &ctx, req)),
            };
        }
        Phased::Waits(Waits::Managed(Managed {
            req,
            ctx: ctx.detach(),
            after,
        }))
    };
    phased
}

/// Phases 2b and 3 for a managed request: the account it may resolve, the policy's decision,
/// the context, and what its answer will go through. (The request is lent, not moved in and
/// out: each move copied it; the context is detached from `seen` only by a request that
/// waits.)
// Inlined: its context is made where it is used (returned, it was copied).
#[inline]
fn managed<'o>(
    proxy: &Arc<Proxy>,
    req: &Request<Incoming>,
    c: Classified,
    conditional: bool,
    seen: &'o Outcome,
    rule: &mut Option<HeaderValue>,
) -> (Ctx<'o>, After) {
    let Classified {
        settings,
        up,
        route,
        hold,
        who,
    } = c;
    let class = route.class;
    // Off the request path: resolution (if needed) runs in the background, never while the
    // mode holds upstream calls; a client's own `GET /user` is read instead (`user_answer`).
    let user_call = who
        .credentialed
        .then(|| {
            proxy
                .accounts
                .observe(&proxy.upstreams, up, who.identity, req, hold.is_none())
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
    let after = After::of(proxy, &ctx, req, conditional, user_call);
    (ctx, after)
}

/// A fresh copy of a cacheable GET's answer, when the class handler would answer with it
/// ([`cache::fresh_hit`]) and nothing after it must wait: not held (cache only, offline, a
/// `list = "cache"` rule), not a Task API list (told the creates that wait in the queue), not
/// a log or a client's own `GET /user`.
fn fresh_hit(
    proxy: &Arc<Proxy>,
    ctx: &Ctx<'_>,
    after: &After,
    req: &mut Request<Incoming>,
) -> Option<respond::FreshHit> {
    let plain = req.method() == Method::GET
        && ctx.class.is_cacheable()
        && ctx.hold.is_none()
        && policy::list_hold(ctx.decision.as_ref()).is_none()
        && !(ctx.family == crate::config::Family::Tasks && ctx.class == RouteClass::List)
        && after.is_now();
    match plain {
        true => cache::fresh_hit(cache_handles(proxy), ctx, req),
        false => None,
    }
}

impl Waits {
    /// The phases that may wait, in order, from where [`phases`] stopped.
    async fn run(
        self,
        proxy: &Arc<Proxy>,
        seen: &Outcome,
        rule: &mut Option<HeaderValue>,
    ) -> Answer {
        let (mut req, classified) = match self {
            // Rare or kilobytes of state: boxed, so a call's future holds none of them.
            Waits::Connect(settings, req) => {
                return Box::pin(connect(proxy, &settings, req)).await;
            }
            Waits::Unmanaged(settings, req, port) => {
                if let (Some(a), Some(port)) = (req.uri().authority(), port) {
                    let allow = settings.allow_private_targets;
                    private_target::check_literal(allow, a.host(), port)?;
                    if settings.upstream_proxy.is_some() {
                        Box::pin(private_target::check_before_proxy(allow, a.host(), port)).await?;
                    }
                }
                return Box::pin(forward::unmanaged(&proxy.upstreams, req)).await;
            }
            Waits::Untouched(req) => {
                return Box::pin(forward::untouched(&proxy.upstreams, req)).await;
            }
            Waits::Managed(m) => return m.run(proxy, seen).await,
            Waits::Follow(req, classified) => (req, classified),
        };
        // Boxed: rare.
        let followed = Box::pin(provisional::follow(
            &proxy.queue,
            &proxy.accounts,
            req,
            &classified.who,
        ))
        .await;
        req = match followed {
            provisional::Follow::Answer(r) => return Ok(r),
            provisional::Follow::Pass(req) => req,
        };
        // The follow-up may have changed the request: its conditions are looked up.
        let (ctx, after) = managed(proxy, &req, classified, true, seen, rule);
        let ctx = ctx.detach();
        Managed { req, ctx, after }.run(proxy, seen).await
    }
}

/// Whether [`step`] makes a request a plain `Call::Forward` that nothing else in
/// [`Managed::run`] waits for or reads the context after: no Task API list, no decision to
/// name, nothing [`After`] waits for or answers. Its call is then started by the phases.
fn plain_forward(ctx: &Ctx<'_>, after: &After, method: &Method) -> bool {
    let get = method == Method::GET;
    let class = ctx.class;
    !(get && (class.is_cacheable() || class == RouteClass::Stream))
        && class != RouteClass::Model
        && class != RouteClass::Create
        && ctx.hold.is_none()
        && ctx.decision.is_none()
        && !(ctx.family == crate::config::Family::Tasks && class == RouteClass::List)
        && after.is_now()
        && after.asked.is_none()
}

impl Managed {
    /// Phases 4 to 8 for a managed request that was not a fresh hit.
    async fn run(self, proxy: &Arc<Proxy>, seen: &Outcome) -> Answer {
        let Managed { req, ctx, after } = self;
        let ctx = ctx.attach(seen);
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
            // Answered by the handler (a stale hit, a hold's copy or miss): no admission, and
            // the driver's future is not made.
            Step::Answered(answer) => answer,
            // A plain forward (an `other` call), the common call: [`admit_and_run`]'s client
            // rate and call made here, without its future around the call's (each level
            // copies the request in and the answer out).
            Step::Upstream(Call::Forward(req)) => {
                match limits::client_rate(&proxy.rate_limiter, ctx.who) {
                    Err(p) => rescue::stale_or(None, ctx.seen, p, "client-rate-limited"),
                    Ok(()) => forward::managed(&proxy.upstreams, &ctx, req).await,
                }
            }
            step => admit_and_run(proxy, &ctx, step).await,
        };
        let answer = match waiting.is_empty() {
            true => answer,
            false => Box::pin(waiting_tasks::listed(answer, waiting)).await,
        };
        // Nothing after it waits (no log follower, no client's own `GET /user`): answered
        // here, without [`After::apply`]'s future.
        match after.is_now() {
            true => after.now(&ctx, answer),
            false => {
                let answer = after.apply(proxy, &ctx, answer).await;
                explained(&ctx, answer)
            }
        }
    }
}

/// A miss under `list = "cache"` names the rule (`explain` touches no other problem).
// Inlined, and the problem named in place: an answer moved through a call (or `map_err`) is
// copied whole.
#[inline]
fn explained(ctx: &Ctx<'_>, mut answer: Answer) -> Answer {
    if let (Some(d), Err(p)) = (&ctx.decision, &mut answer) {
        policy::explain(p, d);
    }
    answer
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
    /// `conditional`: whether the request may carry a condition (`If-None-Match` or
    /// `If-Modified-Since`; `false` when the front door's pass saw neither, so none is looked
    /// up).
    fn of(
        proxy: &Proxy,
        ctx: &Ctx<'_>,
        req: &Request<Incoming>,
        conditional: bool,
        user: Option<crate::accounts::UserCall>,
    ) -> After {
        let cached = req.method() == Method::GET
            && (ctx.class.is_cacheable() || ctx.class == RouteClass::Stream);
        After {
            follower: (cached && ctx.class == RouteClass::Stream)
                .then(|| stream::follower(&proxy.upstreams, ctx, req)),
            asked: (cached && conditional)
                .then(|| conditional::Asked::of(req.headers()))
                .flatten(),
            user,
        }
    }

    /// Whether nothing here waits: no log follower, no client's own `GET /user`.
    fn is_now(&self) -> bool {
        self.follower.is_none() && self.user.is_none()
    }

    /// [`After::apply`] when nothing here waits ([`After::is_now`]), then the rule's
    /// explanation ([`explained`]).
    #[inline]
    fn now(self, ctx: &Ctx<'_>, answer: Answer) -> Answer {
        let answer = match self.asked {
            Some(asked) => asked.answer(answer, ctx.seen),
            None => answer,
        };
        explained(ctx, answer)
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

fn cache_handles(proxy: &Arc<Proxy>) -> cache::CacheHandles<'_> {
    cache::CacheHandles {
        cache: &proxy.cache,
        coalescer: &proxy.coalescer,
        page_families: &proxy.page_families,
        streamed: &proxy.streamed,
        upstreams: &proxy.upstreams,
        accounts: &proxy.accounts,
        task_groups: &proxy.task_groups,
    }
}

/// The class handler for a managed request: what it can answer itself, or the call it needs.
fn step<'a>(proxy: &'a Arc<Proxy>, ctx: &'a Ctx<'_>, req: Request<Incoming>) -> Step<'a> {
    let (class, hold) = (ctx.class, ctx.hold);
    let h = cache_handles(proxy);
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
