//! Why a breaker is where it is: one [`Reason`] per kind of transition, so a consumer (the
//! tray's notifications, a test) matches the variant instead of the words. `Display` gives
//! the sentence the status, the logs and the dashboard show, and `Serialize` writes that same
//! sentence, so the JSON is what it was when reasons were strings.

use std::fmt;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::state::short_duration;

/// The cause of a breaker's last transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Created; no transition yet.
    New,
    /// Opened for `cause` (a run of failures, a rate over the window, failed half-open
    /// probes, or evidence from outside through [`super::Breaker::trip`]); calls are
    /// rejected for `wait`.
    Opened { cause: String, wait: Duration },
    /// The open wait (`waited`) ended: `probes` calls go through to decide.
    Probing { waited: Duration, probes: u32 },
    /// The half-open probes succeeded: closed again. The words say how many.
    ProbesPassed(String),
    /// Closed → degraded: the window's failure or slow rate reached its degraded threshold.
    Degraded(String),
    /// Degraded → closed: the window's rates fell below both degraded thresholds.
    Recovered(String),
    /// Degraded → closed: no calls within the last `window` to judge by.
    Idle { window: Duration },
}

impl Reason {
    /// A stable snake_case name of the variant (`opened`, `recovered`, ...).
    pub const fn kind(&self) -> &'static str {
        match self {
            Reason::New => "new",
            Reason::Opened { .. } => "opened",
            Reason::Probing { .. } => "probing",
            Reason::ProbesPassed(_) => "probes_passed",
            Reason::Degraded(_) => "degraded",
            Reason::Recovered(_) => "recovered",
            Reason::Idle { .. } => "idle",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::New => f.write_str("new"),
            Reason::Opened { cause, wait } => {
                write!(f, "{cause}; rejecting calls for {}", short_duration(*wait))
            }
            Reason::Probing { waited, probes } => write!(
                f,
                "waited {}; letting {probes} probe call{} through",
                short_duration(*waited),
                if *probes == 1 { "" } else { "s" }
            ),
            Reason::ProbesPassed(why) | Reason::Degraded(why) => f.write_str(why),
            Reason::Recovered(why) => write!(f, "recovered: {why}"),
            Reason::Idle { window } => {
                write!(f, "no calls in the last {}", short_duration(*window))
            }
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_reads_as_before_and_serialises_as_its_words() {
        let cases = [
            (Reason::New, "new"),
            (
                Reason::Opened {
                    cause: "5 consecutive failures".into(),
                    wait: Duration::from_millis(1500),
                },
                "5 consecutive failures; rejecting calls for 1.5s",
            ),
            (
                Reason::Probing {
                    waited: Duration::from_secs(5),
                    probes: 1,
                },
                "waited 5s; letting 1 probe call through",
            ),
            (
                Reason::Probing {
                    waited: Duration::from_secs(5),
                    probes: 3,
                },
                "waited 5s; letting 3 probe calls through",
            ),
            (
                Reason::Recovered("failure rate 0%, slow rate 0% over last 9 calls".into()),
                "recovered: failure rate 0%, slow rate 0% over last 9 calls",
            ),
            (
                Reason::Idle {
                    window: Duration::from_secs(30),
                },
                "no calls in the last 30s",
            ),
        ];
        for (r, words) in cases {
            assert_eq!(r.to_string(), words);
            assert_eq!(serde_json::to_value(&r).unwrap(), words);
        }
        assert_eq!(Reason::Degraded("x".into()).kind(), "degraded");
    }
}
