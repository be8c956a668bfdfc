//! Logs never shrink: the longest `stream` document (a session's log) each caller was given,
//! so that no later answer to that caller (a stale copy, a coalesced refresh, a lagging
//! replica's fresh answer, another key's copy once its account is known) is shorter.
//!
//! Why: `gh agent-task view --log --follow` prints `logs[len(last):]` of each 5 s poll and
//! panics on a shorter answer (cli/cli `pkg/cmd/agent-task/shared/log.go`, `Follow`); VS Code's
//! v2 streamer drops a snapshot that does not start with the one before. Both are answered as
//! long as every answer extends the last one.
//!
//! The rule ([`Served::settle`]): a candidate that extends what the caller was given, or is
//! longer, is served and remembered; a shorter one (or one of the same length that differs) is
//! replaced by the remembered copy, which is an answer the upstream gave too. A log the
//! upstream restarted from scratch is therefore held back until it outgrows the old one.

use super::{CacheKey, Stored};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of remembered logs. Bodies are shared with the cache's entries (`Bytes` are counted
/// references), so this bounds what a remembered copy can keep alive after its entry is gone.
const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// A caller that has not asked for an hour has stopped following.
const IDLE: Duration = Duration::from_secs(3600);

/// What a caller gets for a candidate answer.
#[derive(Debug, Clone)]
pub enum Settled {
    /// The candidate itself (it extends, or outgrows, what the caller was given).
    Candidate,
    /// The longer copy the caller was already given, instead of a shorter candidate.
    Longer(Arc<Stored>),
}

/// Per caller and log (a cache key under the credential's own identity), the longest copy
/// served.
#[derive(Clone)]
pub struct Served {
    longest: moka::sync::Cache<CacheKey, Arc<Stored>>,
}

impl Default for Served {
    fn default() -> Self {
        Served {
            longest: moka::sync::Cache::builder()
                .max_capacity(MAX_BYTES)
                .weigher(|_k: &CacheKey, v: &Arc<Stored>| v.weight())
                .time_to_idle(IDLE)
                .build(),
        }
    }
}

impl Served {
    /// Decides what `key`'s caller gets for `candidate` and remembers what it got.
    pub fn settle(&self, key: CacheKey, candidate: Arc<Stored>) -> Settled {
        if let Some(prev) = self.longest.get(&key) {
            if !extends(&candidate, &prev) {
                return Settled::Longer(prev);
            }
        }
        self.longest.insert(key, candidate);
        Settled::Candidate
    }

    /// Forgets every remembered log (`weir cache clear`).
    pub fn clear(&self) {
        self.longest.invalidate_all();
        self.longest.run_pending_tasks();
    }

    /// The copy `key`'s caller was last given, if any.
    #[cfg(test)]
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Stored>> {
        self.longest.get(key)
    }
}

/// Whether `next` may follow `prev` for a log follower: it starts with it, or is longer.
pub fn extends(next: &Stored, prev: &Stored) -> bool {
    next.body.starts_with(&prev.body) || next.body.len() > prev.body.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::time::Instant;

    fn log(text: &'static str) -> Arc<Stored> {
        let now = Instant::now();
        Arc::new(Stored {
            status: http::StatusCode::OK,
            headers: http::HeaderMap::new(),
            body: Bytes::from_static(text.as_bytes()),
            stored_at: now,
            fresh_until: now,
            revalidate_until: now,
            stale_if_error_until: now,
        })
    }

    #[test]
    fn a_shorter_log_is_replaced_by_the_longer_one_already_served() {
        let s = Served::default();
        let k = CacheKey::from_bytes([1; 32]);
        assert!(matches!(s.settle(k, log("a\n")), Settled::Candidate));
        assert!(matches!(s.settle(k, log("a\nb\n")), Settled::Candidate));
        // A stale (shorter) copy: the longer one instead.
        match s.settle(k, log("a\n")) {
            Settled::Longer(l) => assert_eq!(&l.body[..], b"a\nb\n"),
            other => panic!("{other:?}"),
        }
        // Same length, different bytes: the one served stands.
        assert!(matches!(s.settle(k, log("a\nc\n")), Settled::Longer(_)));
        // Equal: served as it is.
        assert!(matches!(s.settle(k, log("a\nb\n")), Settled::Candidate));
        // Another caller is not held to this one's log.
        let other = CacheKey::from_bytes([2; 32]);
        assert!(matches!(s.settle(other, log("a\n")), Settled::Candidate));
        // A log restarted by the upstream is served once it outgrows the old one.
        assert!(matches!(s.settle(k, log("x\ny\nz\n")), Settled::Candidate));
        assert_eq!(&s.get(&k).unwrap().body[..], b"x\ny\nz\n");
        // Cleared (`weir cache clear`): nothing is held to anymore.
        s.clear();
        assert!(s.get(&k).is_none());
        assert!(matches!(s.settle(k, log("a\n")), Settled::Candidate));
    }
}
