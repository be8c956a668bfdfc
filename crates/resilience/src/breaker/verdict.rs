//! The breaker's decisions as pure functions: given the counts, open or not, and the reason
//! in words a person understands.

use super::config::BreakerConfig;
use super::state::{percent, short_duration};
use crate::window::Tally;

/// Outcomes in one window bucket (and, summed, in the whole window).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Calls {
    pub(super) calls: u64,
    pub(super) failures: u64,
    pub(super) slow: u64,
}

impl Tally for Calls {
    fn merge(&mut self, other: &Self) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.slow += other.slow;
    }
}

/// Half-open round bookkeeping.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Probes {
    /// Probe permits handed out and not abandoned.
    pub(super) admitted: u32,
    /// Probes that reported an outcome.
    pub(super) done: u32,
    pub(super) failures: u32,
    pub(super) slow: u32,
}

/// What a finished half-open round decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Open(String),
    Close(String),
}

/// `Some(reason)` when the closed window's rates say "open". Failure rate is checked first:
/// when both trip, the failure is the more useful thing to tell a person.
pub(super) fn closed(c: &BreakerConfig, sum: Calls) -> Option<String> {
    if sum.calls < u64::from(c.minimum_calls) {
        return None;
    }
    let calls = sum.calls as f64;
    let failure_rate = sum.failures as f64 / calls;
    let slow_rate = sum.slow as f64 / calls;
    if failure_rate >= c.failure_rate_threshold {
        Some(format!(
            "failure rate {} ≥ {} over last {} calls",
            percent(failure_rate),
            percent(c.failure_rate_threshold),
            sum.calls
        ))
    } else if slow_rate >= c.slow_call_rate_threshold {
        Some(format!(
            "slow-call rate {} ≥ {} over last {} calls{}",
            percent(slow_rate),
            percent(c.slow_call_rate_threshold),
            sum.calls,
            slower_than(c)
        ))
    } else {
        None
    }
}

/// The verdict of a half-open round once every probe has reported (`p.done > 0`).
pub(super) fn half_open(c: &BreakerConfig, p: Probes) -> Verdict {
    let n = f64::from(p.done.max(1));
    let failure_rate = f64::from(p.failures) / n;
    let slow_rate = f64::from(p.slow) / n;
    if failure_rate >= c.failure_rate_threshold {
        return Verdict::Open(format!(
            "{} of {} half-open probes failed (failure rate {} ≥ {})",
            p.failures,
            p.done,
            percent(failure_rate),
            percent(c.failure_rate_threshold)
        ));
    }
    if slow_rate >= c.slow_call_rate_threshold {
        return Verdict::Open(format!(
            "{} of {} half-open probes were slow (slow-call rate {} ≥ {}{})",
            p.slow,
            p.done,
            percent(slow_rate),
            percent(c.slow_call_rate_threshold),
            slower_than(c)
        ));
    }
    // A probe that was both failed and slow is one bad probe, not two.
    let good = p.done.saturating_sub(p.failures.max(p.slow));
    let mut reason = format!("{good} of {} half-open probes succeeded", p.done);
    if good < p.done {
        reason.push_str(&format!(
            " (failure rate {} < {}, slow-call rate {} < {})",
            percent(failure_rate),
            percent(c.failure_rate_threshold),
            percent(slow_rate),
            percent(c.slow_call_rate_threshold)
        ));
    }
    Verdict::Close(reason)
}

fn slower_than(c: &BreakerConfig) -> String {
    c.slow_call_duration
        .map(|d| format!(" (slower than {})", short_duration(d)))
        .unwrap_or_default()
}
