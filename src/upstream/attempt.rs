//! Attempt and retry: the one place an upstream request is sent. Every attempt passes the gate
//! ([`super::admission`]); every outcome is classified and recorded (breaker, counters,
//! cooldown); retryable failures of resendable requests are retried with exponential backoff
//! and full jitter, within the class deadline and the upstream's retry budget (a rate limit
//! never is: it is answered at once, see docs/reliability.md); then, if the
//! policy allows and the upstream has one, the fallback gets one try. Client requests and
//! queue replays both come here, each with its [`AttemptPolicy`].

use super::admission::{Admitted, Closed};
use super::attempt_error::AttemptError;
use super::client::{FetchError, Timeouts};
use super::{UpstreamIndex, Upstreams};
use crate::body::{boxed, full, Body};
use crate::config::{ClassSettings, Origin, Route, Settings};
use crate::identity::Identity;
use crate::problem::Problem;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, Uri};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use weir_resilience::{classify_response, wait_hint, Kind, TimeoutPhase};

/// How a request may be attempted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptPolicy {
    /// The method is idempotent, so a failed attempt may be sent again.
    pub idempotent: bool,
    /// The body is in memory (or empty), so it can be sent more than once.
    pub body_resendable: bool,
    /// At most this many attempts at the primary origin.
    pub max_attempts: u32,
    /// The upstream's fallback origin may get one try.
    pub fallback: bool,
    /// A retry may wait out the upstream's own hint (`Retry-After`, rate-limit reset). Off
    /// when the caller already holds an answer to give (a stale copy): that answer now beats
    /// a fresh one after the upstream's wait.
    pub wait_for_hint: bool,
}

/// One call's routing: where it goes, its class, whose breaker it counts against, how it may
/// be retried and whose credential it carries, and its class's settings as the caller's
/// snapshot has them.
struct Call<S> {
    up: UpstreamIndex,
    route: Route,
    policy: AttemptPolicy,
    who: Option<Identity>,
    /// The caller's snapshot, borrowed (`&Settings`) or shared (`Arc<Settings>`, for a
    /// call's future that outlives its caller's frame): the call's future holds a pointer
    /// across every attempt, not the class's durations it reads.
    settings: S,
}

impl<S: std::ops::Deref<Target = Settings>> Call<S> {
    fn class(&self) -> &ClassSettings {
        self.settings.classes.get(self.route.class)
    }
}

impl AttemptPolicy {
    /// A client's request: retried when idempotent and resendable, fallback allowed.
    pub fn for_request(method: &Method, body_resendable: bool) -> AttemptPolicy {
        AttemptPolicy {
            idempotent: matches!(
                *method,
                Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
            ),
            body_resendable,
            max_attempts: u32::MAX,
            fallback: true,
            wait_for_hint: true,
        }
    }

    /// The same, for a caller that holds a stale answer: no waiting out the upstream's hint.
    pub fn with_answer_in_hand(self) -> AttemptPolicy {
        AttemptPolicy {
            wait_for_hint: false,
            ..self
        }
    }

    /// A queued create's replay: one attempt, no fallback (the worker reschedules itself).
    pub fn replay() -> AttemptPolicy {
        AttemptPolicy {
            idempotent: false,
            body_resendable: true,
            max_attempts: 1,
            fallback: false,
            wait_for_hint: true,
        }
    }

    fn retries(&self) -> bool {
        self.idempotent && self.body_resendable && self.max_attempts > 1
    }
}

/// An upstream response (from the fallback origin when it carries `Weir-Fallback`).
pub(crate) struct Attempted<B> {
    pub response: Response<B>,
    /// Attempts that failed (this answer's included, if it is a failure): a success that
    /// needed a retry still tells degradation-aware freshness the upstream is struggling.
    pub failed_attempts: u32,
}

/// The parts of a request that can be sent again.
pub(crate) struct Replayable<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    /// Whose credential the request carries (`None`: none), for identity-scoped cooldowns.
    pub identity: Option<Identity>,
}

impl Upstreams {
    /// [`Upstreams::attempt_buffered`] with the failure already made the client's problem:
    /// for callers that have not moved to [`AttemptError`] yet (the queue's replay and
    /// lookup).
    pub async fn call_buffered(
        &self,
        settings: &Settings,
        up: UpstreamIndex,
        route: Route,
        req: Replayable<'_>,
        policy: AttemptPolicy,
        first: Option<Admitted>,
    ) -> Result<Attempted<Bytes>, Problem> {
        self.attempt_buffered(settings, up, route, req, policy, first)
            .await
            .map_err(Problem::from)
    }

    /// Sends a request whose body is in memory, reading the whole response. `first` is an
    /// admission already granted (a replay marks its item before sending), else the gate is
    /// asked here.
    ///
    /// `settings` is the caller's one snapshot (a client's request: the version it started
    /// under, `pipeline::context`): the class's timeouts, deadline and the body limit come from
    /// it, never from the settings in force when the call happens to start, so a reload while
    /// the client was still sending its body changes nothing of this request.
    pub async fn attempt_buffered(
        &self,
        settings: &Settings,
        up: UpstreamIndex,
        route: Route,
        req: Replayable<'_>,
        policy: AttemptPolicy,
        first: Option<Admitted>,
    ) -> Result<Attempted<Bytes>, AttemptError> {
        let limit = settings.limits.max_body_bytes;
        let send = |_: &Upstreams, origin: &Origin, t: Timeouts, _: Instant| {
            let r = build(origin, &req, full(req.body.clone()));
            let client = &self.client;
            async move { client.fetch(r?, t, limit).await }
        };
        let prefix = |r: &Response<Bytes>| r.body().clone();
        let who = req.identity;
        let call = Call {
            up,
            route,
            policy,
            who,
            settings,
        };
        Upstreams::run(self, call, first, send, prefix).await
    }

    /// Sends a request and streams the response. A streamed body is sent at most once.
    /// `settings`: the caller's snapshot, as for [`Upstreams::attempt_buffered`].
    ///
    /// Not an `async fn`: it returns the attempt loop's own future, so the caller's box holds
    /// that future and nothing around it (one level fewer to build and copy per request). The
    /// future owns what it reads (the upstreams and the snapshot, shared): a caller can start
    /// the call where it decides to make it and hand the future on, without a frame of its own
    /// around it (`pipeline::forward::send`).
    pub fn call_streaming(
        self: &Arc<Self>,
        settings: &Arc<Settings>,
        up: UpstreamIndex,
        route: Route,
        req: Request<Body>,
        who: Option<Identity>,
    ) -> impl std::future::Future<Output = Result<Attempted<Body>, AttemptError>> + Send + 'static
    {
        // Decided from the body itself: headers may already have lost `Transfer-Encoding`.
        let empty = http_body::Body::is_end_stream(req.body());
        let policy = AttemptPolicy::for_request(req.method(), empty);
        // The first attempt sends the client's own request (moved whole, aimed in place: each
        // move of a request or its parts is a copy of a few hundred bytes). A copy
        // of the head is kept only when another attempt can follow it: a retry, or the
        // upstream's fallback. (A copy for every request, its first attempt sending the copy,
        // was ~1.4k instructions per pass-through request, and the copy's exact-size header
        // map was grown again when the answer came back in it: hyper reuses a sent request's
        // map for its response.)
        // Only a request with no body can be sent again: a streamed body goes with the first
        // attempt, even one that never reached the upstream, and the head alone would be
        // another request (a PATCH applied empty, under the client's `Content-Length`).
        let again = empty
            && (policy.retries() || (policy.fallback && self.get(up).settings.fallback.is_some()));
        let mut held = Held::new(req, again);
        let send = move |ups: &Upstreams, origin: &Origin, t: Timeouts, started: Instant| {
            // Any later attempt (a streamed body is sent at most once: only an empty one is
            // retried) sends the kept head with no body.
            let r = match (held.take_first(), held.kept()) {
                (Some(req), _) => aim_whole(origin, req),
                (None, Some(head)) => aim(
                    origin,
                    head.method.clone(),
                    &head.target(),
                    head.headers(),
                    crate::body::empty(),
                ),
                (None, None) => Err(FetchError::Protocol {
                    target: origin.to_string(),
                    message: "the request was already sent once and cannot be sent again"
                        .to_owned(),
                }),
            };
            // Handed to the client now: the future kept holds the client's, not the request.
            futures_util::TryFutureExt::map_ok(ups.client.send_made(r, t, started), |r| {
                r.map(boxed)
            })
        };
        let call = Call {
            up,
            route,
            policy,
            who,
            settings: settings.clone(),
        };
        Upstreams::run(self.clone(), call, None, send, |_| Bytes::new())
    }

    /// The route of a request Weir sends for itself from stored data (a queued create's
    /// replay, its in-doubt lookup), found in the table in force now: a client's request
    /// brings the route it was classified with.
    pub(crate) fn route_of(&self, method: &http::Method, path: &str) -> Route {
        crate::config::route(&self.settings_now().routes, method, path)
    }

    /// The attempt loop. Not an `async fn`: an `async fn` moves each argument into a local of
    /// its own, and its future keeps room for both, the argument and the local (the call and
    /// `send`, with the client's request and the kept head in it, twice). The block below
    /// captures them once and reads them in place.
    ///
    /// `this` and the call's settings are borrowed (`&Upstreams`, `&Settings`) or shared
    /// (`Arc`s: a future that owns what it reads).
    // Written out (not an `async fn`) on purpose: see above.
    #[allow(clippy::manual_async_fn)]
    fn run<'a, U, S, B, F, Fut, P>(
        this: U,
        call: Call<S>,
        mut first: Option<Admitted>,
        mut send: F,
        prefix: P,
    ) -> impl std::future::Future<Output = Result<Attempted<B>, AttemptError>> + 'a
    where
        U: std::ops::Deref<Target = Upstreams> + 'a,
        S: std::ops::Deref<Target = Settings> + 'a,
        B: 'a,
        F: FnMut(&Upstreams, &Origin, Timeouts, Instant) -> Fut + 'a,
        Fut: std::future::Future<Output = Result<Response<B>, FetchError>>,
        P: Fn(&Response<B>) -> Bytes + 'a,
    {
        async move {
            let this: &Upstreams = &this;
            let (up, class, family, policy) =
                (call.up, call.route.class, call.route.family, call.policy);
            let cs = call.class();
            let who = &call.who;
            let u = this.get(up);
            let (g, counters, cfg) = (&u.gate, &u.counters, &u.settings);
            // One clock read for the deadline and the budget's count.
            let now = Instant::now();
            let deadline = now + cs.deadline;
            // Built on the first retry only: most calls never need it.
            let mut jitter: Option<Box<dyn weir_resilience::Jitter>> = None;
            g.budget.record_request_at(now);
            let mut last: Option<(Result<Response<B>, FetchError>, Kind)> = None;
            // Boxed: a refusal is rare, and its room in the future is a pointer.
            let mut closed: Option<Box<Closed>> = None;
            let mut failed_attempts = 0u32;
            for attempt in 0..policy.max_attempts {
                // One attempt, in a block: what it leaves behind (its answer, moved into `last`, its
                // permit, its clock reads) ends with the block, so the future does not keep room for
                // it beside the backoff's timer (a local's room lasts to the end of its scope, not to
                // its last use).
                let wait = {
                    let admitted = match first.take() {
                        Some(a) => a,
                        None => match g.admit_attempt(who.as_ref(), attempt > 0, family).await {
                            Ok(a) => a,
                            Err(c) => {
                                closed = Some(Box::new(c));
                                break;
                            }
                        },
                    };
                    let started = Instant::now();
                    let per_try = cs
                        .per_try_timeout
                        .min(deadline.saturating_duration_since(started))
                        .max(Duration::from_millis(1));
                    counters
                        .class(class)
                        .upstream_requests
                        .fetch_add(1, Relaxed);
                    if let Some(id) = who.as_ref() {
                        this.accounts.count_upstream(id);
                    }
                    let res = send(
                        this,
                        &cfg.origin,
                        Timeouts {
                            headers: per_try,
                            body: per_try,
                        },
                        started,
                    )
                    .await;
                    this.reach.observe(up, &res);
                    // A 401 means the credential is not (or no longer) what it was: whatever account
                    // it was mapped to, it stops sharing that account's answers now.
                    if let (Ok(r), Some(id)) = (&res, who.as_ref()) {
                        if r.status() == http::StatusCode::UNAUTHORIZED {
                            this.accounts.forget(id);
                        }
                    }
                    // One clock read for the latency and the breaker's record.
                    let ended = Instant::now();
                    let elapsed = ended.saturating_duration_since(started);
                    let pre = res.as_ref().map(&prefix).unwrap_or_default();
                    let kind = kind_of(&res, &pre);
                    // Slow is judged against this class's own recent latency (see the breaker's
                    // baseline; its documented normal latency until it has learned one), with the
                    // class's `slow_call` as the absolute cut-off.
                    admitted.record(
                        kind.counts_as_breaker_failure(),
                        class.as_str(),
                        elapsed,
                        weir_resilience::Timing {
                            normal: Some(cs.normal_latency).filter(|d| !d.is_zero()),
                            ceiling: cs.slow_call,
                        },
                        ended,
                    );
                    if !kind.is_ok() {
                        counters.error(class, kind.as_str());
                        failed_attempts += 1;
                    }
                    // The upstream's own ill health, or its recovery (a refusal of this request is
                    // neither: it says nothing about the upstream).
                    if kind.is_ok() || kind.counts_as_breaker_failure() {
                        u.recovery.observe(!kind.is_ok());
                    }
                    // Only a failure carries a wait worth reading.
                    let hint = if kind.is_ok() {
                        None
                    } else {
                        res.as_ref()
                            .ok()
                            .and_then(|r| wait_hint(r.headers(), SystemTime::now()))
                    };
                    // The upstream's own wait holds back every surface, replays included: of this
                    // identity for a rate limit, of everyone for an overload (see `Gate::cool_down`).
                    if matches!(kind, Kind::RateLimited | Kind::Overloaded) {
                        if let Some(w) = hint {
                            g.cool_down(w, kind, who.as_ref());
                        }
                    }
                    // A rate limit (429, GitHub's secondary-limit 403) is never retried here: the
                    // upstream asked this caller to wait, its wait now holds back every later attempt
                    // (the cooldown above), and GitHub blocks integrations that retry while limited.
                    // The caller answers at once, with the upstream's `Retry-After` or a stale copy.
                    let retryable = kind.is_retryable();
                    last = Some((res, kind));
                    if kind.is_ok() || !retryable || !policy.retries() {
                        break;
                    }
                    if hint.is_some() && !policy.wait_for_hint {
                        break;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let wait = g.backoff().delay_with_hint(
                        attempt,
                        hint,
                        jitter.get_or_insert_with(|| g.jitter()).as_mut(),
                    );
                    if wait >= left
                        || !kind.retryable_within(hint, left)
                        || !g.budget.try_withdraw()
                    {
                        break;
                    }
                    tracing::debug!(upstream = %cfg.name, %kind, attempt, ?wait, "retrying");
                    wait
                };
                tokio::time::sleep(wait).await;
            }

            if let (Some(fb), true) = (
                &cfg.fallback,
                policy.fallback && may_fallback(&policy, &last, closed.is_some()),
            ) {
                // One bounded attempt at the fallback; never for fatal/auth kinds (not reached then).
                u.fallback_attempts.fetch_add(1, Relaxed);
                let t = Timeouts {
                    headers: cs.per_try_timeout,
                    body: cs.per_try_timeout,
                };
                let res = send(this, fb, t, Instant::now()).await;
                let pre = res.as_ref().map(&prefix).unwrap_or_default();
                if let Ok(mut resp) = res {
                    if classify_response(resp.status(), resp.headers(), &pre).is_ok() {
                        if let Ok(v) = HeaderValue::from_str(&fb.to_string()) {
                            resp.headers_mut().insert("weir-fallback", v);
                        }
                        return Ok(Attempted {
                            response: resp,
                            failed_attempts,
                        });
                    }
                }
            }
            match (last, closed) {
                (Some((Ok(response), _)), _) => Ok(Attempted {
                    response,
                    failed_attempts,
                }),
                (Some((Err(error), _)), _) => Err(AttemptError::Failed {
                    upstream: cfg.name.clone(),
                    breaker: g.breaker.state(),
                    error,
                }),
                (None, Some(closed)) => Err(AttemptError::Refused {
                    upstream: cfg.name.clone(),
                    closed: *closed,
                }),
                (None, None) => Err(AttemptError::NoAttempt),
            }
        }
    }
}

/// Whether the primary failed in a way the fallback may rescue. A non-idempotent request (a
/// create) goes to the fallback only if the primary certainly did not take it: never sent, or
/// refused outright (429/503/529). A streamed body never: it went with the first attempt,
/// even one that never reached the primary.
fn may_fallback<B>(
    policy: &AttemptPolicy,
    last: &Option<(Result<Response<B>, FetchError>, Kind)>,
    closed: bool,
) -> bool {
    let primary_failed = closed
        || last
            .as_ref()
            .is_some_and(|(_, k)| k.is_retryable() || *k == Kind::RateLimited);
    let never_sent = match last {
        None => true,
        Some((Err(e), _)) => !e.maybe_sent(),
        Some((Ok(_), _)) => false,
    };
    let refused =
        matches!(last, Some((Ok(r), _)) if matches!(r.status().as_u16(), 429 | 503 | 529));
    if !policy.body_resendable {
        false
    } else if policy.idempotent {
        primary_failed
    } else {
        primary_failed && (never_sent || refused)
    }
}

fn build(origin: &Origin, req: &Replayable<'_>, body: Body) -> Result<Request<Body>, FetchError> {
    aim(
        origin,
        req.method.clone(),
        req.uri,
        req.headers.clone(),
        body,
    )
}

/// A request to `origin` with this method, the path and query of `target`, these headers
/// and the origin's `Host`. A fresh request: nothing of the client's connection (its HTTP
/// version, its extensions) goes upstream.
fn aim(
    origin: &Origin,
    method: Method,
    target: &Uri,
    mut headers: HeaderMap,
    body: Body,
) -> Result<Request<Body>, FetchError> {
    let uri = origin.uri_for(target).map_err(|e| FetchError::Protocol {
        target: origin.to_string(),
        message: format!("bad URI: {e}"),
    })?;
    // The origin's authority, as `uri` has it (made once, not checked and copied per attempt).
    headers.insert(header::HOST, origin.host_header().clone());
    let mut r = Request::new(body);
    *r.method_mut() = method;
    *r.uri_mut() = uri;
    *r.headers_mut() = headers;
    Ok(r)
}

/// The client's own request aimed at `origin` in place, as [`aim`] builds one: the origin's
/// URI and `Host`, HTTP/1.1 and no extensions (nothing of the client's connection goes
/// upstream).
fn aim_whole(origin: &Origin, mut req: Request<Body>) -> Result<Request<Body>, FetchError> {
    // A proxy client's request for the upstream it is configured with already names the origin
    // (and usually carries its `Host`): left as it is, not given a new URI equal to the old
    // one (a copy made and the old one dropped).
    if !origin.names(req.uri()) {
        let uri = origin
            .uri_for(req.uri())
            .map_err(|e| FetchError::Protocol {
                target: origin.to_string(),
                message: format!("bad URI: {e}"),
            })?;
        *req.uri_mut() = uri;
    }
    set_host(req.headers_mut(), origin.host_header());
    *req.version_mut() = http::Version::default();
    req.extensions_mut().clear();
    Ok(req)
}

/// `headers.insert(HOST, host)` with one lookup, and nothing replaced when the one `Host`
/// there is `host` already.
fn set_host(headers: &mut HeaderMap, host: &HeaderValue) {
    match headers.entry(header::HOST) {
        header::Entry::Occupied(mut e) => {
            let mut all = e.iter();
            let same = all.next() == Some(host) && all.next().is_none();
            if !same {
                // Every value replaced by this one, in the first one's place (as `insert`).
                e.insert(host.clone());
            }
        }
        header::Entry::Vacant(e) => {
            e.insert(host.clone());
        }
    }
}

/// The client's request until its first attempt takes it, and, when another attempt can
/// follow (a retry or the fallback), a copy of its head, its headers as a list of pairs: a
/// kept head is almost never sent, and a cloned `HeaderMap` (two allocations, its table and
/// its entries, each freed again) cost ~1.2k instructions per pass-through GET with its drop,
/// the list ~0.85k (callgrind). The map is built from the list only for the attempt that
/// sends it.
///
/// Both live in a box reused from request to request on each thread (with the list's buffer):
/// the attempt's future holds a pointer, not the request (224 bytes), the method, target and
/// list, in a future that glibc serves from its per-thread cache only under 1,032 bytes.
struct Held(Option<Box<Head>>);

struct Head {
    first: Option<Request<Body>>,
    /// Whether `method`, `target` and `pairs` hold the request's head.
    kept: bool,
    method: Method,
    /// The target's path and query: all an attempt takes of it ([`Origin::uri_for`]), and one
    /// shared buffer to count, not three.
    target: Option<http::uri::PathAndQuery>,
    pairs: Vec<(header::HeaderName, HeaderValue)>,
}

thread_local! {
    /// [`Held`]'s reused boxes (boxes on purpose: a [`Held`] is the pointer, taken out).
    #[allow(clippy::vec_box)]
    static SPARE_HEADS: std::cell::RefCell<Vec<Box<Head>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Held {
    /// Boxes kept per thread, and the largest list kept (a head of many headers is not).
    const POOL: usize = 4;
    const KEEP: usize = 64;

    /// `req`, and a copy of its head when `keep` (another attempt may send it).
    fn new(req: Request<Body>, keep: bool) -> Held {
        let mut head = SPARE_HEADS
            .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                Box::new(Head {
                    first: None,
                    kept: false,
                    method: Method::GET,
                    target: None,
                    pairs: Vec::new(),
                })
            });
        if keep {
            head.method.clone_from(req.method());
            head.target = req.uri().path_and_query().cloned();
            head.pairs
                .extend(req.headers().iter().map(|(n, v)| (n.clone(), v.clone())));
            head.kept = true;
        }
        head.first = Some(req);
        Held(Some(head))
    }

    /// The client's request, the first time (`None` after).
    fn take_first(&mut self) -> Option<Request<Body>> {
        self.0.as_mut()?.first.take()
    }

    /// The kept head, if one was kept.
    fn kept(&self) -> Option<&Head> {
        self.0.as_deref().filter(|h| h.kept)
    }
}

impl Head {
    /// The kept target, origin-form: what [`Origin::uri_for`] makes of the request's own
    /// (its path and query, `/` when it had none).
    fn target(&self) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.path_and_query = Some(
            self.target
                .clone()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).unwrap_or_default()
    }

    /// The kept headers as a map: every value, in the order the request had them.
    fn headers(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.pairs.len());
        for (n, v) in &self.pairs {
            map.append(n.clone(), v.clone());
        }
        map
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(mut head) = self.0.take() else {
            return;
        };
        // Emptied now: a request never sent is dropped here, and a kept target or value
        // shares the client's read buffer, which a box waiting for the next request must not
        // hold on to.
        head.first = None;
        head.kept = false;
        head.pairs.clear();
        head.target = None;
        head.method = Method::GET;
        if head.pairs.capacity() > Self::KEEP {
            return;
        }
        let _ = SPARE_HEADS.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < Self::POOL {
                    s.push(head);
                }
            }
        });
    }
}

/// The outcome kind of one exchange (the breaker, counters and retry decisions use it).
pub(crate) fn kind_of<B>(res: &Result<Response<B>, FetchError>, body_prefix: &[u8]) -> Kind {
    match res {
        Ok(r) => classify_response(r.status(), r.headers(), body_prefix),
        Err(FetchError::Timeout { phase, .. }) => Kind::Timeout(match phase {
            super::client::TimeoutPhase::Connect => TimeoutPhase::Connect,
            super::client::TimeoutPhase::Headers => TimeoutPhase::Headers,
            super::client::TimeoutPhase::Body => TimeoutPhase::Body,
        }),
        // Neither retryable nor the upstream's ill health: a bad response size or a
        // certificate this install does not trust.
        // The client's broken body is the client's fault.
        Err(
            FetchError::TooLarge { .. } | FetchError::Tls { .. } | FetchError::ClientBody { .. },
        ) => Kind::Fatal,
        Err(_) => Kind::Connection,
    }
}

/// A problem for a failed upstream exchange.
pub(crate) fn fetch_problem(e: &FetchError) -> Problem {
    let status = match e {
        FetchError::Timeout { .. } => http::StatusCode::GATEWAY_TIMEOUT,
        FetchError::ClientBody { .. } => http::StatusCode::BAD_REQUEST,
        FetchError::Forbidden { .. } => http::StatusCode::FORBIDDEN,
        _ => http::StatusCode::BAD_GATEWAY,
    };
    Problem::new(status, e.kind(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aimed in place, a request gets the origin's URI and exactly one `Host`, the origin's,
    /// whether it named the origin already or not (another host, no `Host`, two of them).
    #[test]
    fn a_request_aimed_whole_names_the_origin_once() {
        let origin = Origin::parse("http://127.0.0.1:8081").unwrap();
        let cases: [(&str, &[&str]); 5] = [
            ("http://127.0.0.1:8081/repos/o/r?x=1", &["127.0.0.1:8081"]),
            ("http://127.0.0.1:8081/repos/o/r?x=1", &[]),
            (
                "http://127.0.0.1:8081/repos/o/r?x=1",
                &["127.0.0.1:8081", "evil.test"],
            ),
            ("http://other.test/repos/o/r?x=1", &["other.test"]),
            ("/repos/o/r?x=1", &["127.0.0.1:8081"]),
        ];
        for (target, hosts) in cases {
            let mut b = Request::builder().method(Method::GET).uri(target);
            for h in hosts {
                b = b.header(header::HOST, *h);
            }
            let req = b
                .header("accept", "application/json")
                .body(crate::body::empty())
                .unwrap();
            let aimed = aim_whole(&origin, req).unwrap();
            assert_eq!(
                aimed.uri(),
                "http://127.0.0.1:8081/repos/o/r?x=1",
                "{target} {hosts:?}"
            );
            let got: Vec<_> = aimed.headers().get_all(header::HOST).iter().collect();
            assert_eq!(got, [origin.host_header()], "{target} {hosts:?}");
            assert_eq!(aimed.headers()["accept"], "application/json");
            assert_eq!(aimed.version(), http::Version::HTTP_11);
        }
    }

    /// A kept head gives back the request's method, target and every header value in the
    /// request's order (repeated names included), the request is taken once, and the box and
    /// its buffer are reused by the next request, keeping nothing of the last one.
    #[test]
    fn a_kept_head_gives_back_every_header_in_order() {
        let make = || {
            Request::builder()
                .method(Method::GET)
                .uri("http://up.test/repos/o/r?x=1")
                .header("accept", "application/json")
                .header("x-many", "one")
                .header("authorization", "token a")
                .header("x-many", "two")
                .body(crate::body::empty())
                .unwrap()
        };
        let req = make();
        let want_headers = req.headers().clone();
        let mut held = Held::new(req, true);
        let kept = held.kept().expect("kept");
        assert_eq!(kept.method, Method::GET);
        assert_eq!(kept.target(), "/repos/o/r?x=1");
        // Aimed at an origin, the kept target is what the request's own would give.
        for origin in ["http://up.test", "http://other.test:8080"] {
            let origin = Origin::parse(origin).unwrap();
            assert_eq!(
                origin.uri_for(&kept.target()).unwrap(),
                origin
                    .uri_for(&"http://up.test/repos/o/r?x=1".parse().unwrap())
                    .unwrap()
            );
        }
        let map = kept.headers();
        assert_eq!(map, want_headers);
        let got: Vec<_> = map
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect();
        let want: Vec<_> = want_headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect();
        assert_eq!(got, want);
        let first = held.take_first().expect("the request, once");
        assert_eq!(first.headers(), &want_headers);
        assert!(held.take_first().is_none());
        assert!(held.kept().is_some(), "the head stays for a retry");
        let boxed: *const Head = held.kept().unwrap();
        let buffer = held.kept().unwrap().pairs.as_ptr();
        drop(held);
        // The next request reuses the box and its list, and keeps nothing of the last one.
        let other = Request::builder()
            .method(Method::PUT)
            .uri("http://up.test/other")
            .header("accept", "text/plain")
            .body(crate::body::empty())
            .unwrap();
        let other_headers = other.headers().clone();
        let again = Held::new(other, true);
        let head = again.kept().unwrap();
        assert!(std::ptr::eq(head, boxed), "the box was reused");
        assert_eq!(head.pairs.as_ptr(), buffer, "the buffer was reused");
        assert_eq!(head.method, Method::PUT);
        assert_eq!(head.target(), "/other");
        assert_eq!(head.headers(), other_headers);
        drop(again);
        // Not kept: only the request is held.
        let mut bare = Held::new(make(), false);
        assert!(bare.kept().is_none());
        assert!(bare.take_first().is_some());
        assert!(bare.take_first().is_none());
    }
}
