//! The lab upstream's Mission Control (issue #29): the mirror of a local agent session, as
//! `missionControlApiClient.ts` calls it and `tests/corpus/answers.json` `mc_session`,
//! `mc_events` and `mc_commands` answer it. It counts every event id it receives (so a run can
//! tell an event lost or received twice), and hands out one command (a message typed on
//! github.com) every `command_every` after the session was made, listed `in_progress` until
//! its id comes back in a batch's `completed_command_ids`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Default)]
struct State {
    sessions: u64,
    /// When the first session was made (commands are issued from then on).
    started: Option<Instant>,
    /// Event id → times received in an applied batch.
    received: BTreeMap<String, u32>,
    completed: BTreeSet<String>,
    command_every: Option<Duration>,
}

#[derive(Debug, Default)]
pub struct Mirror {
    state: Mutex<State>,
}

impl Mirror {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One command every `every` once a session exists (none unless set).
    pub fn issue_commands_every(&self, every: Duration) {
        self.lock().command_every = Some(every);
    }

    /// `POST /agents/sessions`: `{id, task_id}`.
    pub(crate) fn create(&self, body: &serde_json::Value) -> String {
        let mut s = self.lock();
        s.sessions += 1;
        s.started.get_or_insert_with(Instant::now);
        let task = body
            .get("agent_task_id")
            .and_then(|v| v.as_str())
            .unwrap_or("lab-task");
        serde_json::json!({ "id": format!("mc-session-{}", s.sessions), "task_id": task })
            .to_string()
    }

    /// `POST /agents/sessions/{id}/events` applied: its events and acknowledged commands.
    pub(crate) fn apply(&self, body: &serde_json::Value) {
        let mut s = self.lock();
        for e in body
            .get("events")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(id) = e.get("id").and_then(|v| v.as_str()) {
                *s.received.entry(id.to_string()).or_default() += 1;
            }
        }
        for c in body
            .get("completed_command_ids")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(id) = c.as_str() {
                s.completed.insert(id.to_string());
            }
        }
    }

    /// `GET /agents/sessions/{id}/commands`: every issued command not yet completed.
    pub(crate) fn commands(&self) -> String {
        let s = self.lock();
        let issued = match (s.started, s.command_every) {
            (Some(t0), Some(every)) if !every.is_zero() => {
                (t0.elapsed().as_millis() / every.as_millis()) as usize
            }
            _ => 0,
        };
        let commands: Vec<serde_json::Value> = (1..=issued)
            .map(|k| format!("cmd-{k}"))
            .filter(|id| !s.completed.contains(id))
            .map(|id| serde_json::json!({ "id": id, "content": "Also update the README", "type": "user_message", "state": "in_progress" }))
            .collect();
        serde_json::json!({ "commands": commands }).to_string()
    }

    /// Times each event id was received.
    pub fn received(&self) -> BTreeMap<String, u32> {
        self.lock().received.clone()
    }

    /// Commands acknowledged by the client.
    pub fn completed(&self) -> usize {
        self.lock().completed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn commands_stay_listed_until_completed_and_events_are_counted() {
        let m = Mirror::default();
        m.issue_commands_every(Duration::from_secs(1));
        let made: serde_json::Value =
            serde_json::from_str(&m.create(&serde_json::json!({"agent_task_id": "t-1"}))).unwrap();
        assert_eq!(
            (made["id"].as_str(), made["task_id"].as_str()),
            (Some("mc-session-1"), Some("t-1"))
        );
        assert_eq!(m.commands(), r#"{"commands":[]}"#);
        tokio::time::advance(Duration::from_millis(2100)).await;
        let c: serde_json::Value = serde_json::from_str(&m.commands()).unwrap();
        assert_eq!(c["commands"].as_array().unwrap().len(), 2);
        m.apply(&serde_json::json!({"events": [{"id": "e1"}, {"id": "e2"}], "completed_command_ids": ["cmd-1"]}));
        m.apply(&serde_json::json!({"events": [{"id": "e2"}]}));
        let c: serde_json::Value = serde_json::from_str(&m.commands()).unwrap();
        assert_eq!(c["commands"][0]["id"], "cmd-2");
        assert_eq!(c["commands"].as_array().unwrap().len(), 1);
        assert_eq!(m.received().get("e2"), Some(&2));
        assert_eq!(m.completed(), 1);
    }
}
