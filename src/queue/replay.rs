//! The replay worker: one per upstream, oldest first, one at a time, paced. It sends a queued
//! create only when the upstream's gate admits it (breaker closed, or a half-open probe).
//!
//! **The in-doubt rule.** An item whose replay was in flight when Weir died (or whose attempt
//! timed out after it was sent) is `in_doubt`. Before sending it again Weir lists the
//! repository's sessions upstream (`GET /agents/sessions?repo_nwo=OWNER/REPO` with the item's
//! credential) and looks for a session whose problem statement equals the item's
//! `problem_statement` and whose `created_at` is no earlier than 60 s before the item's last
//! attempt. Found: the item is marked `done` with that session; not found: it is replayed; the
//! list cannot be read: it stays `in_doubt` and is tried later. An in-doubt item without a
//! repository or problem statement cannot be verified, so it is marked `failed` (never
//! replayed blind) and the user can `weir queue retry` it.
//!
//! **Credentials.** An item's keychain entry is deleted when the item is `done` or cancelled,
//! and when a failed or expired item is purged (after [`KEEP_ENDED`]); until then `weir queue
//! retry` can still send it.

use super::{event, now_ms, Queue};
use crate::body::full;
use crate::config::RouteClass;
use crate::engine::Shared;
use crate::upstream::{FetchError, Timeouts};
use http::{header, HeaderValue, Request};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use weir_resilience::{classify_response, Kind};
use weir_store::{Item, State};

const PACE: Duration = Duration::from_millis(200);
/// Failed and expired items (and their credentials) are kept this long for `retry`.
pub const KEEP_ENDED: Duration = Duration::from_secs(7 * 24 * 3600);

pub fn spawn_workers(shared: &Arc<Shared>) {
    if shared.queue.is_none() {
        return;
    }
    for up in 0..shared.upstreams.len() {
        tokio::spawn(worker(shared.clone(), up));
    }
}

async fn worker(sh: Arc<Shared>, up: usize) {
    let Some(q) = &sh.queue else { return };
    let name = sh.settings.upstreams[up].name.clone();
    let mut stop = sh.stopping.subscribe();
    loop {
        if *stop.borrow() {
            return;
        }
        expire(&sh, q).await;
        let wait = match q.store.next_due(&name, now_ms()).await {
            Ok(Some(item)) => replay_one(&sh, q, up, item).await,
            Ok(None) => Duration::from_secs(1),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the create queue");
                Duration::from_secs(5)
            }
        };
        tokio::select! {
            _ = q.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn expire(sh: &Shared, q: &Queue) {
    let max_age = q.max_age.as_millis() as i64;
    if let Ok(items) = q.store.expire_older_than(max_age, now_ms()).await {
        for it in items {
            end(sh, q, &it, "expired: not replayed within the maximum age").await;
        }
    }
    // Purge long-ended items, deleting the credentials they kept for a retry.
    let cutoff = now_ms() - KEEP_ENDED.as_millis() as i64;
    let filter = weir_store::ListFilter {
        states: vec![State::Failed, State::Expired, State::Cancelled, State::Done],
        limit: 200,
    };
    if let Ok(items) = q.store.list(filter).await {
        let old: Vec<_> = items
            .into_iter()
            .filter(|i| i.updated_at < cutoff)
            .collect();
        for it in &old {
            if let Some(acct) = &it.credential_ref {
                q.secrets.delete(acct).await;
            }
        }
        if !old.is_empty() {
            let _ = q.store.purge_ended_before(cutoff).await;
        }
    }
}

/// Announces an item's end state; a `done` item's credential is deleted at once.
async fn end(sh: &Shared, q: &Queue, item: &Item, detail: &str) {
    if item.state == State::Done {
        if let Some(acct) = &item.credential_ref {
            q.secrets.delete(acct).await;
        }
    }
    sh.emit(event(item, detail));
}

/// Tries one item; returns how long to wait before the next.
async fn replay_one(sh: &Arc<Shared>, q: &Queue, up: usize, item: Item) -> Duration {
    let st = &sh.upstreams[up];
    let permit = match st.guard.admit() {
        Ok(p) => p,
        Err(_) => return Duration::from_secs(1),
    };
    let credential = match &item.credential_ref {
        Some(acct) => match q.secrets.get(acct).await {
            Ok(Some(c)) => serde_json::from_str::<serde_json::Value>(&c).unwrap_or_default(),
            Ok(None) | Err(_) => {
                if let Ok(it) = q.store.mark_failed(item.id, "the replay credential is gone (keychain entry missing or Weir restarted with in-memory credentials)", now_ms()).await {
                    end(sh, q, &it, "failed: credential missing").await;
                }
                return PACE;
            }
        },
        None => serde_json::Value::Null,
    };
    if item.state == State::InDoubt || item.needs_lookup {
        match lookup(sh, up, &item, &credential).await {
            Lookup::Found(result) => {
                drop(permit);
                if let Ok(it) = q.store.mark_done(item.id, result, now_ms()).await {
                    end(sh, q, &it, "done: found upstream, not sent again").await;
                }
                return PACE;
            }
            Lookup::Unverifiable => {
                if let Ok(it) = q.store.mark_failed(item.id, "in doubt and cannot be verified upstream (no repository or problem statement); not replayed to avoid a double create — retry it by hand if it did not happen", now_ms()).await {
                    end(sh, q, &it, "failed: in doubt").await;
                }
                return PACE;
            }
            Lookup::Unknown(e) => {
                let _ = q
                    .store
                    .reschedule(
                        item.id,
                        now_ms() + 5_000,
                        &format!("lookup failed: {e}"),
                        now_ms(),
                    )
                    .await;
                return PACE;
            }
            Lookup::NotFound => {}
        }
    }
    let Ok(item) = q.store.mark_replaying(item.id, now_ms()).await else {
        return PACE;
    };
    sh.emit(event(&item, "replaying"));
    let origin = &sh.settings.upstreams[up].origin;
    let mut req = Request::new(full(item.body.clone()));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = match format!("{origin}{}", item.path_and_query).parse() {
        Ok(u) => u,
        Err(e) => {
            if let Ok(it) = q
                .store
                .mark_failed(
                    item.id,
                    &format!("cannot build the replay URL: {e}"),
                    now_ms(),
                )
                .await
            {
                end(sh, q, &it, "failed: bad URL").await;
            }
            return PACE;
        }
    };
    for (k, v) in &item.headers {
        if let (Ok(k), Ok(v)) = (
            header::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            req.headers_mut().append(k, v);
        }
    }
    set_credential(req.headers_mut(), &credential);
    if let Ok(v) = HeaderValue::from_str(&origin.authority()) {
        req.headers_mut().insert(header::HOST, v);
    }
    st.counters
        .class(RouteClass::Create)
        .upstream_requests
        .fetch_add(1, Relaxed);
    let t = sh.settings.classes.get(RouteClass::Create).per_try_timeout;
    let res = sh
        .client
        .fetch(
            req,
            Timeouts {
                headers: t,
                body: t,
            },
            sh.settings.limits.max_body_bytes,
        )
        .await;
    let now = now_ms();
    let backoff =
        1000i64.saturating_mul(1 << item.attempts.min(6)) + rand::random::<i64>().rem_euclid(1000);
    match res {
        Ok(resp) => {
            let kind = classify_response(resp.status(), resp.headers(), resp.body());
            permit.record(kind.counts_as_breaker_failure(), false);
            if kind.is_ok() {
                let result = summarise(resp.status().as_u16(), resp.body());
                if let Ok(it) = q.store.mark_done(item.id, result, now).await {
                    end(sh, q, &it, "done: replayed").await;
                }
            } else if kind.is_retryable() || kind == Kind::RateLimited {
                // The upstream's own wait holds back every surface, replays included.
                if matches!(kind, Kind::RateLimited | Kind::Overloaded) {
                    if let Some(w) =
                        weir_resilience::wait_hint(resp.headers(), std::time::SystemTime::now())
                    {
                        st.guard.cool_down(w, kind);
                    }
                }
                let _ = q
                    .store
                    .reschedule(
                        item.id,
                        now + backoff,
                        &format!("upstream answered {}", resp.status()),
                        now,
                    )
                    .await;
            } else {
                let snippet = String::from_utf8_lossy(&resp.body()[..resp.body().len().min(300)])
                    .into_owned();
                if let Ok(it) = q
                    .store
                    .mark_failed(
                        item.id,
                        &format!("upstream refused it: {} {snippet}", resp.status()),
                        now,
                    )
                    .await
                {
                    end(sh, q, &it, "failed: refused upstream").await;
                }
            }
        }
        Err(e) => {
            // A certificate this install does not trust, or an oversized answer, says nothing
            // about the upstream's health.
            permit.record(
                !matches!(e, FetchError::Tls { .. } | FetchError::TooLarge { .. }),
                false,
            );
            // Not connected: it certainly did not arrive. Anything later may have.
            if matches!(e, FetchError::Connect { .. } | FetchError::Tls { .. }) {
                let _ = q
                    .store
                    .reschedule(item.id, now + backoff, &e.to_string(), now)
                    .await;
            } else if let Ok(it) = q
                .store
                .mark_in_doubt(item.id, now + backoff, &e.to_string(), now)
                .await
            {
                sh.emit(event(
                    &it,
                    "in doubt: the attempt may have reached the upstream",
                ));
            }
        }
    }
    PACE
}

fn set_credential(h: &mut http::HeaderMap, c: &serde_json::Value) {
    for (field, name) in [
        ("authorization", header::AUTHORIZATION),
        ("cookie", header::COOKIE),
    ] {
        if let Some(v) = c
            .get(field)
            .and_then(|v| v.as_str())
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            h.insert(name, v);
        }
    }
}

/// What the upstream said it created: job id, session id, PR when present.
fn summarise(status: u16, body: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let pick = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| v.get(*k).cloned())
            .unwrap_or(serde_json::Value::Null)
    };
    serde_json::json!({
        "status": status,
        "job_id": pick(&["job_id", "id"]),
        "session_id": pick(&["session_id"]),
        "pull_request": pick(&["pull_request", "pr", "pull_request_url"]),
    })
}

enum Lookup {
    Found(serde_json::Value),
    NotFound,
    Unverifiable,
    Unknown(String),
}

async fn lookup(sh: &Shared, up: usize, item: &Item, credential: &serde_json::Value) -> Lookup {
    let (Some(repo), Some(statement)) = (&item.repo, &item.problem_statement) else {
        return Lookup::Unverifiable;
    };
    let origin = &sh.settings.upstreams[up].origin;
    let mut req = Request::new(crate::body::empty());
    *req.uri_mut() =
        match format!("{origin}/agents/sessions?repo_nwo={repo}&sort=created_at").parse() {
            Ok(u) => u,
            Err(e) => return Lookup::Unknown(e.to_string()),
        };
    set_credential(req.headers_mut(), credential);
    let t = Duration::from_secs(15);
    let resp = match sh
        .client
        .fetch(
            req,
            Timeouts {
                headers: t,
                body: t,
            },
            sh.settings.limits.max_body_bytes,
        )
        .await
    {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return Lookup::Unknown(format!("session list answered {}", r.status())),
        Err(e) => return Lookup::Unknown(e.to_string()),
    };
    let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
    let since = item.last_attempt_at.unwrap_or(item.created_at) - 60_000;
    match find_session(&v, statement, since) {
        Some(s) => Lookup::Found(serde_json::json!({"found_by_lookup": true, "session": s})),
        None => Lookup::NotFound,
    }
}

/// Any object in the list whose `problem_statement` (or `name`/`title`/`prompt`) equals the
/// statement and whose `created_at` (RFC 3339 or unix seconds) is at or after `since_ms`.
fn find_session(
    v: &serde_json::Value,
    statement: &str,
    since_ms: i64,
) -> Option<serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_session(x, statement, since_ms)),
        serde_json::Value::Object(o) => {
            let text_matches = ["problem_statement", "name", "title", "prompt"]
                .iter()
                .any(|k| o.get(*k).and_then(|s| s.as_str()) == Some(statement));
            let created = o.get("created_at").and_then(|c| {
                c.as_str()
                    .and_then(crate::time_fmt::parse_rfc3339_ms)
                    .or_else(|| c.as_i64().map(|s| s * 1000))
            });
            if text_matches && created.is_some_and(|c| c >= since_ms) {
                return Some(v.clone());
            }
            o.values()
                .find_map(|x| find_session(x, statement, since_ms))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_matching_recent_session_only() {
        let list = serde_json::json!({"sessions": [
            {"id": "old", "problem_statement": "fix it", "created_at": "2026-11-30T07:00:00Z"},
            {"id": "new", "problem_statement": "fix it", "created_at": "2026-11-30T08:00:00Z"},
        ]});
        let at = crate::time_fmt::parse_rfc3339_ms("2026-11-30T07:59:30Z").unwrap();
        assert_eq!(
            find_session(&list, "fix it", at - 60_000).unwrap()["id"],
            "new"
        );
        assert!(find_session(&list, "other", 0).is_none());
        assert!(find_session(&list, "fix it", at + 3_600_000).is_none());
    }
}
