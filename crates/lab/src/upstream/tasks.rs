//! The lab upstream's Task API tasks (VS Code's second cloud-sessions backend, issue #29), in
//! the shapes `tests/corpus/answers.json` gives for `task` and `task_events` (`@vscode/copilot-api`
//! 0.5.2 `types.d.ts`, "Spec: Task"; fields `taskApiBackend.ts` reads).
//!
//! A task has one live turn: `queued` before it, `in_progress` during it, `completed` after.
//! During the turn the agent writes one event every `event_every`, so the events grow page by
//! page (`per_page=100&page=N`, `{events, total}`), and the task's `updated_at` is the moment
//! of the answer, so a client can tell how old its copy is.

use super::world::rfc3339;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Task {
    id: String,
    name: String,
    live_from: Instant,
    live_from_wall: SystemTime,
    live_for: Duration,
    event_every: Duration,
}

/// Every Task API task of the account.
#[derive(Debug, Default)]
pub struct Tasks {
    tasks: Mutex<Vec<Task>>,
}

const REPO_ID: u64 = 4242;

impl Task {
    fn state(&self, now: Instant) -> &'static str {
        if now < self.live_from {
            "queued"
        } else if now < self.live_from + self.live_for {
            "in_progress"
        } else {
            "completed"
        }
    }

    /// Events written by `now`: the turn's `session.start`, then one per `event_every`.
    fn events_at(&self, now: Instant) -> usize {
        if now < self.live_from {
            return 0;
        }
        let ran = now.duration_since(self.live_from).min(self.live_for);
        1 + (ran.as_millis() / self.event_every.as_millis().max(1)) as usize
    }

    fn json(&self, now: Instant) -> serde_json::Value {
        let state = self.state(now);
        let updated = match state {
            "completed" => self.live_from_wall + self.live_for,
            "queued" => self.live_from_wall,
            _ => SystemTime::now(),
        };
        let user = serde_json::json!({ "login": "lab-dev", "id": 7, "node_id": "U_lab7", "url": "https://api.github.com/users/lab-dev" });
        let owner = serde_json::json!({ "login": "octo", "id": 99, "node_id": "O_lab99", "url": "https://api.github.com/users/octo" });
        serde_json::json!({
            "id": self.id,
            "url": format!("https://api.github.com/cmc_internal/api/agents/tasks/{}", self.id),
            "html_url": format!("https://github.com/octo/lab/agents/tasks/{}", self.id),
            "name": self.name,
            "creator": user,
            "creator_type": "user",
            "owner": owner,
            "repository": { "id": REPO_ID },
            "state": state,
            "remote_steerable": true,
            "session_count": 1,
            "artifacts": [],
            "archived_at": null,
            "created_at": rfc3339(self.live_from_wall),
            "updated_at": rfc3339(updated),
            "agent_collaborators": [{ "slug": "copilot-swe-agent" }],
            "sessions": [{
                "id": self.id, "name": self.name, "user": user, "owner": owner,
                "repository": { "id": REPO_ID }, "task_id": self.id, "state": state,
                "created_at": rfc3339(self.live_from_wall), "updated_at": rfc3339(updated),
                "prompt": self.name, "head_ref": "copilot/lab", "base_ref": "main",
            }],
        })
    }

    fn event(&self, i: usize) -> serde_json::Value {
        let id = |i: usize| format!("{}-ev{i:05}", self.id);
        let at = rfc3339(self.live_from_wall + self.event_every * i as u32);
        if i == 0 {
            return serde_json::json!({ "id": id(0), "timestamp": at, "parentId": null, "type": "session.start",
                "data": { "sessionId": self.id, "version": 1, "producer": "copilot-agent", "copilotVersion": "1.0.0", "startTime": at } });
        }
        serde_json::json!({ "id": id(i), "timestamp": at, "parentId": id(i - 1), "type": "assistant.message",
            "data": { "messageId": format!("m-{i}"), "content": format!("step {i}") } })
    }
}

impl Tasks {
    /// Adds a task whose turn starts `starts_in` from now; returns its id.
    pub fn add(
        &self,
        name: &str,
        starts_in: Duration,
        live_for: Duration,
        event_every: Duration,
    ) -> String {
        let mut v = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let n = v.len() + 1;
        let t = Task {
            id: format!("7a5c{n:04}-0000-4000-8000-00000000{n:04}"),
            name: name.to_string(),
            live_from: Instant::now() + starts_in,
            live_from_wall: SystemTime::now() + starts_in,
            live_for,
            event_every,
        };
        let id = t.id.clone();
        v.push(t);
        id
    }

    /// `GET …/tasks/{id}`.
    pub fn task(&self, id: &str) -> Option<String> {
        let v = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|t| t.id == id)
            .map(|t| t.json(Instant::now()).to_string())
    }

    /// `GET …/tasks/{id}/events?per_page=P&page=N`: `{events, total}`.
    pub fn events(&self, id: &str, page: usize, per_page: usize) -> Option<String> {
        let v = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let t = v.iter().find(|t| t.id == id)?;
        let total = t.events_at(Instant::now());
        let from = page.saturating_sub(1) * per_page;
        let events: Vec<serde_json::Value> = (from..total.min(from + per_page))
            .map(|i| t.event(i))
            .collect();
        Some(serde_json::json!({ "events": events, "total": total }).to_string())
    }

    /// `GET …/tasks` or `…/repos/{o}/{r}/tasks`: `{tasks, total_active_count,
    /// total_archived_count}` (every task is the lab account's, in its one repository).
    pub fn list(&self) -> String {
        let now = Instant::now();
        let v = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let tasks: Vec<serde_json::Value> = v.iter().map(|t| t.json(now)).collect();
        let active = v.iter().filter(|t| t.state(now) != "completed").count();
        serde_json::json!({ "tasks": tasks, "total_active_count": active, "total_archived_count": 0 })
            .to_string()
    }

    /// Events written so far (what a client following the turn should end up with).
    pub fn total(&self, id: &str) -> usize {
        let v = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|t| t.id == id)
            .map_or(0, |t| t.events_at(Instant::now()))
    }
}

/// `page` (from 1) and `per_page` of an events query; the Task API's defaults (1, 30) when
/// absent.
pub(crate) fn page_query(query: &str) -> (usize, usize) {
    let (mut page, mut per) = (1, 30);
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "page" => page = v.parse().unwrap_or(1),
            "per_page" => per = v.parse::<usize>().unwrap_or(30).clamp(1, 100),
            _ => {}
        }
    }
    (page.max(1), per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_turn_grows_its_events_page_by_page_and_ends() {
        let t = Tasks::default();
        let ms = Duration::from_millis;
        let id = t.add("turn", ms(100), ms(1000), ms(5));
        let task: serde_json::Value = serde_json::from_str(&t.task(&id).unwrap()).unwrap();
        assert_eq!(task["state"], "queued");
        assert_eq!(task["agent_collaborators"][0]["slug"], "copilot-swe-agent");
        tokio::time::advance(ms(100 + 5 * 150)).await;
        let p1: serde_json::Value = serde_json::from_str(&t.events(&id, 1, 100).unwrap()).unwrap();
        let p2: serde_json::Value = serde_json::from_str(&t.events(&id, 2, 100).unwrap()).unwrap();
        assert_eq!(
            (p1["total"].as_u64(), p2["total"].as_u64()),
            (Some(151), Some(151))
        );
        assert_eq!(p1["events"].as_array().unwrap().len(), 100);
        assert_eq!(p2["events"].as_array().unwrap().len(), 51);
        assert_eq!(p1["events"][0]["type"], "session.start");
        tokio::time::advance(ms(1000)).await;
        let task: serde_json::Value = serde_json::from_str(&t.task(&id).unwrap()).unwrap();
        assert_eq!(task["state"], "completed");
        assert_eq!(t.total(&id), 201);
        assert_eq!(page_query("per_page=100&page=2"), (2, 100));
    }
}
