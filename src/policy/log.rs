//! The last decisions made by a rule (not the built-in default), and how many, for status.

use super::{Decision, Source};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::SystemTime;

/// How many recent decisions status shows.
const KEEP: usize = 20;

/// One decision a rule made, as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RecentDecision {
    /// Unix milliseconds.
    pub at_ms: u64,
    pub repo: Option<String>,
    /// `org:1 create=queue`.
    pub header: String,
    pub why: String,
}

/// Recent rule decisions (built-in defaults are not recorded: they are every other request).
#[derive(Debug, Default)]
pub struct DecisionLog {
    recent: Mutex<VecDeque<RecentDecision>>,
    by_rule: AtomicU64,
}

impl DecisionLog {
    /// The log's entry for decision `d` about `repo`, made when it is decided (`None` for
    /// the built-in default); the request's recording phase [`push`](Self::push)es it.
    pub fn entry(d: &Decision, repo: Option<&str>) -> Option<RecentDecision> {
        if d.rule.source == Source::Default {
            return None;
        }
        let at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Some(RecentDecision {
            at_ms,
            repo: repo.map(str::to_string),
            header: d.header(),
            why: d.why.clone(),
        })
    }

    pub fn push(&self, entry: RecentDecision) {
        self.by_rule.fetch_add(1, Relaxed);
        let mut q = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= KEEP {
            q.pop_front();
        }
        q.push_back(entry);
    }

    /// Newest first.
    pub fn recent(&self) -> Vec<RecentDecision> {
        let q = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().rev().cloned().collect()
    }

    /// Decisions made by a rule since start.
    pub fn count(&self) -> u64 {
        self.by_rule.load(Relaxed)
    }
}
