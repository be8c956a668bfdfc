//! The in-doubt lookups' bound (issue #31): during a storm many creates are in doubt at once,
//! and each one's lookup ([`super::lookup`]) reads the repository's session list and the jobs
//! behind the sessions in its window. Unbounded, that is one list and up to 50 job reads per
//! item per try (an outside chaos run counted 831 job reads for 177 creates).
//!
//! Two things bound it, per upstream and credential identity:
//! - **a budget**: at most `[queue] lookup_reads` upstream reads per `[queue] lookup_window`;
//!   a lookup that would need more stops where it is and its item waits for the next window
//!   (it stays in doubt: nothing is sent and nothing is failed, so no create is lost or
//!   doubled by the bound);
//! - **coalescing**: a read already made in the window is not made again. A session list is
//!   reused only by an item whose last attempt (or, never attempted, whose queueing) came
//!   before the read was made, so the list could already show that create: the same moment the
//!   item's own lookup could have read it. A job's `problem_statement` never changes, so a job
//!   read is reused by any item of the credential for [`JOB_KEEP`] (across windows: items
//!   whose statements share a start — gh names a session by its statement's start — try the
//!   same likeliest candidates first, and without it each window would read the same first
//!   job again and never reach the next).
//!
//! Only 2xx JSON answers are kept: a list for its window (no more lists than the budget let be
//! read), at most [`MAX_JOBS`] jobs in all (a moka cache: the least recently used goes first,
//! and a job leaves it [`JOB_KEEP`] after it was read). The state is bounded and pruned as it
//! ages.

use crate::config::UpstreamIndex;
use moka::policy::EvictionPolicy;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Whose reads one budget counts: the upstream and the item's identity (hex).
type Key = (UpstreamIndex, String);

/// How long a job read is reused (a found job's `pull_request` may be this old in the item's
/// result; the statement it is matched by never changes).
pub(crate) const JOB_KEEP: Duration = Duration::from_secs(600);
/// At most this many job reads are kept, over all credentials (the least recently used goes
/// first).
pub(crate) const MAX_JOBS: u64 = 1024;

pub(crate) struct LookupBudget {
    windows: Mutex<HashMap<Key, Window>>,
    /// Job reads: (key, path) → (when read, the job). moka's time-to-live frees the memory;
    /// whether a read may still be used is its own time on tokio's clock, as for the windows
    /// (moka's clock is not tokio's, which tests pause).
    jobs: moka::sync::Cache<(Key, String), (Instant, serde_json::Value)>,
}

impl Default for LookupBudget {
    fn default() -> Self {
        LookupBudget {
            windows: Mutex::default(),
            jobs: moka::sync::Cache::builder()
                .max_capacity(MAX_JOBS)
                .eviction_policy(EvictionPolicy::lru())
                .time_to_live(JOB_KEEP)
                .build(),
        }
    }
}

struct Window {
    started: Instant,
    used: u32,
    /// Reads made in this window: path → (when, unix ms; the JSON answer).
    reads: HashMap<String, (i64, serde_json::Value)>,
}

/// A read the budget refused: wait this long for the next window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exhausted(pub Duration);

impl LookupBudget {
    /// A read of `path` made in this window that an item last attempted at `not_before` (unix
    /// ms) may use; `reusable_always` for an answer that never changes (a job).
    pub fn cached(
        &self,
        key: &Key,
        path: &str,
        not_before: i64,
        reusable_always: bool,
        window: Duration,
    ) -> Option<serde_json::Value> {
        if reusable_always {
            let (at, v) = self.jobs.get(&(key.clone(), path.to_string()))?;
            return (at.elapsed() < JOB_KEEP).then_some(v);
        }
        let mut all = self.windows.lock().ok()?;
        let w = current(&mut all, key, window)?;
        let (at, v) = w.reads.get(path)?;
        (*at >= not_before).then(|| v.clone())
    }

    /// Takes one read from the key's budget, or says how long until the next window.
    pub fn take(&self, key: &Key, reads: u32, window: Duration) -> Result<(), Exhausted> {
        let Ok(mut all) = self.windows.lock() else {
            return Ok(());
        };
        let now = Instant::now();
        // Ended windows go (their reads with them), so the map holds only live ones.
        all.retain(|_, w| now.duration_since(w.started) < window);
        let w = all.entry(key.clone()).or_insert_with(|| Window {
            started: now,
            used: 0,
            reads: HashMap::new(),
        });
        if w.used >= reads {
            return Err(Exhausted(
                window.saturating_sub(now.duration_since(w.started)),
            ));
        }
        w.used += 1;
        Ok(())
    }

    /// Keeps a read's 2xx answer: a job's for [`JOB_KEEP`], any other for the rest of its
    /// window.
    pub fn keep(
        &self,
        key: &Key,
        path: &str,
        at_ms: i64,
        v: &serde_json::Value,
        job: bool,
        window: Duration,
    ) {
        if job {
            self.jobs
                .insert((key.clone(), path.to_string()), (Instant::now(), v.clone()));
            return;
        }
        if let Ok(mut all) = self.windows.lock() {
            if let Some(w) = current(&mut all, key, window) {
                w.reads.insert(path.to_string(), (at_ms, v.clone()));
            }
        }
    }
}

/// The key's window, if it has not ended.
fn current<'a>(
    all: &'a mut HashMap<Key, Window>,
    key: &Key,
    window: Duration,
) -> Option<&'a mut Window> {
    all.get_mut(key).filter(|w| w.started.elapsed() < window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Key {
        (UpstreamIndex::at(0), id.to_string())
    }

    #[tokio::test(start_paused = true)]
    async fn reads_past_the_budget_wait_for_the_next_window() {
        let b = LookupBudget::default();
        let w = Duration::from_secs(10);
        assert_eq!(b.take(&key("a"), 2, w), Ok(()));
        assert_eq!(b.take(&key("a"), 2, w), Ok(()));
        // Another identity has its own budget.
        assert_eq!(b.take(&key("b"), 2, w), Ok(()));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            b.take(&key("a"), 2, w),
            Err(Exhausted(Duration::from_secs(6)))
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(b.take(&key("a"), 2, w), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_is_reused_only_by_items_attempted_before_it_was_read() {
        let b = LookupBudget::default();
        let w = Duration::from_secs(10);
        let k = key("a");
        b.take(&k, 5, w).unwrap();
        let v = serde_json::json!({"sessions": []});
        b.keep(&k, "/list", 1_000, &v, false, w);
        assert_eq!(b.cached(&k, "/list", 900, false, w), Some(v.clone()));
        assert_eq!(
            b.cached(&k, "/list", 1_001, false, w),
            None,
            "read before the attempt"
        );
        assert_eq!(
            b.cached(&key("b"), "/list", 0, false, w),
            None,
            "another identity"
        );
        tokio::time::advance(w).await;
        assert_eq!(b.cached(&k, "/list", 0, false, w), None, "the window ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_is_reused_across_windows_for_a_while_and_few_are_kept() {
        let b = LookupBudget::default();
        let w = Duration::from_secs(10);
        let k = key("a");
        let v = serde_json::json!({"problem_statement": "x"});
        b.keep(&k, "/job/1", 1_000, &v, true, w);
        tokio::time::advance(w * 3).await;
        assert_eq!(b.cached(&k, "/job/1", i64::MAX, true, w), Some(v.clone()));
        assert_eq!(
            b.cached(&key("b"), "/job/1", 0, true, w),
            None,
            "another identity"
        );
        tokio::time::advance(JOB_KEEP).await;
        assert_eq!(b.cached(&k, "/job/1", 0, true, w), None, "too old");
        for i in 0..MAX_JOBS + 5 {
            b.keep(&k, &format!("/job/{i}"), 0, &v, true, w);
        }
        b.jobs.run_pending_tasks();
        assert_eq!(b.jobs.entry_count(), MAX_JOBS);
        // The least recently used went first: the last one kept is there.
        let last = format!("/job/{}", MAX_JOBS + 4);
        assert_eq!(b.cached(&k, &last, 0, true, w), Some(v.clone()));
    }
}
