//! The `model` class: completion requests on the Copilot API (`POST /chat/completions`,
//! `/responses`, `/v1/messages`, and their `/v1/` spellings), whose JSON body names a model.
//!
//! Model trouble is not agent-sessions trouble (Oct 28: a model provider failed and another
//! model helped; Oct 29: the sessions control plane failed and no model change could help).
//! So this path never passes the upstream's gate: no agent-sessions breaker, cooldown or
//! bulkhead is asked or fed. Each (upstream, model) has its own breaker
//! ([`crate::upstream::ModelBreakers`]). Not cached, not coalesced, not queued, not retried.
//!
//! 1. The body is read, bounded by `limits.max_body_bytes` (413 beyond), to find `"model"`.
//!    No model named: one plain attempt, no breaker.
//! 2. One attempt with the model's breaker. The response head and, for a success, its first
//!    body bytes are awaited before anything goes to the client.
//! 3. If the model failed — its breaker is open, the upstream answered 500/502/503/504/529
//!    (`server_error`, `overloaded`), no response head came in time, or a success broke off
//!    before its first byte — and a `[[model_fallback]]` rule covers it, and policy allows:
//!    ONE attempt with the body's `"model"` rewritten (nothing else changed), marked
//!    `Weir-Model-Fallback: from -> to`. Not for 4xx or 429 (the request or a quota, not an
//!    outage), nor connection failures (the host, which another model shares).
//! 4. Once a byte has gone to the client it is never retried: a stream that breaks later
//!    reaches the client truncated and counts as a failure of the model's breaker.
//!
//! Episodes (first fallback → the model answers again with its breaker closed) are announced
//! once each way as [`Event::ModelFallback`].

use super::context::Ctx;
use super::forward;
use super::model_body;
use super::model_stream::{first_data, settle, Recorded};
use super::policy::PolicyHandles;
use crate::body::{empty, full, Body};
use crate::config::{RouteClass, Settings, UpstreamIndex};
use crate::events::Bus;
use crate::events::{Event, ModelFallbackChange};
use crate::identity::Identity;
use crate::problem::{Problem, ProblemKind};
use crate::upstream::Upstreams;
use crate::upstream::{fetch_problem, kind_of, EpisodeChange, FetchError, Timeouts};
use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;
use weir_resilience::{classify_response, Breaker, Kind, Rejected, TimeoutPhase};

/// Marks an answer that came from the fallback model: `Weir-Model-Fallback: from -> to`.
pub(super) const FALLBACK_HEADER: &str = "weir-model-fallback";

/// What the model path needs: the upstreams (and their model breakers), the bound on buffered
/// bodies, the bus its fallback episodes are announced on, and the policy that may forbid one.
#[derive(Clone, Copy)]
pub(super) struct ModelHandles<'a> {
    pub upstreams: &'a Arc<Upstreams>,
    pub body_budget: &'a Arc<crate::body_budget::BodyBudget>,
    pub bus: &'a Bus,
    pub policy: PolicyHandles<'a>,
}

pub(super) async fn serve(
    h: ModelHandles<'_>,
    ctx: &Ctx<'_>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let (up, who, settings) = (ctx.up, ctx.who.scope(), &*ctx.settings);
    let (mut parts, body) = req.into_parts();
    forward::prepare_parts(&mut parts)?;
    // Held against the one bound on buffered bodies until the answer is sent.
    let (body, _held) = crate::body_budget::collect(
        h.body_budget,
        body,
        settings.limits.max_body_bytes,
        "a completion request body",
    )
    .await?;
    let upstream = h.upstreams.get(up).settings.name.clone();
    let models = &h.upstreams.models;
    let named = model_body::find(&body);
    let r = &settings.resilience;
    let breaker = named
        .as_ref()
        .and_then(|n| models.breaker(up, &upstream, &n.model, &r.breaker, r.breaker_jitter));
    let Some(named) = named.filter(|_| breaker.is_some()) else {
        // No model named (or a name Weir does not track): one plain attempt, no breaker.
        return match attempt(h, settings, up, &parts, body, None, who).await {
            Outcome::Answer(resp) => Ok(resp),
            Outcome::Failed(f) => f.into_result(&upstream, None),
        };
    };
    let failure = match attempt(h, settings, up, &parts, body.clone(), breaker.as_ref(), who).await
    {
        Outcome::Answer(resp) => {
            if resp.status().is_success() {
                if let Some(end) = models.answered(up, &named.model) {
                    announce(h.bus, ModelFallbackChange::Ended, end);
                }
            }
            return Ok(resp);
        }
        Outcome::Failed(f) => f,
    };
    let rule =
        crate::config::model_fallback_rule(&settings.model_fallback, &upstream, &named.model);
    let Some(rule) = rule.filter(|_| failure.is_models()) else {
        return failure.into_result(&upstream, Some(&named.model));
    };
    // A `[[policy]]` rule can forbid model fallback (`model = "never"`). Completion requests
    // name no repository, so only `repo = "*"` rules apply; the answer names the rule.
    let decision = super::policy::model_fallback_allowed(h.policy, settings, up, None, ctx.seen);
    if !decision.allows_model_fallback() {
        let failed = failure.into_result(&upstream, Some(&named.model));
        return marked(failed, super::policy::HEADER, decision.header());
    }
    let to = rule.to.clone();
    let to_breaker = models.breaker(up, &upstream, &to, &r.breaker, r.breaker_jitter);
    let rewritten = model_body::rewrite(&body, &named, &to);
    let second = attempt(h, settings, up, &parts, rewritten, to_breaker.as_ref(), who).await;
    if let Outcome::Failed(Failure::Open(_)) = second {
        // The fallback model could not even be tried: the first model's failure stands.
        return failure.into_result(&upstream, Some(&named.model));
    }
    let reason = failure.reason();
    tracing::info!(upstream = %upstream, from = %named.model, to = %to, %reason, "model fallback");
    if let Some(start) = models.fell_back(up, &named.model, &to, &reason) {
        announce(h.bus, ModelFallbackChange::Started, start);
    }
    let result = match second {
        Outcome::Answer(resp) => Ok(resp),
        Outcome::Failed(f) => f.into_result(&upstream, Some(&to)),
    };
    marked(
        result,
        FALLBACK_HEADER,
        format!("{} -> {}", named.model, to),
    )
}

/// Marks whatever the answer is with `name: mark` (`Weir-Model-Fallback: from -> to`, or the
/// `Weir-Policy` rule that forbade the fallback).
fn marked(
    result: Result<Response<Body>, Problem>,
    name: &'static str,
    mark: String,
) -> Result<Response<Body>, Problem> {
    match result {
        Ok(mut resp) => {
            if let Ok(v) = HeaderValue::from_str(&mark) {
                resp.headers_mut().insert(name, v);
            }
            Ok(resp)
        }
        Err(mut p) => {
            p.headers.push((name, mark));
            Err(p)
        }
    }
}

/// What one attempt came to.
enum Outcome {
    /// An answer for the client as it is: a success whose first bytes are in hand (streamed
    /// on), or an answer that is not the model's failure (4xx, 429).
    Answer(Response<Body>),
    /// Nothing went to the client; why.
    Failed(Failure),
}

enum Failure {
    /// The model's breaker is open: not sent.
    Open(Rejected),
    /// The upstream answered 5xx/529 (read whole, to pass on if nothing better comes).
    Answered(Kind, Response<Bytes>),
    /// No answer. `model`: the model's failure (no head in time, or a success that broke off
    /// before its first byte) rather than the connection's.
    NoAnswer {
        kind: Kind,
        error: FetchError,
        model: bool,
    },
}

impl Failure {
    /// Whether the model failed (fallback may help), rather than the way to the upstream.
    fn is_models(&self) -> bool {
        match self {
            Failure::Open(_) | Failure::Answered(..) => true,
            Failure::NoAnswer { model, .. } => *model,
        }
    }

    /// In words, for the episode and the log: `overloaded (529)`, `breaker open`, ….
    fn reason(&self) -> String {
        match self {
            Failure::Open(_) => "breaker open".into(),
            Failure::Answered(k, r) => format!("{k} ({})", r.status().as_u16()),
            Failure::NoAnswer { kind, .. } => kind.to_string(),
        }
    }

    fn into_result(self, upstream: &str, model: Option<&str>) -> Result<Response<Body>, Problem> {
        match self {
            Failure::Answered(_, r) => Ok(relay(r.map(full))),
            Failure::Open(rej) => Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::BreakerOpen,
                format!(
                    "the circuit breaker for model {} on {upstream} is {}: {}",
                    model.unwrap_or("?"),
                    rej.state,
                    rej.reason
                ),
            )
            .retry_after(rej.retry_after)
            .breaker(rej.state)
            .upstream(upstream)),
            Failure::NoAnswer { error, .. } => {
                let mut p = fetch_problem(&error).upstream(upstream);
                p.maybe_sent = error.maybe_sent();
                Err(p)
            }
        }
    }
}

/// One attempt: admission by the model's breaker (if any), the exchange, and the wait for
/// the first body bytes of a success. Every outcome is recorded with the breaker: a model
/// failure as a failure, any answer from the model as a success, a connection failure not
/// at all (it is the way to the host, not the model).
async fn attempt(
    h: ModelHandles<'_>,
    settings: &Settings,
    up: UpstreamIndex,
    parts: &Parts,
    body: Bytes,
    breaker: Option<&Breaker>,
    who: Option<Identity>,
) -> Outcome {
    let permit = match breaker {
        Some(b) => match b.try_acquire() {
            Ok(p) => Some(p),
            Err(rej) => return Outcome::Failed(Failure::Open(rej)),
        },
        None => None,
    };
    let per_try = settings.classes.get(RouteClass::Model).per_try_timeout;
    let limit = settings.limits.max_body_bytes;
    let ups = &h.upstreams;
    let counters = &ups.get(up).counters;
    counters
        .class(RouteClass::Model)
        .upstream_requests
        .fetch_add(1, Relaxed);
    if let Some(id) = who.as_ref() {
        ups.accounts.count_upstream(id);
    }
    let t = Timeouts {
        headers: per_try,
        body: per_try,
    };
    let res = ups.client.send(build(parts, body), t).await;
    ups.reach.observe(up, &res);
    let target = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let resp = match res {
        Ok(r) => r,
        Err(error) => {
            let kind = kind_of::<()>(&Err(error.clone()), &[]);
            counters.error(RouteClass::Model, kind.as_str());
            let model = kind == Kind::Timeout(TimeoutPhase::Headers);
            settle(permit, model.then_some(true));
            return Outcome::Failed(Failure::NoAnswer { kind, error, model });
        }
    };
    if resp.status().as_u16() >= 400 {
        // Error answers are small: read whole, so the kind (a 403's wording) is judged right
        // and the answer can be passed on if the fallback does not help.
        let (p, b) = resp.into_parts();
        // Copied frame by frame (`read_whole`): a trickled error body pins no read buffers.
        let bytes = match tokio::time::timeout(per_try, crate::body::read_whole(b, limit)).await {
            Ok(Ok(c)) => c,
            _ => Bytes::new(),
        };
        let kind = classify_response(p.status, &p.headers, &bytes);
        counters.error(RouteClass::Model, kind.as_str());
        if matches!(kind, Kind::Overloaded | Kind::ServerError) {
            settle(permit, Some(true));
            return Outcome::Failed(Failure::Answered(kind, Response::from_parts(p, bytes)));
        }
        settle(permit, Some(false));
        return Outcome::Answer(relay(Response::from_parts(p, full(bytes))));
    }
    let (p, mut b) = resp.into_parts();
    match tokio::time::timeout(per_try, first_data(&mut b)).await {
        Ok(Ok(Some(first))) => {
            let body = Recorded {
                body: crate::body::Prefixed::new(Some(first), b),
                permit,
                upstreams: h.upstreams.clone(),
                up,
            };
            Outcome::Answer(relay(Response::from_parts(p, crate::body::boxed(body))))
        }
        Ok(Ok(None)) => {
            settle(permit, Some(false));
            Outcome::Answer(relay(Response::from_parts(p, empty())))
        }
        Ok(Err(e)) => {
            counters.error(RouteClass::Model, Kind::Connection.as_str());
            settle(permit, Some(true));
            let error = FetchError::Protocol {
                target,
                message: format!("the answer broke off before its first byte: {e}"),
            };
            let kind = Kind::Connection;
            Outcome::Failed(Failure::NoAnswer {
                kind,
                error,
                model: true,
            })
        }
        Err(_) => {
            let kind = Kind::Timeout(TimeoutPhase::Body);
            counters.error(RouteClass::Model, kind.as_str());
            settle(permit, Some(true));
            let error = FetchError::Timeout {
                target,
                phase: crate::upstream::ClientTimeoutPhase::Body,
                after: per_try,
            };
            Outcome::Failed(Failure::NoAnswer {
                kind,
                error,
                model: true,
            })
        }
    }
}

fn build(parts: &Parts, body: Bytes) -> Request<Body> {
    let mut r = Request::new(full(body.clone()));
    *r.method_mut() = parts.method.clone();
    *r.uri_mut() = parts.uri.clone();
    *r.version_mut() = parts.version;
    *r.headers_mut() = parts.headers.clone();
    // The rewritten body may differ in length from the client's.
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    r
}

fn relay(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    super::headers::strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body)
}

fn announce(bus: &Bus, change: ModelFallbackChange, e: EpisodeChange) {
    let message = match change {
        ModelFallbackChange::Started => format!(
            "Model {} is failing on {} ({}): Weir sends its requests to {} for now",
            e.from, e.upstream, e.reason, e.to
        ),
        ModelFallbackChange::Ended => format!(
            "Model {} answers again on {}: back to it after {} request{} sent to {}",
            e.from,
            e.upstream,
            e.fallbacks,
            if e.fallbacks == 1 { "" } else { "s" },
            e.to
        ),
    };
    tracing::warn!(%message, "model fallback episode");
    bus.emit(Event::ModelFallback {
        change,
        upstream: e.upstream,
        from: e.from,
        to: e.to,
        fallbacks: e.fallbacks,
        reason: e.reason,
        message,
        at: SystemTime::now(),
    });
}
