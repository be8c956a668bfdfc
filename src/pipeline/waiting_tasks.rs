//! A Task API create that waits in Weir's queue is in the task lists its owner asks for
//! (issue #29). VS Code's Task API backend lists tasks at start-up and every 5 minutes
//! (`GET …/tasks?per_page=100`, `GET …/repos/{o}/{r}/tasks?per_page=100&creator_id=…`, under
//! `/cmc_internal/api/agents` or `/agents`) and shows only what the list holds: a delegated task
//! the list leaves out is missing from its sessions view until it was sent.
//!
//! For a list the upstream (or the cache) answered `200`, the provisional tasks of the caller's
//! account that still wait (queued, being sent, in doubt or offered) for the asked repository
//! (or any, for `…/tasks`) are put first, in the shape the create was answered with
//! (`crate::queue::provisional::task`), and counted in `total_active_count`. A list of archived
//! tasks gets none. Once a create was sent, the real task is the upstream's to list. Only Task
//! API list requests pay for this (one read of the queue's live items, at most 200): they come
//! minutes apart.

use super::context::Answer;
use super::identity::Caller;
use super::provisional::{owner, path_of, same_account};
use crate::accounts::Accounts;
use crate::problem::{Problem, ProblemKind};
use crate::queue::provisional::{self as queued, Stage};
use crate::queue::QueueState;
use http::{header, Method, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use weir_store::{Item, ListFilter, State};

/// A task list answer larger than this is passed as it is (100 tasks are ~100 KiB).
const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// Which tasks a list request asks for: every repository's, or one's (`owner/repo`).
#[derive(Debug, PartialEq, Eq)]
enum Scope {
    Mine,
    Repo(String),
}

fn scope_of(path: &str, query: Option<&str>) -> Option<Scope> {
    // Archived lists (`archived=true`, `is_archived=true`) never hold a waiting task.
    let archived = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "archived=true" | "is_archived=true"))
    });
    if archived {
        return None;
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["cmc_internal", "api", "agents", "tasks"] | ["agents", "tasks"] => Some(Scope::Mine),
        _ => queued::task_repo(path).map(Scope::Repo),
    }
}

/// The waiting Task API creates of `who`'s account that a `GET` of `uri` lists, as tasks.
pub(super) async fn of(
    queue: &QueueState,
    accounts: &Accounts,
    method: &Method,
    uri: &http::Uri,
    who: &Caller,
) -> Vec<Value> {
    if method != Method::GET || !who.credentialed {
        return Vec::new();
    }
    let Some(scope) = scope_of(uri.path(), uri.query()) else {
        return Vec::new();
    };
    let Some(q) = queue.open() else {
        return Vec::new();
    };
    let filter = ListFilter {
        states: vec![
            State::Queued,
            State::Replaying,
            State::InDoubt,
            State::Offered,
        ],
        limit: 200,
    };
    let items = match q.store.list(filter).await {
        Ok(items) => items,
        Err(e) => {
            // The list itself still answers; it only lacks what waits.
            tracing::warn!(error = %e, "cannot read the create queue for a task list");
            return Vec::new();
        }
    };
    pick(&items, &scope, accounts, who)
}

/// The items that `scope`'s list of `who` holds, as tasks (a plain function: the filters'
/// closures stay out of the future).
fn pick(items: &[Item], scope: &Scope, accounts: &Accounts, who: &Caller) -> Vec<Value> {
    items
        .iter()
        .filter(|item| matches!(queued::stage(item), Stage::Waiting))
        .filter(|item| match (scope, queued::task_repo(path_of(item))) {
            (_, None) => false,
            (Scope::Mine, Some(_)) => true,
            (Scope::Repo(asked), Some(theirs)) => asked.eq_ignore_ascii_case(&theirs),
        })
        .filter(|item| same_account(accounts, item, who))
        .filter_map(|item| queued::task(item, owner(accounts, item).as_ref()))
        .collect()
}

/// `answer` with `waiting` put first in its `tasks` (those it already holds, by id, left out),
/// when it is a `200` JSON task list; anything else as it is.
pub(super) async fn listed(answer: Answer, waiting: Vec<Value>) -> Answer {
    let resp = answer?;
    if waiting.is_empty() || resp.status() != StatusCode::OK {
        return Ok(resp);
    }
    let (mut parts, mut body) = resp.into_parts();
    // Read frame by frame, bounded (an answer Weir holds is one frame already).
    let mut bytes = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string());
        let data = match frame {
            Ok(f) => f.into_data().unwrap_or_default(),
            Err(e) => return Err(broke_off(&e)),
        };
        if bytes.len() + data.len() > MAX_LIST_BYTES {
            return Err(broke_off(
                "it is larger than Weir reads to add waiting tasks",
            ));
        }
        bytes.extend_from_slice(&data);
    }
    let bytes = bytes.freeze();
    let Some(merged) = merge(&bytes, waiting) else {
        return Ok(Response::from_parts(parts, crate::body::full(bytes)));
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    // The cache's validators were for the upstream's list, not this one.
    parts.headers.remove(header::ETAG);
    parts.headers.remove(header::LAST_MODIFIED);
    Ok(Response::from_parts(parts, crate::body::full(merged)))
}

fn broke_off(why: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_GATEWAY,
        ProblemKind::UpstreamProtocol,
        format!("the task list could not be read: {why}"),
    )
}

/// The list `body` with `waiting` first; `None` if it is not a task list.
fn merge(body: &[u8], waiting: Vec<Value>) -> Option<Vec<u8>> {
    let mut list: Value = serde_json::from_slice(body).ok()?;
    let tasks = list.get_mut("tasks")?.as_array_mut()?;
    let mut added: Vec<Value> = waiting
        .into_iter()
        .filter(|w| !tasks.iter().any(|t| t.get("id") == w.get("id")))
        .collect();
    let n = added.len() as u64;
    if n == 0 {
        return None;
    }
    added.append(tasks);
    *tasks = added;
    if let Some(total) = list.get_mut("total_active_count") {
        if let Some(t) = total.as_u64() {
            *total = Value::from(t + n);
        }
    }
    serde_json::to_vec(&list).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_known_by_their_path_and_archived_ones_are_left_alone() {
        assert_eq!(
            scope_of("/cmc_internal/api/agents/tasks", Some("per_page=100")),
            Some(Scope::Mine)
        );
        assert_eq!(scope_of("/agents/tasks", None), Some(Scope::Mine));
        assert_eq!(
            scope_of(
                "/cmc_internal/api/agents/repos/octo/app/tasks",
                Some("per_page=100&creator_id=1001")
            ),
            Some(Scope::Repo("octo/app".into()))
        );
        assert_eq!(scope_of("/agents/tasks", Some("archived=true")), None);
        assert_eq!(scope_of("/agents/tasks/abc", None), None);
        assert_eq!(scope_of("/agents/sessions", None), None);
    }

    #[test]
    fn waiting_tasks_come_first_once_and_are_counted() {
        let list = serde_json::json!({
            "tasks": [{"id": "real-1"}], "total_active_count": 1, "total_archived_count": 0
        });
        let body = serde_json::to_vec(&list).unwrap();
        let waiting = vec![
            serde_json::json!({"id": "p-1"}),
            serde_json::json!({"id": "real-1"}),
        ];
        let merged: Value = serde_json::from_slice(&merge(&body, waiting).unwrap()).unwrap();
        assert_eq!(merged["tasks"][0]["id"], "p-1");
        assert_eq!(merged["tasks"][1]["id"], "real-1");
        assert_eq!(merged["tasks"].as_array().unwrap().len(), 2);
        assert_eq!(merged["total_active_count"], 2);
        assert!(merge(b"<html>", vec![serde_json::json!({"id": "p"})]).is_none());
    }
}
