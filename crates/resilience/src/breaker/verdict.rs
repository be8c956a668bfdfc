//! The breaker's decisions as pure functions: given the counts, open or not, and the reason
//! in words a person understands.

use super::config::BreakerConfig;
use super::state::{percent, short_duration};
use crate::window::Tally;

/// Outcomes in one window bucket (and, summed, in the whole window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Calls {
    pub(super) calls: u64,
    pub(super) failures: u64,
    /// Slower than usual (relative rule or absolute cut-off): drives *degraded*.
    pub(super) slow: u64,
    /// Slower than the absolute cut-off: drives the slow-call rate that opens.
    pub(super) too_slow: u64,
}

impl Tally for Calls {
    fn merge(&mut self, other: &Self) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.slow += other.slow;
        self.too_slow += other.too_slow;
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

/// What the closed (or degraded) breaker's counts say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Closed {
    /// The window's tally.
    pub(super) sum: Calls,
    /// Failures in a row.
    pub(super) consecutive: u32,
    /// Lower thresholds are in force.
    pub(super) cautious: bool,
}

/// `Some(reason)` when the closed breaker should open: a run of failures, or the window's
/// rates. The run is checked first (it is what one laptop's traffic produces), then the
/// failure rate (when both rates trip, the failure is the more useful thing to tell a person).
pub(super) fn closed(c: &BreakerConfig, now: Closed) -> Option<String> {
    let run = c.consecutive_failures_for(now.cautious);
    if run > 0 && now.consecutive >= run {
        return Some(format!("{} consecutive failures", now.consecutive));
    }
    let sum = now.sum;
    if sum.calls < u64::from(c.minimum_calls_for(now.cautious)) {
        return None;
    }
    let calls = sum.calls as f64;
    let failure_rate = sum.failures as f64 / calls;
    let slow_rate = sum.too_slow as f64 / calls;
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

/// `Some(health)` when the window holds `degraded_minimum_calls`: *degraded* when its
/// failure or slow rate reaches the degraded threshold, else healthy. `None` when the window
/// says too little either way (the state then stays as it is). This runs on every recorded
/// call, so it only compares numbers; the words ([`Health::reason`]) are written only when
/// the state changes (formatting them every call was ~3 % of a pass-through request).
pub(super) fn degraded(c: &BreakerConfig, sum: Calls) -> Option<Health> {
    if sum.calls < u64::from(c.degraded_minimum_calls) {
        return None;
    }
    let calls = sum.calls as f64;
    Some(if sum.failures as f64 / calls >= c.degraded_failure_rate {
        Health::FailingOften(sum)
    } else if sum.slow as f64 / calls >= c.degraded_slow_rate {
        Health::SlowOften(sum)
    } else {
        Health::Healthy(sum)
    })
}

/// The window's verdict on a closed breaker that stays closed, with the window it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    Healthy(Calls),
    /// Degraded: the failure rate reached `degraded_failure_rate`.
    FailingOften(Calls),
    /// Degraded: the slow rate reached `degraded_slow_rate`.
    SlowOften(Calls),
}

impl Health {
    pub(super) fn is_degraded(self) -> bool {
        !matches!(self, Health::Healthy(_))
    }

    /// The reason shown for this verdict.
    pub(super) fn reason(self, c: &BreakerConfig) -> String {
        let rate = |n: u64, sum: Calls| n as f64 / sum.calls.max(1) as f64;
        match self {
            Health::FailingOften(sum) => format!(
                "failure rate {} ≥ {} over last {} calls",
                percent(rate(sum.failures, sum)),
                percent(c.degraded_failure_rate),
                sum.calls
            ),
            Health::SlowOften(sum) => format!(
                "{} of the last {} calls slower than usual (slow rate {} ≥ {})",
                sum.slow,
                sum.calls,
                percent(rate(sum.slow, sum)),
                percent(c.degraded_slow_rate)
            ),
            Health::Healthy(sum) => format!(
                "failure rate {}, slow rate {} over last {} calls",
                percent(rate(sum.failures, sum)),
                percent(rate(sum.slow, sum)),
                sum.calls
            ),
        }
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
