//! The lab upstream's agent sessions, in the shapes the real clients parse: sessions as gh's
//! `session` struct (cli/cli `pkg/cmd/agent-task/capi/sessions.go` @ 10db389) and VS Code's
//! `SessionInfo` (microsoft/vscode-copilot-chat `src/platform/github/common/githubAPI.ts` @
//! 31acd00), jobs as gh's `Job` (`capi/job.go`) and VS Code's `JobInfo` (`githubService.ts`).
//!
//! A session is `queued`, then `in_progress`, then `completed`, by the age its timing gives; its
//! pull request appears a little after creation; its logs grow one chunk at a time and end with
//! a `finish_reason: "stop"` chunk (what `gh agent-task view --follow` stops on, `shared/log.go`).
//! A running session's `last_updated_at` is the moment of the answer (the agent works on it
//! all the time), so a client can tell how old the copy it got is.

use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// How a created session moves on (lab milliseconds, already scaled by the scenario).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SessionTiming {
    pub queued_ms: u64,
    /// The pull request (and its number) appear this long after creation.
    pub pr_after_ms: u64,
    /// Completed this long after creation.
    pub run_ms: u64,
    /// One log chunk per this long while running.
    pub log_every_ms: u64,
}

impl Default for SessionTiming {
    fn default() -> Self {
        SessionTiming {
            queued_ms: 2_000,
            pr_after_ms: 10_000,
            run_ms: 20 * 60_000,
            log_every_ms: 15_000,
        }
    }
}

#[derive(Debug, Clone)]
struct Session {
    id: String,
    job_id: String,
    name: String,
    problem_statement: String,
    resource_id: u64,
    created: Instant,
    created_wall: SystemTime,
    timing: SessionTiming,
}

/// Every session of the account (one repository, `octo/lab`).
#[derive(Debug, Default)]
pub struct World {
    sessions: Mutex<Vec<Session>>,
}

const REPO_ID: u64 = 4242;
const USER_ID: u64 = 7;

pub(crate) fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

impl Session {
    fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.created)
    }

    fn state(&self, now: Instant) -> &'static str {
        let age = self.age(now).as_millis() as u64;
        if age < self.timing.queued_ms {
            "queued"
        } else if age < self.timing.run_ms {
            "in_progress"
        } else {
            "completed"
        }
    }

    fn has_pr(&self, now: Instant) -> bool {
        self.age(now).as_millis() as u64 >= self.timing.pr_after_ms
    }

    fn json(&self, now: Instant) -> serde_json::Value {
        let state = self.state(now);
        let wall_now = SystemTime::now();
        let done_at = self.created_wall + Duration::from_millis(self.timing.run_ms);
        let updated = if state == "completed" {
            done_at
        } else {
            wall_now
        };
        let pr = self.has_pr(now);
        serde_json::json!({
            "id": self.id,
            "name": self.name,
            "user_id": USER_ID,
            "agent_id": 1,
            "logs": "",
            "logs_blob_id": "",
            "state": state,
            "owner_id": 99,
            "repo_id": REPO_ID,
            "resource_type": if pr { "pull" } else { "" },
            "resource_id": if pr { self.resource_id } else { 0 },
            "resource_global_id": if pr { format!("PR_lab{}", self.resource_id) } else { String::new() },
            "last_updated_at": rfc3339(updated),
            "created_at": rfc3339(self.created_wall),
            "completed_at": if state == "completed" { rfc3339(done_at) } else { "0001-01-01T00:00:00Z".into() },
            "event_url": "",
            "event_type": "visual_studio_code_remote_agent_tool_invoked",
            "workflow_run_id": 0,
            "premium_requests": 1.0,
            "error": null,
        })
    }

    fn job_json(&self, now: Instant) -> serde_json::Value {
        let status = match self.state(now) {
            "queued" => "queued",
            "in_progress" => "running",
            _ => "completed",
        };
        let mut v = serde_json::json!({
            "job_id": self.job_id,
            "session_id": self.id,
            "problem_statement": self.problem_statement,
            "status": status,
            "actor": { "id": USER_ID, "login": "lab-dev" },
            "created_at": rfc3339(self.created_wall),
            "updated_at": rfc3339(SystemTime::now()),
        });
        if self.has_pr(now) {
            v["pull_request"] =
                serde_json::json!({ "id": self.resource_id * 10, "number": self.resource_id });
        }
        v
    }

    fn logs(&self, now: Instant) -> String {
        let age = self.age(now).as_millis() as u64;
        let running = age.saturating_sub(self.timing.queued_ms);
        let chunks = (running.min(self.timing.run_ms) / self.timing.log_every_ms.max(1)) as usize;
        let mut s = String::new();
        for i in 0..chunks {
            s.push_str(&format!(
                "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"delta\":{{\"role\":\"assistant\",\"content\":\"step {i}\"}}}}]}}\n\n"
            ));
        }
        if self.state(now) == "completed" {
            s.push_str("data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"finish_reason\":\"stop\",\"delta\":{\"role\":\"assistant\",\"content\":\"done\"}}]}\n\n");
        }
        s
    }
}

impl World {
    /// Adds a session created `ago` before now (a task already running when the hour starts),
    /// or now; returns its id and job id.
    pub fn add(
        &self,
        problem_statement: &str,
        ago: Duration,
        timing: SessionTiming,
    ) -> (String, String) {
        let mut v = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let n = v.len() as u64 + 1;
        let now = Instant::now();
        let s = Session {
            id: format!("5e55{n:04}-0000-4000-8000-00000000{n:04}"),
            job_id: format!("j0b{n:04}-0000-4000-8000-00000000{n:04}"),
            // The real service names a session after the task's statement.
            name: problem_statement.chars().take(80).collect(),
            problem_statement: problem_statement.to_string(),
            resource_id: 100 + n,
            created: now.checked_sub(ago).unwrap_or(now),
            created_wall: SystemTime::now() - ago,
            timing,
        };
        let ids = (s.id.clone(), s.job_id.clone());
        v.push(s);
        ids
    }

    /// `{"sessions":[…]}`, newest first, one page (`page_number` from 1, `page_size`).
    pub fn list(&self, page_number: usize, page_size: usize) -> String {
        let now = Instant::now();
        let v = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let page: Vec<serde_json::Value> = v
            .iter()
            .rev()
            .skip(page_number.saturating_sub(1) * page_size)
            .take(page_size)
            .map(|s| s.json(now))
            .collect();
        serde_json::json!({ "sessions": page }).to_string()
    }

    pub fn session(&self, id: &str) -> Option<String> {
        let v = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|s| s.id == id)
            .map(|s| s.json(Instant::now()).to_string())
    }

    pub fn logs(&self, id: &str) -> Option<String> {
        let v = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|s| s.id == id)
            .map(|s| s.logs(Instant::now()))
    }

    /// The job by its id, or by its session's id.
    pub fn job(&self, job_id: Option<&str>, session_id: Option<&str>) -> Option<String> {
        let v = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|s| Some(s.job_id.as_str()) == job_id || Some(s.id.as_str()) == session_id)
            .map(|s| s.job_json(Instant::now()).to_string())
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().map(|v| v.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sessions_move_on_and_pages_are_newest_first() {
        let w = World::default();
        let t = SessionTiming {
            queued_ms: 1000,
            pr_after_ms: 2000,
            run_ms: 5000,
            log_every_ms: 1000,
        };
        let (old, _) = w.add("old task", Duration::from_secs(10), t);
        let (new, job) = w.add("new task", Duration::ZERO, t);
        let page: serde_json::Value = serde_json::from_str(&w.list(1, 1)).unwrap();
        assert_eq!(page["sessions"][0]["id"], new.as_str());
        assert_eq!(page["sessions"][0]["state"], "queued");
        let page2: serde_json::Value = serde_json::from_str(&w.list(2, 1)).unwrap();
        assert_eq!(page2["sessions"][0]["id"], old.as_str());
        assert_eq!(page2["sessions"][0]["state"], "completed");
        assert!(w.logs(&old).unwrap().contains("\"finish_reason\":\"stop\""));
        let j: serde_json::Value = serde_json::from_str(&w.job(Some(&job), None).unwrap()).unwrap();
        assert!(j.get("pull_request").is_none());
        tokio::time::advance(Duration::from_millis(2500)).await;
        let j: serde_json::Value = serde_json::from_str(&w.job(None, Some(&new)).unwrap()).unwrap();
        assert_eq!(j["status"], "running");
        assert_eq!(j["pull_request"]["number"], 102);
        assert_eq!(j["problem_statement"], "new task");
        assert!(rfc3339(UNIX_EPOCH + Duration::from_secs(86_400 * 366)).starts_with("1971-01-02T"));
    }
}
