//! How the lab upstream answers one request: rate limit first (a refused call costs the
//! upstream nothing but the count), then the route's delay, then a deliberate failure or the
//! route's body.

use super::spec::{UpstreamCounters, UpstreamSpec};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Shared state of one upstream's request handler.
pub(crate) struct Responder {
    pub spec: UpstreamSpec,
    pub counters: Arc<UpstreamCounters>,
    list_body: Bytes,
    rng: Mutex<StdRng>,
    window: Mutex<(Instant, u32)>,
}

impl Responder {
    pub fn new(spec: UpstreamSpec, counters: Arc<UpstreamCounters>) -> Responder {
        let rng = Mutex::new(StdRng::seed_from_u64(spec.seed));
        let list_body = list_body(spec.list_body_bytes);
        Responder {
            spec,
            counters,
            list_body,
            rng,
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    pub async fn respond(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        self.counters.requests.record();
        if let Some(wait) = self.over_limit() {
            self.counters.rate_limited.fetch_add(1, Relaxed);
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
            let mut resp = json(
                StatusCode::TOO_MANY_REQUESTS,
                Bytes::from_static(body.as_bytes()),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, secs.max(1).into());
            return resp;
        }
        let path = req.uri().path().to_string();
        let route = Route::of(req.method(), &path);
        let delay = match route {
            Route::Token => self.spec.token_latency_ms,
            _ => self.spec.latency_ms,
        };
        let by_repo = req.uri().query().is_some_and(|q| q.contains("repo_nwo="));
        let intent = match route {
            Route::Create => {
                self.counters.create_requests.fetch_add(1, Relaxed);
                Some(read_intent(req.into_body()).await)
            }
            _ => None,
        };
        if route == Route::Token {
            self.counters.token_requests.fetch_add(1, Relaxed);
        }
        // A zero sleep would still wait for the next timer tick (about 1 ms).
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let (fail, after_work) = self.draw_failure();
        if let Some((intent, statement)) = &intent {
            // A 504 comes after the session was made: the client cannot tell it from a 500,
            // which is how a "create again" doubles a session.
            if !fail || after_work {
                self.counters.created(intent, statement);
            }
        }
        let resp = if fail {
            self.counters.failed.fetch_add(1, Relaxed);
            if after_work {
                json(
                    StatusCode::GATEWAY_TIMEOUT,
                    Bytes::from_static(
                        br#"{"message":"We couldn't respond to your request in time."}"#,
                    ),
                )
            } else {
                json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Bytes::from_static(br#"{"message":"Server Error"}"#),
                )
            }
        } else {
            match route {
                Route::List if by_repo => {
                    json(StatusCode::OK, Bytes::from(self.counters.sessions_json()))
                }
                Route::List => json(StatusCode::OK, self.list_body.clone()),
                Route::Token => json(StatusCode::OK, self.token_body()),
                Route::Create => json(
                    StatusCode::CREATED,
                    created_body(intent.as_ref().map(|i| i.0.as_str()).unwrap_or("")),
                ),
                Route::Other => json(StatusCode::OK, Bytes::from_static(br#"{"ok":true}"#)),
            }
        };
        self.counters.answered(Instant::now());
        resp
    }

    /// `Some(wait)` when the rate limit refuses this request.
    fn over_limit(&self) -> Option<Duration> {
        let rl = self.spec.rate_limit?;
        let window = Duration::from_millis(rl.window_ms.max(1));
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(w.0) >= window {
            *w = (now, 0);
        }
        if w.1 >= rl.limit {
            return Some(window.saturating_sub(now.duration_since(w.0)));
        }
        w.1 += 1;
        None
    }

    /// (fail this request, and if it fails, did the work happen anyway).
    fn draw_failure(&self) -> (bool, bool) {
        if self.counters.outage.load(Relaxed) {
            return (true, false); // a hard outage: every call fails with 500 before any work
        }
        if self.spec.failure_rate <= 0.0 {
            return (false, false);
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        (
            rng.gen_bool(self.spec.failure_rate.min(1.0)),
            rng.gen_bool(0.5),
        )
    }

    fn token_body(&self) -> Bytes {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let n = self.counters.token_requests.load(Relaxed);
        let exp = now + self.spec.token_expires_in_s;
        Bytes::from(format!(
            r#"{{"token":"tid=lab{n};exp={exp};sku=copilot_for_business","expires_at":{exp},"refresh_in":{}}}"#,
            self.spec.token_refresh_in_s
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    List,
    Token,
    Create,
    Other,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        if path.starts_with("/copilot_internal/v2/token") {
            Route::Token
        } else if method == Method::POST && path.starts_with("/agents/swe/v1/jobs/") {
            Route::Create
        } else if method == Method::GET && path.starts_with("/agents/sessions") {
            Route::List
        } else {
            Route::Other
        }
    }
}

/// The `intent` and `problem_statement` fields of a create body; empty if missing.
async fn read_intent(body: Incoming) -> (String, String) {
    let Ok(collected) = Limited::new(body, 64 * 1024).collect().await else {
        return (String::new(), String::new());
    };
    let v: serde_json::Value = serde_json::from_slice(&collected.to_bytes()).unwrap_or_default();
    let field = |k: &str| {
        v.get(k)
            .and_then(|i| i.as_str())
            .unwrap_or_default()
            .to_string()
    };
    (field("intent"), field("problem_statement"))
}

fn created_body(intent: &str) -> Bytes {
    let v = serde_json::json!({ "job_id": format!("job-{intent}"), "session_id": format!("s-{intent}"), "intent": intent });
    Bytes::from(v.to_string())
}

/// A session list of about `size` bytes (the real one is a few KB of JSON).
fn list_body(size: usize) -> Bytes {
    let mut s = String::from(r#"{"sessions":["#);
    let mut i = 0;
    while s.len() + 80 < size {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id":"s{i:06}","state":"in_progress","repo":"octo/lab","name":"task {i}"}}"#
        ));
        i += 1;
    }
    s.push_str("]}");
    Bytes::from(s)
}

fn json(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_bodies() {
        assert_eq!(Route::of(&Method::GET, "/agents/sessions"), Route::List);
        assert_eq!(
            Route::of(&Method::POST, "/agents/swe/v1/jobs/o/r"),
            Route::Create
        );
        assert_eq!(
            Route::of(&Method::GET, "/copilot_internal/v2/token"),
            Route::Token
        );
        assert_eq!(Route::of(&Method::GET, "/repos/o/r"), Route::Other);
        let b = list_body(1024);
        assert!(b.len() <= 1024 && b.len() > 900, "{}", b.len());
        assert!(serde_json::from_slice::<serde_json::Value>(&b).is_ok());
    }
}
