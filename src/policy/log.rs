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
            why: d.why.to_string(),
        })
    }

    pub fn push(&self, entry: RecentDecision) {
        self.by_rule.fetch_add(1, Relaxed);
        let mut q = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        // Pushed when its request ends, so a long request's entry can come after a later
        // decision's: kept in the order of the decisions' times.
        let at = q.partition_point(|e| e.at_ms <= entry.at_ms);
        if q.len() >= KEEP {
            if at == 0 {
                return; // older than all the kept ones
            }
            q.pop_front();
            q.insert(at - 1, entry);
        } else {
            q.insert(at, entry);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> RecentDecision {
        RecentDecision {
            at_ms: ms,
            repo: None,
            header: format!("user:1 #{ms}"),
            why: String::new(),
        }
    }

    #[test]
    fn entries_pushed_late_are_kept_in_the_order_they_were_decided() {
        let log = DecisionLog::default();
        for ms in [10, 30, 20] {
            log.push(at(ms));
        }
        let times = |l: &DecisionLog| l.recent().iter().map(|e| e.at_ms).collect::<Vec<_>>();
        assert_eq!(times(&log), [30, 20, 10], "newest first, by decision time");
        for ms in 100..100 + KEEP as u64 {
            log.push(at(ms));
        }
        log.push(at(5)); // older than every kept one: counted, not shown
        log.push(at(110)); // a late one among the kept: in its place, and the oldest goes
        let t = times(&log);
        assert_eq!(t.len(), KEEP);
        assert_eq!(t[0], 119);
        assert_eq!(t.iter().filter(|&&ms| ms == 110).count(), 2, "{t:?}");
        assert!(!t.contains(&100) && !t.contains(&5), "{t:?}");
        assert!(t.windows(2).all(|w| w[0] >= w[1]), "{t:?}");
        assert_eq!(log.count(), 3 + KEEP as u64 + 2);
    }
}
