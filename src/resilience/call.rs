//! The one retry layer. Every upstream attempt passes the gate (cooldown → breaker →
//! bulkhead); every outcome is classified and recorded; retryable failures of idempotent
//! requests are retried with exponential backoff and full jitter, within the class deadline
//! and the upstream's retry budget; then, if the upstream has one, the fallback gets one try.

use super::gate::Closed;
use crate::body::{boxed, full, Body};
use crate::config::{Origin, RouteClass};
use crate::engine::Shared;
use crate::problem::{Problem, ProblemKind};
use crate::proxy::fetch_problem;
use crate::upstream::{FetchError, Timeouts};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, Uri};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use weir_resilience::{classify_response, wait_hint, Kind, TimeoutPhase};

/// An upstream response and whether it came from the fallback.
pub struct Attempted<B> {
    pub response: Response<B>,
    pub fallback: Option<String>,
}

/// The parts of a request that can be sent again.
pub struct Replayable<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
}

/// Sends a request whose body is in memory, reading the whole response (cacheable classes).
pub async fn call_buffered(
    shared: &Arc<Shared>,
    up: usize,
    class: RouteClass,
    req: Replayable<'_>,
) -> Result<Attempted<Bytes>, Problem> {
    let limit = shared.settings.limits.max_body_bytes;
    let send = |origin: Origin, t: Timeouts| {
        let r = build(&origin, &req, full(req.body.clone()));
        let client = shared.client.clone();
        async move { client.fetch(r?, t, limit).await }
    };
    run(
        shared,
        up,
        class,
        req.method,
        true,
        send,
        |r: &Response<Bytes>| r.body().clone(),
    )
    .await
}

/// Sends a request and streams the response. Retried only when it has no body to re-send.
pub async fn call_streaming(
    shared: &Arc<Shared>,
    up: usize,
    class: RouteClass,
    req: Request<Body>,
) -> Result<Attempted<Body>, Problem> {
    // Decided from the body itself: headers may already have lost `Transfer-Encoding`.
    if http_body::Body::is_end_stream(req.body()) {
        let (parts, _) = req.into_parts();
        let rep = Replayable {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            body: Bytes::new(),
        };
        let send = |origin: Origin, t: Timeouts| {
            let r = build(&origin, &rep, crate::body::empty());
            let client = shared.client.clone();
            async move { Ok(client.send(r?, t).await?.map(boxed)) }
        };
        return run(shared, up, class, &parts.method, true, send, |_| {
            Bytes::new()
        })
        .await;
    }
    // A streamed body can be sent once: wrap it so the loop's first attempt takes it.
    let (parts, body) = req.into_parts();
    let slot = std::sync::Mutex::new(Some(body));
    let rep = Replayable {
        method: &parts.method,
        uri: &parts.uri,
        headers: &parts.headers,
        body: Bytes::new(),
    };
    let send = |origin: Origin, t: Timeouts| {
        let body = slot
            .lock()
            .ok()
            .and_then(|mut b| b.take())
            .unwrap_or_else(crate::body::empty);
        let r = build(&origin, &rep, body);
        let client = shared.client.clone();
        async move { Ok(client.send(r?, t).await?.map(boxed)) }
    };
    // The body can be sent once: never retried, and the fallback only if it was never sent.
    run(shared, up, class, &parts.method, false, send, |_| {
        Bytes::new()
    })
    .await
}

fn build(origin: &Origin, req: &Replayable<'_>, body: Body) -> Result<Request<Body>, FetchError> {
    let pq = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let uri: Uri = format!("{origin}{pq}")
        .parse()
        .map_err(|e| FetchError::Protocol {
            target: origin.to_string(),
            message: format!("bad URI: {e}"),
        })?;
    let mut r = Request::new(body);
    *r.method_mut() = req.method.clone();
    *r.uri_mut() = uri;
    *r.headers_mut() = req.headers.clone();
    if let Ok(v) = HeaderValue::from_str(&origin.authority()) {
        r.headers_mut().insert(header::HOST, v);
    }
    Ok(r)
}

fn kind_of<B>(res: &Result<Response<B>, FetchError>, body_prefix: &[u8]) -> Kind {
    match res {
        Ok(r) => classify_response(r.status(), r.headers(), body_prefix),
        Err(FetchError::Timeout { phase, .. }) => Kind::Timeout(match phase {
            crate::upstream::TimeoutPhase::Connect => TimeoutPhase::Connect,
            crate::upstream::TimeoutPhase::Headers => TimeoutPhase::Headers,
            crate::upstream::TimeoutPhase::Body => TimeoutPhase::Body,
        }),
        // Neither retryable nor the upstream's ill health: a bad response size or a
        // certificate this install does not trust.
        Err(FetchError::TooLarge { .. } | FetchError::Tls { .. }) => Kind::Fatal,
        Err(_) => Kind::Connection,
    }
}

async fn run<B, F, Fut>(
    shared: &Arc<Shared>,
    up: usize,
    class: RouteClass,
    method: &Method,
    resendable: bool,
    send: F,
    prefix: impl Fn(&Response<B>) -> Bytes,
) -> Result<Attempted<B>, Problem>
where
    F: Fn(Origin, Timeouts) -> Fut,
    Fut: std::future::Future<Output = Result<Response<B>, FetchError>>,
{
    let st = &shared.upstreams[up];
    let (g, counters) = (&st.guard, &st.counters);
    let cfg = &shared.settings.upstreams[up];
    let cs = shared.settings.classes.get(class);
    let deadline = Instant::now() + cs.deadline;
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    ) && resendable;
    // Built on the first retry only: most calls never need it.
    let mut jitter: Option<Box<dyn weir_resilience::Jitter>> = None;
    g.budget.record_request();
    let mut last: Option<(Result<Response<B>, FetchError>, Kind)> = None;
    let mut closed: Option<Closed> = None;
    for attempt in 0u32.. {
        let permit = match g.admit() {
            Ok(p) => p,
            Err(c) => {
                closed = Some(c);
                break;
            }
        };
        let _slot = g.slot().await?;
        let started = Instant::now();
        let per_try = cs
            .per_try_timeout
            .min(deadline.saturating_duration_since(started))
            .max(Duration::from_millis(1));
        counters
            .class(class)
            .upstream_requests
            .fetch_add(1, Relaxed);
        let res = send(
            cfg.origin.clone(),
            Timeouts {
                headers: per_try,
                body: per_try,
            },
        )
        .await;
        let slow = started.elapsed() >= cs.slow_call;
        let pre = res.as_ref().map(&prefix).unwrap_or_default();
        let kind = kind_of(&res, &pre);
        permit.record(kind.counts_as_breaker_failure(), slow);
        if !kind.is_ok() {
            counters.error(class, kind.as_str());
        }
        let hint = res
            .as_ref()
            .ok()
            .and_then(|r| wait_hint(r.headers(), SystemTime::now()));
        if matches!(kind, Kind::RateLimited | Kind::Overloaded) {
            if let Some(w) = hint {
                g.cool_down(w, kind);
            }
        }
        let retryable = kind.is_retryable() || kind == Kind::RateLimited;
        last = Some((res, kind));
        if kind.is_ok() || !retryable {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = g.backoff.delay_with_hint(
            attempt,
            hint,
            jitter.get_or_insert_with(|| g.jitter()).as_mut(),
        );
        if !idempotent
            || wait >= left
            || !kind.retryable_within(hint, left)
            || !g.budget.try_withdraw()
        {
            break;
        }
        tracing::debug!(upstream = %cfg.name, %kind, attempt, ?wait, "retrying");
        tokio::time::sleep(wait).await;
    }

    let primary_failed = closed.is_some()
        || last
            .as_ref()
            .is_some_and(|(_, k)| k.is_retryable() || *k == Kind::RateLimited);
    // A non-idempotent request (a create) goes to the fallback only if the primary certainly
    // did not take it: never sent, or refused outright (429/503/529); a streamed body only if
    // it was never sent at all.
    let never_sent = match &last {
        None => true,
        Some((Err(e), _)) => !e.maybe_sent(),
        Some((Ok(_), _)) => false,
    };
    let refused =
        matches!(&last, Some((Ok(r), _)) if matches!(r.status().as_u16(), 429 | 503 | 529));
    let may_fallback = if idempotent && resendable {
        primary_failed
    } else {
        primary_failed && (never_sent || (refused && resendable))
    };
    if let (Some(fb), true) = (&cfg.fallback, may_fallback) {
        // One bounded attempt at the fallback; never for fatal/auth kinds (not reached then).
        st.fallback_attempts.fetch_add(1, Relaxed);
        let res = send(
            fb.clone(),
            Timeouts {
                headers: cs.per_try_timeout,
                body: cs.per_try_timeout,
            },
        )
        .await;
        let pre = res.as_ref().map(&prefix).unwrap_or_default();
        if let Ok(mut resp) = res {
            if classify_response(resp.status(), resp.headers(), &pre).is_ok() {
                if let Ok(v) = HeaderValue::from_str(&fb.to_string()) {
                    resp.headers_mut().insert("weir-fallback", v);
                }
                return Ok(Attempted {
                    response: resp,
                    fallback: Some(fb.to_string()),
                });
            }
        }
    }
    match (last, closed) {
        (Some((Ok(response), _)), _) => Ok(Attempted {
            response,
            fallback: None,
        }),
        (Some((Err(e), _)), _) => {
            let mut p = fetch_problem(&e)
                .upstream(&cfg.name)
                .breaker(g.breaker.state().as_str());
            p.maybe_sent = e.maybe_sent();
            Err(p)
        }
        (None, Some(c)) => Err(g.problem_for(&c)),
        (None, None) => Err(Problem::new(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Internal,
            "no attempt was made",
        )),
    }
}
