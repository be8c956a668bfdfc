//! Why an attempt brought no upstream answer, as the engine decides on it. [`AttemptError`] is
//! internal: the request path asks it whether to queue a create (its [`ProblemKind`]) and
//! whether the create may have arrived ([`AttemptError::maybe_sent`]). The client-facing
//! problem+json is made once, at the edge, by `Problem::from`; its `detail` is this error's
//! `Display`.

use super::admission::Closed;
use super::attempt::fetch_problem;
use super::client::FetchError;
use crate::problem::{Problem, ProblemKind};
use http::StatusCode;
use std::time::Duration;
use weir_resilience::{Kind, State};

#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// The gate refused the attempt before anything was sent (cooldown, breaker, bulkhead).
    #[error("{}", closed.detail(upstream))]
    Refused { upstream: String, closed: Closed },
    /// The last exchange failed; `breaker` is the upstream's breaker state after it.
    #[error("{error}")]
    Failed {
        upstream: String,
        breaker: State,
        error: FetchError,
    },
    /// The policy allowed no attempt at all.
    #[error("no attempt was made")]
    NoAttempt,
}

impl AttemptError {
    /// The request may have reached the upstream (see `FetchError::maybe_sent`): a create in
    /// that state is queued `in_doubt`.
    pub fn maybe_sent(&self) -> bool {
        matches!(self, AttemptError::Failed { error, .. } if error.maybe_sent())
    }

    /// The kind of problem the client is shown (and what decides queueing).
    pub fn kind(&self) -> ProblemKind {
        match self {
            AttemptError::Refused { closed, .. } => closed.kind(),
            AttemptError::Failed { error, .. } => error.kind(),
            AttemptError::NoAttempt => ProblemKind::Internal,
        }
    }
}

/// The one conversion to the client's problem.
impl From<AttemptError> for Problem {
    fn from(e: AttemptError) -> Problem {
        let detail = e.to_string();
        match e {
            AttemptError::Refused { upstream, closed } => {
                let (status, retry_after) = closed.status_and_wait();
                let p = Problem::new(status, closed.kind(), detail)
                    .retry_after(retry_after)
                    .upstream(&upstream);
                match closed {
                    Closed::Breaker(rej) => p.breaker(rej.state),
                    _ => p,
                }
            }
            AttemptError::Failed {
                upstream,
                breaker,
                error,
            } => {
                let mut p = fetch_problem(&error).upstream(&upstream).breaker(breaker);
                p.maybe_sent = error.maybe_sent();
                p
            }
            AttemptError::NoAttempt => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemKind::Internal,
                detail,
            ),
        }
    }
}

impl Closed {
    fn kind(&self) -> ProblemKind {
        match self {
            Closed::Cooldown(_, Kind::Overloaded) | Closed::Shed(_) => ProblemKind::Overloaded,
            Closed::Cooldown(..) | Closed::IdentityCooldown(_) => ProblemKind::RateLimited,
            Closed::Breaker(_) => ProblemKind::BreakerOpen,
        }
    }

    fn status_and_wait(&self) -> (StatusCode, Duration) {
        match self {
            Closed::Cooldown(rem, Kind::Overloaded) => (StatusCode::SERVICE_UNAVAILABLE, *rem),
            Closed::Cooldown(rem, _) | Closed::IdentityCooldown(rem) => {
                (StatusCode::TOO_MANY_REQUESTS, *rem)
            }
            Closed::Breaker(rej) => (StatusCode::SERVICE_UNAVAILABLE, rej.retry_after),
            Closed::Shed(_) => (StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(1)),
        }
    }

    /// What happened, in words, for the upstream named `upstream`.
    fn detail(&self, upstream: &str) -> String {
        match self {
            Closed::Cooldown(rem, _) => format!(
                "{upstream} asked for a pause; Weir holds every request back for {:.1}s more",
                rem.as_secs_f64()
            ),
            Closed::IdentityCooldown(rem) => format!(
                "{upstream} rate-limited this credential; Weir holds its requests back for {:.1}s more (other credentials are not affected)",
                rem.as_secs_f64()
            ),
            Closed::Breaker(rej) => format!(
                "the circuit breaker for {upstream} is {}: {}",
                rej.state, rej.reason
            ),
            Closed::Shed(shed) => format!("request shed: {shed}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_resilience::{BreakerReason, Rejected};

    #[test]
    fn the_problem_says_what_the_error_decided() {
        let rej = Rejected {
            breaker: "copilot-api".into(),
            state: State::Open,
            retry_after: Duration::from_millis(4200),
            reason: BreakerReason::Opened {
                cause: "5 consecutive failures".into(),
                wait: Duration::from_secs(5),
            },
        };
        let cases = [
            (
                AttemptError::Refused {
                    upstream: "copilot-api".into(),
                    closed: Closed::Breaker(rej),
                },
                503,
                Some(5),
                "the circuit breaker for copilot-api is open: 5 consecutive failures; rejecting calls for 5s",
            ),
            (
                AttemptError::Refused {
                    upstream: "copilot-api".into(),
                    closed: Closed::IdentityCooldown(Duration::from_secs(2)),
                },
                429,
                Some(2),
                "copilot-api rate-limited this credential; Weir holds its requests back for 2.0s more (other credentials are not affected)",
            ),
            (
                AttemptError::Refused {
                    upstream: "copilot-api".into(),
                    closed: Closed::Cooldown(Duration::from_secs(3), Kind::Overloaded),
                },
                503,
                Some(3),
                "copilot-api asked for a pause; Weir holds every request back for 3.0s more",
            ),
            (
                AttemptError::Failed {
                    upstream: "copilot-api".into(),
                    breaker: State::Closed,
                    error: FetchError::Protocol {
                        target: "https://api.example".into(),
                        message: "reset".into(),
                    },
                },
                502,
                None,
                "exchange with https://api.example failed: reset",
            ),
            (AttemptError::NoAttempt, 500, None, "no attempt was made"),
        ];
        for (e, status, retry_after, detail) in cases {
            let (kind, maybe_sent) = (e.kind(), e.maybe_sent());
            let refused = matches!(e, AttemptError::Refused { .. });
            assert_eq!(e.to_string(), detail);
            let p = Problem::from(e);
            assert_eq!(
                (
                    p.status,
                    p.kind,
                    p.maybe_sent,
                    p.retry_after_s,
                    p.detail.as_str()
                ),
                (status, kind, maybe_sent, retry_after, detail)
            );
            assert_eq!(
                refused,
                matches!(
                    kind,
                    ProblemKind::BreakerOpen | ProblemKind::RateLimited | ProblemKind::Overloaded
                )
            );
        }
    }

    #[test]
    fn only_a_failed_exchange_may_have_been_sent() {
        let failed = |error| AttemptError::Failed {
            upstream: "u".into(),
            breaker: State::Closed,
            error,
        };
        let reset = failed(FetchError::Protocol {
            target: "t".into(),
            message: "m".into(),
        });
        let refused = failed(FetchError::Connect {
            target: "t".into(),
            message: "refused".into(),
        });
        assert!(reset.maybe_sent());
        assert!(!refused.maybe_sent(), "never connected: certainly not sent");
        assert_eq!(Problem::from(reset).upstream.as_deref(), Some("u"));
    }
}
