//! `/_weir/api/queue`: list and show queued creates, cancel and retry them; every call needs the
//! control secret (the rows name repositories and carry problem statements).

use super::Control;
use super::{json, require_secret};
use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use crate::queue::{event, now_ms};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;
use weir_store::{Change, Item, ListFilter, State, StoreError};

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: &Request<Incoming>,
    rest: &str,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, req)?;
    let Some(q) = ctl.proxy.queue.open() else {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::QueueUnavailable,
            ctl.proxy.queue.error().unwrap_or_default().to_string(),
        ));
    };
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match (req.method(), parts.as_slice()) {
        (&Method::GET, []) => {
            let items = q
                .store
                .list(ListFilter {
                    states: Vec::new(),
                    limit: 500,
                })
                .await
                .map_err(store_problem)?;
            let counts = q.store.counts().await.map_err(store_problem)?;
            let mut views = Vec::with_capacity(items.len());
            for item in &items {
                views.push(view_with_hand_off(q.store.as_ref(), item).await);
            }
            Ok(json(&serde_json::json!({"items": views, "counts": counts})))
        }
        (&Method::GET, [id]) => {
            let item = q
                .store
                .get(parse(id)?)
                .await
                .map_err(store_problem)?
                .ok_or_else(|| not_found(id))?;
            Ok(json(&view_with_hand_off(q.store.as_ref(), &item).await))
        }
        (&Method::POST, [id, action @ ("cancel" | "retry")]) => {
            let id = parse(id)?;
            let item = if *action == "cancel" {
                q.store.apply(id, Change::Cancel, now_ms()).await
            } else {
                q.store.apply(id, Change::Retry, now_ms()).await
            }
            .map_err(store_problem)?;
            if *action == "cancel" {
                if let Some(acct) = &item.credential_ref {
                    q.delete_credential(acct).await;
                }
            } else {
                q.wake.notify_waiters();
            }
            ctl.proxy.bus.emit(event(
                &item,
                format!("{action}led by the user").replace("retryled", "retried"),
            ));
            Ok(json(&view(&item)))
        }
        _ => Err(Problem::new(
            StatusCode::NOT_FOUND,
            ProblemKind::NotFound,
            format!(
                "no queue endpoint at {} /_weir/api/queue/{rest}",
                req.method()
            ),
        )),
    }
}

/// [`view`], and for an item parked for the local agent its hand-off record (kept in its own
/// table) under `result` as earlier versions showed it: `handoff`, `running`, `program`,
/// `confirmed_at`, `outcome`, `finished_at` (the dashboard shows the agent's exit code from it).
async fn view_with_hand_off(
    store: &dyn crate::queue::backend::QueueBackend,
    i: &Item,
) -> serde_json::Value {
    let mut v = view(i);
    if !matches!(i.state, State::Offered | State::HandedOff) {
        return v;
    }
    let Ok(Some(r)) = store.hand_off_record(i.id).await else {
        return v;
    };
    let mut result = match v["result"].take() {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    result.insert("handoff".into(), r.offer);
    result.insert("running".into(), r.running.into());
    for (k, val) in [
        ("program", r.program),
        ("confirmed_at", r.confirmed_at),
        ("finished_at", r.finished_at),
    ] {
        if let Some(val) = val {
            result.insert(k.into(), val.into());
        }
    }
    if let Some(o) = r.outcome {
        result.insert("outcome".into(), o);
    }
    v["result"] = result.into();
    v
}

fn view(i: &Item) -> serde_json::Value {
    serde_json::json!({
        "id": i.id, "upstream": i.upstream, "state": i.state.as_str(), "method": i.method.as_str(), "path": i.path_and_query,
        "repo": i.repo, "created_at": i.created_at, "updated_at": i.updated_at, "attempts": i.attempts,
        "next_attempt_at": i.next_attempt_at, "last_error": i.last_error, "result": i.result,
    })
}

fn parse(id: &str) -> Result<i64, Problem> {
    id.parse().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("`{id}` is not a queue item id"),
        )
    })
}

fn not_found(id: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        ProblemKind::NotFound,
        format!("no queued create with id {id}"),
    )
}

fn store_problem(e: StoreError) -> Problem {
    match e {
        StoreError::NotFound { .. } => {
            Problem::new(StatusCode::NOT_FOUND, ProblemKind::NotFound, e.detail())
        }
        StoreError::IllegalTransition { .. } => {
            Problem::new(StatusCode::CONFLICT, ProblemKind::BadRequest, e.detail())
        }
        e => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::QueueUnavailable,
            format!("{}. {}", e.detail(), e.fix()),
        ),
    }
}
