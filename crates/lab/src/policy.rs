//! How a simulated client reissues a request that has not answered within its timeout. In
//! every policy the earlier attempts stay open (the bug under study: nothing is cancelled), and
//! the first answer from any attempt completes the logical request.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Gaps never grow beyond this, whatever the attempt count.
const MAX_GAP: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Policy {
    /// Reissue every `timeout_ms` until some attempt answers.
    Reissue { timeout_ms: u64 },
    /// Reissue after `timeout_ms`, then after gaps that double (`2·timeout`, `4·timeout`, …),
    /// each stretched by a random `0..jitter` fraction (0.25 = up to +25 %).
    Backoff { timeout_ms: u64, jitter: f64 },
    /// Reissue after `timeout_ms` only by spending a token of the client's own retry budget.
    /// An attempt answered within the timeout earns `ratio` of a token (capped at
    /// `max_tokens`); a new client holds none. Timeouts earn nothing, so a client whose calls
    /// all time out cannot retry at all.
    Budget {
        timeout_ms: u64,
        ratio: f64,
        max_tokens: f64,
    },
}

impl Policy {
    pub fn timeout(&self) -> Duration {
        let ms = match *self {
            Policy::Reissue { timeout_ms }
            | Policy::Backoff { timeout_ms, .. }
            | Policy::Budget { timeout_ms, .. } => timeout_ms,
        };
        Duration::from_millis(ms)
    }

    /// How long to wait, after `sent` attempts, before the next one. `u` is a uniform draw in
    /// `[0, 1)` (pass 0 for no jitter).
    pub fn gap(&self, sent: u32, u: f64) -> Duration {
        match *self {
            Policy::Reissue { .. } | Policy::Budget { .. } => self.timeout(),
            Policy::Backoff { jitter, .. } => {
                let doublings = sent.saturating_sub(1).min(16);
                let base = self.timeout().saturating_mul(1 << doublings).min(MAX_GAP);
                base.mul_f64(1.0 + jitter.clamp(0.0, 1.0) * u.clamp(0.0, 1.0))
            }
        }
    }
}

/// A client's own retry-budget balance (only [`Policy::Budget`] uses it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    tokens: f64,
}

impl Budget {
    /// Whether the policy lets this client reissue now; spends a token if it does.
    pub fn try_reissue(&mut self, policy: &Policy) -> bool {
        match policy {
            Policy::Budget { .. } if self.tokens >= 1.0 => {
                self.tokens -= 1.0;
                true
            }
            Policy::Budget { .. } => false,
            _ => true,
        }
    }

    /// An attempt answered successfully after `took`.
    pub fn answered(&mut self, policy: &Policy, took: Duration) {
        if let Policy::Budget {
            ratio, max_tokens, ..
        } = *policy
        {
            if took <= policy.timeout() {
                self.tokens = (self.tokens + ratio).min(max_tokens);
            }
        }
    }

    pub fn tokens(&self) -> f64 {
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempt start times within `window` for a request that never answers.
    fn attempts_within(p: Policy, window: Duration) -> usize {
        let (mut t, mut sent) = (Duration::ZERO, 0u32);
        while t < window {
            sent += 1;
            t += p.gap(sent, 0.0);
        }
        sent as usize
    }

    #[test]
    fn the_published_attempt_counts() {
        let w = Duration::from_millis(500);
        assert_eq!(attempts_within(Policy::Reissue { timeout_ms: 50 }, w), 10);
        assert_eq!(attempts_within(Policy::Reissue { timeout_ms: 1000 }, w), 1);
        assert_eq!(
            attempts_within(
                Policy::Backoff {
                    timeout_ms: 50,
                    jitter: 0.0
                },
                w
            ),
            4
        );
        // Even the largest jitter keeps the fourth attempt inside and the fifth outside.
        let p = Policy::Backoff {
            timeout_ms: 50,
            jitter: 0.25,
        };
        let starts: Vec<Duration> = (1..=4)
            .scan(Duration::ZERO, |t, n| {
                *t += p.gap(n, 0.999);
                Some(*t)
            })
            .collect();
        assert!(starts[2] < w && starts[3] > w, "{starts:?}");
    }

    #[test]
    fn budget_is_earned_by_timely_answers_only() {
        let p = Policy::Budget {
            timeout_ms: 50,
            ratio: 0.5,
            max_tokens: 1.0,
        };
        let mut b = Budget::default();
        assert!(!b.try_reissue(&p));
        b.answered(&p, Duration::from_millis(500));
        assert!(!b.try_reissue(&p));
        b.answered(&p, Duration::from_millis(10));
        b.answered(&p, Duration::from_millis(10));
        b.answered(&p, Duration::from_millis(10));
        assert_eq!(b.tokens(), 1.0);
        assert!(b.try_reissue(&p));
        assert!(!b.try_reissue(&p));
        assert!(Budget::default().try_reissue(&Policy::Reissue { timeout_ms: 50 }));
    }
}
