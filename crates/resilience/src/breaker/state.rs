//! The breaker's public vocabulary: its [`State`], the [`BreakerSnapshot`] the dashboard
//! shows, the [`BreakerEvent`] sent on every transition, and the [`Rejected`] error.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::baseline::ClassLatency;
use super::reason::Reason;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Calls flow; outcomes are counted.
    Closed,
    /// Calls flow, but recent ones failed or were slow more than usual (not enough to open).
    Degraded,
    /// Calls are rejected until the wait ends.
    Open,
    /// A fixed number of probe calls decide whether to close or reopen.
    HalfOpen,
}

impl State {
    /// Stable snake_case name (`closed`, `degraded`, `open`, `half_open`).
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Degraded => "degraded",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A point-in-time view of a breaker, for the dashboard and `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerSnapshot {
    /// The breaker's name (usually the upstream).
    pub name: String,
    /// Current state.
    pub state: State,
    /// Wall-clock time of the last transition (creation if none yet).
    pub since: SystemTime,
    /// Why it is in this state (`Display`: in words; serialised as the words).
    pub reason: Reason,
    /// Consecutive openings that drive the growing wait; back to 0 once the breaker has
    /// stayed closed for `reset_growth_after`.
    pub open_count: u32,
    /// Openings since the breaker was created.
    pub opens_total: u64,
    /// Failure rate (0.0–1.0) over the window, or over the probes while half-open.
    pub failure_rate: f64,
    /// Slow-call rate (0.0–1.0), same basis as `failure_rate`.
    pub slow_rate: f64,
    /// Calls the rates are computed from.
    pub calls_in_window: u64,
    /// While open: how long until probes are allowed.
    pub retry_after: Option<Duration>,
    /// Failures in a row right now (reset by any success).
    pub consecutive_failures: u32,
    /// Failures in a row that open the breaker now (0 = that trigger is off); lower while
    /// cautious.
    pub consecutive_threshold: u32,
    /// Calls the window needs before its rates can open the breaker now; lower while cautious.
    pub minimum_calls: u32,
    /// Why the breaker is cautious (lower thresholds), if it is.
    pub caution: Option<String>,
    /// Per request class: the latency baseline behind "slow".
    pub latency: Vec<ClassLatency>,
}

/// Sent on the breaker's broadcast channel at every state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerEvent {
    /// The breaker's name.
    pub breaker: String,
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// Wall-clock time of the change.
    pub at: SystemTime,
    /// Why: the kind of transition, and its words (e.g. "failure rate 62% ≥ 50% over last 20
    /// calls; rejecting calls for 5s").
    pub reason: Reason,
}

/// A call refused by the breaker.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("circuit breaker `{breaker}` is {state}: {reason} (retry in {}s)", retry_after.as_secs_f64().ceil())]
pub struct Rejected {
    /// The breaker's name.
    pub breaker: String,
    /// `Open`, or `HalfOpen` with all probe slots taken.
    pub state: State,
    /// How long until a call might be let through.
    pub retry_after: Duration,
    /// Why the breaker is not closed.
    pub reason: Reason,
}

/// Formats a 0.0–1.0 rate as a whole percentage for reasons.
pub(crate) fn percent(rate: f64) -> String {
    format!("{}%", (rate * 100.0).round() as i64)
}

/// Formats a duration compactly for reasons ("2s", "1.5s", "250ms").
pub(crate) fn short_duration(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_serialises_snake_case() {
        assert_eq!(serde_json::to_value(State::HalfOpen).unwrap(), "half_open");
        assert_eq!(serde_json::to_value(State::Closed).unwrap(), "closed");
        assert_eq!(State::Open.to_string(), "open");
        assert_eq!(serde_json::to_value(State::Degraded).unwrap(), "degraded");
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(percent(0.625), "63%");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(short_duration(Duration::from_secs(2)), "2s");
        assert_eq!(short_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(short_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn rejected_message() {
        let r = Rejected {
            breaker: "api.github.com".into(),
            state: State::Open,
            retry_after: Duration::from_millis(4200),
            reason: Reason::Opened {
                cause: "failure rate 60% ≥ 50% over last 20 calls".into(),
                wait: Duration::from_secs(5),
            },
        };
        assert_eq!(
            r.to_string(),
            "circuit breaker `api.github.com` is open: failure rate 60% ≥ 50% over last 20 calls; rejecting calls for 5s (retry in 5s)"
        );
    }
}
