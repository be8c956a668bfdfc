//! The `create` class: each intended create happens exactly once.
//!
//! 1. Duplicates are suppressed: same identity + path + body (or the same `Idempotency-Key`)
//!    as a create in flight joins it; as one that succeeded within the window gets its answer.
//! 2. One attempt goes upstream (creates are not idempotent: never retried in the request;
//!    the fallback, if any, gets one try).
//! 3. If the upstream could not take it (breaker open, cooldown, retryable failure), the create
//!    is committed to SQLite — its credential to the keychain — before Weir answers
//!    `202 Accepted` with `Location: /_weir/api/queue/{id}`. Fatal and auth answers pass through.

use super::{event, now_ms};
use crate::body::Body;
use crate::cache::{CacheKey, Stored};
use crate::config::RouteClass;
use crate::engine::Shared;
use crate::problem::{Problem, ProblemKind};
use crate::proxy::Caller;
use crate::resilience::{call_buffered, Replayable};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;
use weir_resilience::{classify_response, Kind};
use weir_store::{NewItem, StoreError};

pub async fn serve(
    shared: &Arc<Shared>,
    up: usize,
    req: Request<Incoming>,
    who: Caller,
) -> Result<Response<Body>, Problem> {
    let (mut parts, body) = req.into_parts();
    crate::proxy::strip_hop_by_hop(&mut parts.headers);
    let limit = shared.settings.limits.max_body_bytes;
    let body = match Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemKind::BodyTooLarge,
                format!("a create body may be at most {limit} bytes (limits.max_body_bytes)"),
            ))
        }
    };
    let key = dedupe_key(up, &who, &parts.uri, &parts.headers, &body);
    if let Some(first) = shared.recent_creates.get(&key) {
        return Ok(respond(&first, "duplicate-of-recent"));
    }
    let task = CreateTask {
        shared: shared.clone(),
        up,
        key: key.clone(),
        identity: who.identity.hex(),
        uri: parts.uri,
        headers: parts.headers,
        body,
    };
    let (outcome, role) = shared
        .create_flights
        .run(
            CacheKey::from_bytes(*blake3::hash(key.as_bytes()).as_bytes()),
            move || task.run(),
        )
        .await;
    let how = if role == crate::coalesce::Role::Leader {
        "first"
    } else {
        "duplicate-in-flight"
    };
    match outcome {
        Some(Ok(stored)) => Ok(respond(&stored, how)),
        Some(Err(p)) => Err((*p).clone()),
        None => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Internal,
            "the create task ended without an answer",
        )),
    }
}

fn dedupe_key(up: usize, who: &Caller, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&(up as u64).to_le_bytes());
    h.update(who.identity.as_bytes());
    match headers.get("idempotency-key") {
        Some(k) => {
            h.update(b"idempotency-key\0");
            h.update(k.as_bytes());
        }
        None => {
            let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            h.update(&(pq.len() as u64).to_le_bytes());
            h.update(pq.as_bytes());
            h.update(body);
        }
    }
    h.finalize().to_hex().to_string()
}

fn respond(s: &Stored, how: &str) -> Response<Body> {
    let mut r = s.to_response();
    if let Ok(v) = HeaderValue::from_str(how) {
        r.headers_mut().insert("weir-create", v);
    }
    r
}

struct CreateTask {
    shared: Arc<Shared>,
    up: usize,
    key: String,
    identity: String,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl CreateTask {
    async fn run(self) -> Result<Arc<Stored>, Arc<Problem>> {
        let sh = &self.shared;
        if let Some(q) = &sh.queue {
            if let Ok(Some(item)) = q.store.find_by_dedupe_key(&self.key).await {
                if item.state.is_live() {
                    return Ok(accepted(
                        sh,
                        item.id,
                        "an identical create is already queued",
                    ));
                }
            }
        }
        let req = Replayable {
            method: &Method::POST,
            uri: &self.uri,
            headers: &self.headers,
            body: self.body.clone(),
        };
        let (reason, in_doubt) = match call_buffered(sh, self.up, RouteClass::Create, req).await {
            Ok(a) => {
                let (mut parts, body) = a.response.into_parts();
                crate::proxy::strip_hop_by_hop(&mut parts.headers);
                parts.headers.remove(header::CONTENT_LENGTH);
                let kind = classify_response(parts.status, &parts.headers, &body);
                let stored = stored(parts.status, parts.headers, body);
                if kind.is_ok() {
                    sh.recent_creates.insert(self.key.clone(), stored.clone());
                    return Ok(stored);
                }
                if !(kind.is_retryable() || kind == Kind::RateLimited) {
                    // Fatal, auth, policy: the client must see the upstream's own answer.
                    return Ok(stored);
                }
                // 429/503/529 are refusals: nothing was created. A 500/502/504 may come from a
                // gateway after the job was reserved, so that create is looked up first.
                let doubt = matches!(stored.status.as_u16(), 500 | 502 | 504);
                (
                    format!("the upstream answered {} ({kind})", stored.status),
                    doubt,
                )
            }
            Err(p) if p.kind.is_queueable() => (p.detail.clone(), p.maybe_sent),
            Err(p) => return Err(Arc::new(p)),
        };
        self.enqueue(reason, in_doubt).await.map_err(Arc::new)
    }

    async fn enqueue(&self, reason: String, in_doubt: bool) -> Result<Arc<Stored>, Problem> {
        let sh = &self.shared;
        let name = &sh.settings.upstreams[self.up].name;
        let unavailable = |detail: String| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::QueueUnavailable,
                detail,
            )
            .upstream(name)
        };
        let Some(q) = &sh.queue else {
            return Err(unavailable(format!(
                "{reason}, and the create queue could not be opened: {}",
                sh.queue_error.as_deref().unwrap_or("unknown")
            )));
        };
        // The credential goes to the keychain; the row gets only its account name.
        let credential = credential_of(&self.headers);
        let account = format!("queue-{}", &self.key[..24]);
        if let Some(c) = credential.clone() {
            if let Err(e) = q.secrets.put(&account, c).await {
                return Err(unavailable(format!("{reason}. Weir did not queue the create because it cannot keep its credential safely: {e}")));
            }
        }
        let (repo, statement) = describe(&self.uri, &self.body);
        let item = NewItem {
            upstream: name.clone(),
            method: "POST".into(),
            path_and_query: self
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "/".into()),
            headers: replay_headers(&self.headers),
            body: self.body.to_vec(),
            identity: self.identity.clone(),
            credential_ref: credential.map(|_| account.clone()),
            dedupe_key: self.key.clone(),
            repo,
            problem_statement: statement,
            in_doubt,
        };
        match q.store.insert(item, now_ms()).await {
            Ok(item) => {
                sh.emit(event(&item, reason.clone()));
                q.wake.notify_waiters();
                Ok(accepted(sh, item.id, &reason))
            }
            Err(StoreError::Duplicate { existing_id }) => Ok(accepted(
                sh,
                existing_id,
                "an identical create is already queued",
            )),
            Err(e) => {
                q.secrets.delete(&account).await;
                Err(unavailable(format!(
                    "{reason}, and the create could not be stored: {}. {}",
                    e.detail(),
                    e.fix()
                )))
            }
        }
    }
}

fn stored(status: StatusCode, headers: HeaderMap, body: Bytes) -> Arc<Stored> {
    let now = Instant::now();
    Arc::new(Stored {
        status,
        headers,
        body,
        stored_at: now,
        stored_wall: SystemTime::now(),
        fresh_until: now,
        revalidate_until: now,
        stale_if_error_until: now,
    })
}

fn accepted(sh: &Shared, id: i64, reason: &str) -> Arc<Stored> {
    let location = format!("/_weir/api/queue/{id}");
    let body = serde_json::json!({
        "status": "queued",
        "id": id,
        "location": location,
        "reason": reason,
        "detail": format!("Weir stored this create durably and will send it once when the upstream is healthy again. Follow it with GET {}{location}, or `weir queue show {id}`.", sh.base_url),
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, v);
    }
    stored(StatusCode::ACCEPTED, headers, Bytes::from(body.to_string()))
}

/// `Authorization` and `Cookie`, as one JSON string for the keychain.
fn credential_of(h: &HeaderMap) -> Option<String> {
    let auth = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // HTTP/2 clients may split cookies into several headers; the replay needs them all.
    let cookies: Vec<&str> = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let cookie = (!cookies.is_empty()).then(|| cookies.join("; "));
    (auth.is_some() || cookie.is_some())
        .then(|| serde_json::json!({"authorization": auth, "cookie": cookie}).to_string())
}

/// Headers to replay: everything but credentials and connection-level headers.
fn replay_headers(h: &HeaderMap) -> Vec<(String, String)> {
    let mut h = h.clone();
    crate::proxy::strip_hop_by_hop(&mut h);
    for n in [
        header::AUTHORIZATION,
        header::COOKIE,
        header::HOST,
        header::CONTENT_LENGTH,
    ] {
        h.remove(n);
    }
    h.iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// `owner/repo` from `/agents/swe/v1/jobs/{owner}/{repo}` and the body's `problem_statement`.
fn describe(uri: &Uri, body: &[u8]) -> (Option<String>, Option<String>) {
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let repo = (segs.len() >= 6).then(|| format!("{}/{}", segs[4], segs[5]));
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let statement = v
        .get("problem_statement")
        .and_then(|s| s.as_str())
        .map(str::to_string);
    (repo, statement)
}
