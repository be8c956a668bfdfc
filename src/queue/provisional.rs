//! Provisional job and session ids (issue 20): a create Weir queued is answered the way the
//! upstream answers a job it queued, with ids Weir owns. This module makes those ids and the
//! job and session objects Weir serves for them while the create waits, in the shapes the
//! real clients decode:
//!
//! - the job: cli/cli `pkg/cmd/agent-task/capi/job.go` `Job` (commit 03faed65), VS Code's
//!   `JobInfo` / `RemoteAgentJobResponse` (microsoft/vscode-copilot-chat
//!   `src/platform/github/common/githubService.ts`, commit 31acd00a);
//! - the session: cli/cli `capi/sessions.go` `session` (commit 10db3894), VS Code's
//!   `SessionInfo` (`githubAPI.ts`, commit 31acd00a).
//!
//! Both clients take ids as opaque strings, but gh's `agent-task view` accepts a session id
//! only in the UUID form (`shared/capi.go` `IsSessionID`). A provisional id is therefore a
//! UUID (RFC 9562 version 8, "custom"), marked `87e1` in its third group, so the request path
//! can tell a candidate from a real id without asking the store; the store has the final say.

use serde_json::{json, Value};
use std::time::{Duration, UNIX_EPOCH};
use weir_store::{Item, Provisional, State};

/// The third group of every provisional id: version 8, then Weir's mark.
const MARK: &str = "87e1";

/// Fresh ids for one queued create (122 random bits each, so they never repeat).
pub(crate) fn new_ids() -> Provisional {
    Provisional {
        job_id: uuid(),
        session_id: uuid(),
    }
}

fn uuid() -> String {
    let b = rand::random::<[u8; 14]>();
    let hex = hex::encode(b);
    // The variant nibble is 8..b (RFC 9562 variant 10xx).
    let variant = ["8", "9", "a", "b"][(b[13] & 3) as usize];
    format!(
        "{}-{}-{MARK}-{variant}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..15],
        &hex[15..27]
    )
}

/// Whether `id` has the form of a provisional id (lowercase UUID with Weir's mark).
pub(crate) fn is_provisional(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && id.get(14..18) == Some(MARK)
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

/// The GitHub account a queued create belongs to, when Weir knows it (`GET /user`).
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub user_id: u64,
    pub login: String,
}

/// Where a queued create is, as its provisional job and session tell it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stage {
    /// Queued, being sent or looked up: the job is `queued`.
    Waiting,
    /// Sent (or found upstream): the real ids, to serve the real job and session under the
    /// provisional ones.
    Done {
        job_id: Option<String>,
        session_id: Option<String>,
    },
    /// It will not be sent: the upstream refused it (its status) or Weir gave up on it.
    Failed {
        status: Option<u16>,
        message: String,
    },
}

pub(crate) fn stage(item: &Item) -> Stage {
    let result = item.result.as_ref();
    match item.state {
        State::Queued | State::Replaying | State::InDoubt | State::Offered => Stage::Waiting,
        State::Done => Stage::Done {
            job_id: result.and_then(|r| r.job_id.clone()),
            session_id: result.and_then(|r| r.session_id.clone()),
        },
        State::HandedOff => Stage::Failed {
            status: None,
            message: "Weir handed this task to your local agent instead of the cloud agent".into(),
        },
        State::Failed => Stage::Failed {
            status: result.and_then(|r| r.status),
            message: result
                .and_then(|r| r.message.clone())
                .or_else(|| item.last_error.clone())
                .unwrap_or_else(|| "the queued create failed".into()),
        },
        State::Cancelled => Stage::Failed {
            status: None,
            message: "the queued create was cancelled in Weir before it was sent".into(),
        },
        State::Expired => Stage::Failed {
            status: None,
            message: "the queued create was not sent within Weir's queue.max_age, so it expired"
                .into(),
        },
    }
}

fn at(ms: i64) -> String {
    crate::time_fmt::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// The body's `event_type` (`gh_cli`, VS Code's `visual_studio_code_remote_agent_tool_invoked`).
fn event_type(item: &Item) -> Option<String> {
    let v: Value = serde_json::from_slice(&item.body).ok()?;
    v.get("event_type")?.as_str().map(str::to_string)
}

/// Weir's own note on the object (both clients ignore fields they do not know).
fn weir_note(item: &Item) -> Value {
    json!({
        "queued": true,
        "queue_id": item.id,
        "state": item.state,
        "location": format!("/_weir/api/queue/{}", item.id),
    })
}

/// The job object for a queued create (the create answer, and `GET …/jobs/{o}/{r}/{job_id}`
/// while it waits). `None` when the item has no provisional ids.
pub(crate) fn job(item: &Item, owner: Option<&Owner>) -> Option<Value> {
    let ids = item.provisional.as_ref()?;
    let mut v = json!({
        "job_id": ids.job_id,
        "session_id": ids.session_id,
        "problem_statement": item.problem_statement.clone().unwrap_or_default(),
        "status": "queued",
        "created_at": at(item.created_at),
        "updated_at": at(item.updated_at),
        "weir": weir_note(item),
    });
    if let Some(e) = event_type(item) {
        v["event_type"] = json!(e);
    }
    if let Some(o) = owner {
        v["actor"] = json!({"id": o.user_id, "login": o.login});
    }
    match stage(item) {
        Stage::Waiting => {}
        // Served only when the real job id is unknown (else the real job is served).
        Stage::Done { session_id, .. } => {
            v["status"] = json!("in_progress");
            if let Some(s) = session_id {
                v["session_id"] = json!(s);
            }
        }
        Stage::Failed { status, message } => {
            v["status"] = json!("failed");
            // gh's JobError: `response_status_code` is a string (`json:",string"`).
            v["error"] = json!({
                "message": message,
                "response_status_code": status.unwrap_or(503).to_string(),
                "service": "weir",
            });
        }
    }
    Some(v)
}

/// Whether `path` is a Task API create (`POST {prefix}/repos/{o}/{r}/tasks`, under VS Code's
/// `/cmc_internal/api/agents` or the public `/agents`): its queued answer is a task.
pub(crate) fn is_task_create(path: &str) -> bool {
    task_repo(path).is_some()
}

/// `owner/repo` of a Task API create's path.
pub(crate) fn task_repo(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["cmc_internal", "api", "agents", "repos", o, r, "tasks"]
        | ["agents", "repos", o, r, "tasks"] => Some(format!("{o}/{r}")),
        _ => None,
    }
}

/// The Task API prefix a task path is under (`/cmc_internal/api/agents` or `/agents`).
pub(crate) fn task_prefix(path: &str) -> &'static str {
    if path.starts_with("/cmc_internal/") {
        "/cmc_internal/api/agents"
    } else {
        "/agents"
    }
}

/// The task object for a queued Task API create (the create's `201` answer, and
/// `GET …/tasks/{id}` while it waits), in the shape of `@vscode/copilot-api` 0.5.2's
/// `AgentTaskGetResponse` ("Spec: Task"). VS Code's `TaskApiHttpClient` needs a JSON body on
/// `201` (a `202` is "an empty response" to its `createTask`) and reads only `id` from it, then
/// `name`, `html_url` and `artifacts` when present. Its list keeps only tasks with an
/// `agent_collaborators` slug `copilot-developer` or `copilot-swe-agent`; the create was for
/// the cloud coding agent, so the provisional task names `copilot-swe-agent`. What the real
/// server puts in `compute` is not known from any source, so it is left out (VS Code never
/// reads it). The id is the item's provisional job id.
pub(crate) fn task(item: &Item, owner: Option<&Owner>) -> Option<Value> {
    let ids = item.provisional.as_ref()?;
    let title = title(item);
    let (state, name) = match stage(item) {
        Stage::Waiting => ("queued", format!("Waiting in Weir's queue: {title}")),
        Stage::Done { .. } => ("in_progress", title.clone()),
        Stage::Failed { .. } => ("failed", format!("Not sent by Weir: {title}")),
    };
    let mut v = json!({
        "id": ids.job_id,
        "name": name,
        "creator_type": "user",
        "state": state,
        "remote_steerable": false,
        "session_count": 0,
        "artifacts": [],
        "archived_at": null,
        "created_at": at(item.created_at),
        "updated_at": at(item.updated_at),
        "agent_collaborators": [{"slug": "copilot-swe-agent"}],
        "sessions": [],
        "weir": weir_note(item),
    });
    if let Some(o) = owner {
        v["creator"] = json!({"id": o.user_id, "login": o.login});
    }
    if let Stage::Failed { status, message } = stage(item) {
        v["weir"]["error"] = json!({"message": message, "status": status});
    }
    Some(v)
}

/// The first non-empty line of the item's problem statement (or prompt), at most 80 chars.
fn title(item: &Item) -> String {
    let title = item
        .problem_statement
        .as_deref()
        .and_then(|s| s.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("task");
    title.chars().take(80).collect()
}

/// The session object for a queued create (`GET /agents/sessions/{id}`), in the real
/// session's shape. `completed_at` is left out, never `""`: gh decodes it as a `time.Time`.
pub(crate) fn session(item: &Item, owner: Option<&Owner>) -> Option<Value> {
    let ids = item.provisional.as_ref()?;
    let title = title(item);
    let (state, name, error) = match stage(item) {
        Stage::Waiting => (
            "queued",
            format!("Waiting in Weir's queue: {title}"),
            Value::Null,
        ),
        Stage::Done { .. } => ("in_progress", title.clone(), Value::Null),
        Stage::Failed { status, message } => (
            "failed",
            format!("Not sent by Weir: {title}"),
            json!({"code": status.map_or("weir_queue".into(), |s| s.to_string()), "message": message}),
        ),
    };
    Some(json!({
        "id": ids.session_id,
        "name": name,
        "user_id": owner.map_or(0, |o| o.user_id),
        "agent_id": 0,
        "logs": "",
        "logs_blob_id": "",
        "state": state,
        "owner_id": 0,
        "repo_id": 0,
        "resource_type": "",
        "resource_id": 0,
        "resource_global_id": "",
        "last_updated_at": at(item.updated_at),
        "created_at": at(item.created_at),
        "event_url": "",
        "event_type": event_type(item).unwrap_or_default(),
        "premium_requests": 0,
        "workflow_run_id": 0,
        "error": error,
        "weir": weir_note(item),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provisional_ids_are_uuids_gh_accepts_and_weir_recognises() {
        // gh's `IsSessionID` (cli/cli pkg/cmd/agent-task/shared/capi.go).
        let gh = |s: &str| {
            let g = [8, 4, 4, 4, 12];
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 5
                && parts
                    .iter()
                    .zip(g)
                    .all(|(p, n)| p.len() == n && p.bytes().all(|c| c.is_ascii_hexdigit()))
        };
        for _ in 0..200 {
            let ids = new_ids();
            for id in [&ids.job_id, &ids.session_id] {
                assert!(gh(id), "{id}");
                assert!(is_provisional(id), "{id}");
            }
            assert_ne!(ids.job_id, ids.session_id);
        }
        // A real (version 4) session id is never taken for a provisional one.
        assert!(!is_provisional("e2fa49d2-f164-4a56-ab99-498090b8fcdf"));
        assert!(!is_provisional("e2fa49d2-f164-87e1-c999-498090b8fcdf"));
        assert!(!is_provisional("E2FA49D2-F164-87E1-A999-498090B8FCDF"));
        assert!(!is_provisional("e2fa49d2-f164-87e1-a999-498090b8fcd"));
    }
}
