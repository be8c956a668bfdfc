//! VS Code's Task API live turn (issue #29), as `TaskTurnStreamer` polls it. Source:
//! microsoft/vscode `extensions/copilot/src/extension/chatSessions/vscode-node/taskTurnStreamer.ts`
//! @ 9956757a and `taskApiBackend.ts` (`fetchTaskEvents`), read in /work/research/clients.md §1:
//!
//! - every tick is `Promise.all([GET …/tasks/{id}, every events page])`, then a 2 s wait
//!   (`DEFAULT_POLL_INTERVAL_MS`);
//! - the events are walked from `page=1` (`per_page=100&page=N`) until an empty or short page,
//!   or until the events gathered reach `total`; a failed page ends the walk with what was
//!   gathered and does not count as a failure; events are de-duplicated by id;
//! - a failed get counts towards `MAX_CONSECUTIVE_FETCH_FAILURES = 15`, which ends the turn
//!   (the person sees the turn stop: a failure); a good one resets the count;
//! - the turn ends when the task or its latest session leaves the active states (`queued`,
//!   `in_progress`, `idle`, `waiting_for_user`).
//!
//! Calls go to `{dotcom}/cmc_internal/api/agents` (api.github.com; the lab upstream here).

use super::clients::{age_of, json, ok_json, Desk, Tool};
use http::Method;
use std::collections::BTreeSet;

const PER_PAGE: usize = 100;
const MAX_CONSECUTIVE_FETCH_FAILURES: u32 = 15;

fn active(state: Option<&str>) -> bool {
    matches!(
        state,
        Some("queued") | Some("in_progress") | Some("idle") | Some("waiting_for_user")
    )
}

/// Follows one live turn of task `id` until it ends (or the hour does).
pub async fn follow(d: Desk, id: String) {
    let task_path = format!("/cmc_internal/api/agents/tasks/{id}");
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut failures = 0;
    loop {
        if d.over() {
            break;
        }
        let (task, events) = tokio::join!(
            d.send_quiet(
                "vscode task",
                Tool::VsCodeTasks,
                Method::GET,
                &task_path,
                None,
                ok_json
            ),
            events(&d, &id)
        );
        seen.extend(events);
        match task.as_ref().and_then(json) {
            Some(t) => {
                failures = 0;
                if let Some(age) = age_of(&t) {
                    d.tally.task_stale(age.mul_f64(d.speed));
                }
                let last = t
                    .get("sessions")
                    .and_then(|s| s.as_array())
                    .and_then(|s| s.last())
                    .and_then(|s| s.get("state"))
                    .and_then(|s| s.as_str());
                let state = t.get("state").and_then(|s| s.as_str());
                if !active(state) || (last.is_some() && !active(last)) {
                    break;
                }
            }
            None => {
                failures += 1;
                if failures >= MAX_CONSECUTIVE_FETCH_FAILURES {
                    // The streamer gives up: the turn stops updating in the chat.
                    d.tally.fail("vscode task");
                    break;
                }
            }
        }
        if !d.wait(2.0).await {
            break;
        }
    }
    d.tally.turn_ended(&id, seen.len());
}

/// `fetchTaskEvents`: every page from 1; the event ids gathered (up to a failed page).
async fn events(d: &Desk, id: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for page in 1.. {
        let path =
            format!("/cmc_internal/api/agents/tasks/{id}/events?per_page={PER_PAGE}&page={page}");
        let Some(v) = d
            .send_quiet(
                "vscode task events",
                Tool::VsCodeTasks,
                Method::GET,
                &path,
                None,
                ok_json,
            )
            .await
            .as_ref()
            .and_then(json)
        else {
            break; // logged; the events so far are kept
        };
        let batch = v
            .get("events")
            .and_then(|e| e.as_array())
            .cloned()
            .unwrap_or_default();
        ids.extend(
            batch
                .iter()
                .filter_map(|e| e.get("id").and_then(|i| i.as_str()).map(String::from)),
        );
        let total = v.get("total").and_then(|t| t.as_u64());
        if batch.len() < PER_PAGE || total.is_some_and(|t| ids.len() as u64 >= t) {
            break;
        }
    }
    ids
}
