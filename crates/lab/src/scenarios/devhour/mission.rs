//! VS Code's Mission Control mirror of one local agent session (issue #29), as
//! microsoft/vscode `extensions/copilot/src/extension/chatSessions/copilotcli/node/`
//! `missionControlApiClient.ts` @ 68e0989e and `copilotcliSession.ts` @ 00010124 send it (read
//! in /work/research/clients.md §3):
//!
//! - `POST /agents/sessions` once (`{owner_id, repo_id, agent_task_id}`); a failure is shown
//!   to the person (modelled: they run `/remote on` again 30 s later);
//! - a `setInterval` of 500 ms flushes the buffered events with the command ids run since
//!   (`{events, completed_command_ids}`), with no in-flight guard: each tick sends, whether
//!   or not the last POST has answered. A failed batch is put back at the front of the buffer
//!   (unless 2,000 are already buffered: then it is dropped) and its command ids too, so the
//!   next tick sends them again with the same ids. The session here is busy all hour: one
//!   new event per tick;
//! - a `setInterval` of 3 s polls `GET /agents/sessions/{id}/commands`; a failed poll reads
//!   as `[]`. The processed-id set keeps only ids in the latest answer; a listed
//!   `in_progress` command not in it runs (and is acknowledged on the next flush).

use super::clients::{json, Desk, Tool};
use http::Method;
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::{interval, MissedTickBehavior};

#[derive(Default)]
struct Local {
    buffer: VecDeque<serde_json::Value>,
    completed: Vec<String>,
    processed: BTreeSet<String>,
    next: u64,
    parent: Option<String>,
}

impl Local {
    fn push(&mut self, kind: &str, data: serde_json::Value) {
        self.next += 1;
        let id = format!("00000000-0000-4000-8000-{:012}", self.next);
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        self.buffer.push_back(serde_json::json!({
            "id": id, "timestamp": at.to_string(), "parentId": self.parent, "type": kind, "data": data,
        }));
        self.parent = Some(id);
    }
}

/// `/remote on` for the whole hour.
pub async fn mirror(d: Desk) {
    // `agent_task_id`: `${Date.now()}-${random8}`.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let body = serde_json::json!({ "owner_id": 99, "repo_id": 4242, "agent_task_id": format!("{now}-lab00001") }).to_string();
    let session = loop {
        let got = d
            .send(
                "mc session",
                Tool::VsCodeMission,
                Method::POST,
                "/agents/sessions",
                Some(body.clone()),
                |g| {
                    (200..300).contains(&g.status) && json(g).is_some_and(|v| v.get("id").is_some())
                },
            )
            .await;
        if let Some(id) = got
            .as_ref()
            .and_then(json)
            .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(String::from))
        {
            break id;
        }
        if !d.wait(30.0).await {
            return;
        }
    };
    let local = Arc::new(Mutex::new(Local::default()));
    local
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push("session.start", serde_json::json!({ "producer": "copilot-developer-cli", "copilotVersion": "1.0.0", "remoteSteerable": true }));
    let mut flushes = interval(d.sim(0.5));
    let mut polls = interval(d.sim(3.0));
    flushes.set_missed_tick_behavior(MissedTickBehavior::Delay);
    polls.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut inflight = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = flushes.tick() => {
                if d.over() { break; }
                local.lock().unwrap_or_else(|e| e.into_inner())
                    .push("assistant.message", serde_json::json!({ "content": "working" }));
                inflight.spawn(flush(d.clone(), session.clone(), local.clone()));
            }
            _ = polls.tick() => {
                if d.over() { break; }
                inflight.spawn(poll(d.clone(), session.clone(), local.clone()));
            }
            _ = tokio::time::sleep_until(d.end) => break,
        }
        // Reap finished sends so the set stays small.
        while inflight.try_join_next().is_some() {}
    }
    while inflight.join_next().await.is_some() {}
}

/// `_flushMcEvents`: one batch of up to 500 events with the command ids run since the last.
async fn flush(d: Desk, session: String, local: Arc<Mutex<Local>>) {
    let (events, completed) = {
        let mut l = local.lock().unwrap_or_else(|e| e.into_inner());
        let completed = std::mem::take(&mut l.completed);
        let n = l.buffer.len().min(500);
        let events: Vec<serde_json::Value> = l.buffer.drain(..n).collect();
        (events, completed)
    };
    if events.is_empty() && completed.is_empty() {
        return;
    }
    let ids: Vec<String> = events
        .iter()
        .filter_map(|e| e.get("id").and_then(|i| i.as_str()).map(String::from))
        .collect();
    d.tally.mirror(|m| {
        for id in &ids {
            *m.sent.entry(id.clone()).or_default() += 1;
        }
    });
    let mut body = serde_json::json!({ "events": events });
    if !completed.is_empty() {
        body["completed_command_ids"] = serde_json::json!(completed);
    }
    let ok = d
        .send_quiet(
            "mc events",
            Tool::VsCodeMission,
            Method::POST,
            &format!("/agents/sessions/{session}/events"),
            Some(body.to_string()),
            |g| (200..300).contains(&g.status),
        )
        .await
        .is_some();
    if ok {
        d.tally.mirror(|m| m.acked.extend(ids));
        return;
    }
    let mut l = local.lock().unwrap_or_else(|e| e.into_inner());
    let dropped = l.buffer.len() >= 2000;
    if !dropped {
        for e in events.into_iter().rev() {
            l.buffer.push_front(e);
        }
    }
    for c in completed.into_iter().rev() {
        l.completed.insert(0, c);
    }
    drop(l);
    d.tally.mirror(|m| {
        m.batches_resent += u64::from(!dropped);
        m.dropped += if dropped { ids.len() as u64 } else { 0 };
    });
}

/// The commands poll: run each listed `in_progress` command not processed yet.
async fn poll(d: Desk, session: String, local: Arc<Mutex<Local>>) {
    let got = d
        .send_quiet(
            "mc commands",
            Tool::VsCodeMission,
            Method::GET,
            &format!("/agents/sessions/{session}/commands"),
            None,
            |g| g.status == 200 && json(g).is_some(),
        )
        .await;
    // A failed poll reads as `[]`.
    let commands = got
        .as_ref()
        .and_then(json)
        .and_then(|v| v.get("commands").and_then(|c| c.as_array()).cloned())
        .unwrap_or_default();
    let pending: BTreeSet<String> = commands
        .iter()
        .filter_map(|c| c.get("id").and_then(|i| i.as_str()).map(String::from))
        .collect();
    let mut l = local.lock().unwrap_or_else(|e| e.into_inner());
    l.processed.retain(|id| pending.contains(id));
    for c in &commands {
        let (Some(id), Some("in_progress")) = (
            c.get("id").and_then(|i| i.as_str()),
            c.get("state").and_then(|s| s.as_str()),
        ) else {
            continue;
        };
        if l.processed.contains(id) {
            continue;
        }
        l.processed.insert(id.to_string());
        // A `user_message`: sent as a prompt; acknowledged once its `user.message` event is
        // buffered (here at once).
        l.push(
            "user.message",
            serde_json::json!({ "content": c.get("content"), "source": format!("command-{id}") }),
        );
        l.completed.push(id.to_string());
        let id = id.to_string();
        d.tally.mirror(|m| *m.runs.entry(id).or_default() += 1);
    }
}
