//! `/_weir/api/queue`: list and show queued creates, cancel and retry them; every call needs the
//! control secret (the rows name repositories and carry problem statements).

use super::Control;
use super::{json, require_secret};
use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use crate::queue::{event, now_ms};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::collections::HashMap;
use std::sync::Arc;
use weir_store::{Change, HandOffRecord, Item, ListFilter, State, StoreError};

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
            // The parked items' records in one read (a join), not one read per item. Of the
            // newest 500 items, the parked ones are among the newest 500 parked ones.
            // A record that cannot be read is left out, as for a single item.
            let mut records: HashMap<i64, HandOffRecord> = HashMap::new();
            if items.iter().any(is_parked) {
                let parked = ListFilter {
                    states: vec![State::Offered, State::HandedOff],
                    limit: 500,
                };
                match q.store.list_offers(parked).await {
                    Ok(offers) => records.extend(offers.into_iter().map(|(i, r)| (i.id, r))),
                    Err(e) => {
                        tracing::warn!(error = %e, "the queue's hand-off records could not be read")
                    }
                }
            }
            let views: Vec<serde_json::Value> = items
                .iter()
                .map(|item| with_hand_off(item, records.remove(&item.id)))
                .collect();
            Ok(json(&serde_json::json!({"items": views, "counts": counts})))
        }
        (&Method::GET, [id]) => {
            let item = q
                .store
                .get(parse(id)?)
                .await
                .map_err(store_problem)?
                .ok_or_else(|| not_found(id))?;
            let rec = if is_parked(&item) {
                q.store.hand_off_record(item.id).await.ok().flatten()
            } else {
                None
            };
            Ok(json(&with_hand_off(&item, rec)))
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

/// Parked for the local agent: its hand-off record is kept in its own table.
fn is_parked(i: &Item) -> bool {
    matches!(i.state, State::Offered | State::HandedOff)
}

/// The [`view`] of `i`, and for an item parked for the local agent its hand-off record `rec`
/// under `result` as earlier versions showed it: `handoff`, `running`, `program`,
/// `confirmed_at`, `outcome`, `finished_at` (the dashboard shows the agent's exit code from it).
fn with_hand_off(i: &Item, rec: Option<HandOffRecord>) -> serde_json::Value {
    let mut v = view(i);
    let Some(r) = rec.filter(|_| is_parked(i)) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: i64, state: State) -> Item {
        Item {
            id,
            upstream: "copilot-api".into(),
            method: http::Method::POST,
            path_and_query: "/agents/swe/v1/jobs/o/r".into(),
            headers: Vec::new(),
            body: Vec::new(),
            identity: "ab".into(),
            credential_ref: None,
            dedupe_key: format!("k{id}"),
            repo: Some("o/r".into()),
            problem_statement: None,
            state,
            created_at: 1,
            attempts: 0,
            next_attempt_at: 1,
            last_attempt_at: None,
            last_error: None,
            result: None,
            updated_at: 1,
            needs_lookup: false,
            provisional: None,
        }
    }

    fn record(id: i64) -> HandOffRecord {
        HandOffRecord {
            item_id: id,
            offer: serde_json::json!({"rule": "octo-local"}),
            expires_at: 9,
            running: false,
            program: Some("aider".into()),
            confirmed_at: Some("t".into()),
            outcome: Some(serde_json::json!({"exit_code": 0})),
            finished_at: None,
            created_at: 1,
            updated_at: 2,
        }
    }

    /// The list and the single item show the same thing: a parked item's record under
    /// `result`, nothing for an item that is not parked (a record read for an id that moved
    /// on meanwhile is not shown).
    #[test]
    fn a_parked_items_record_is_shown_under_result() {
        let handed = item(1, State::HandedOff);
        let v = with_hand_off(&handed, Some(record(1)));
        assert_eq!(
            v["result"],
            serde_json::json!({"handoff": {"rule": "octo-local"}, "running": false,
                "program": "aider", "confirmed_at": "t", "outcome": {"exit_code": 0}})
        );
        let queued = item(2, State::Queued);
        let v = with_hand_off(&queued, Some(record(2)));
        assert_eq!(v["result"], serde_json::Value::Null);
        let offered = item(3, State::Offered);
        assert_eq!(with_hand_off(&offered, None), view(&offered));
    }
}
