//! Failure classification: turns an upstream outcome into a [`Kind`] that decides retries,
//! breaker accounting, metrics labels and problem `type` URIs.
//!
//! Retry and breaker decisions are taken from the kind, never from an error string.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde::{Serialize, Serializer};

/// Which phase of an upstream exchange ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutPhase {
    /// TCP/TLS connect did not finish in time.
    Connect,
    /// The connection was up but the response head did not arrive in time.
    Headers,
    /// The response head arrived but the body stalled.
    Body,
}

impl TimeoutPhase {
    /// Stable snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::Headers => "headers",
            TimeoutPhase::Body => "body",
        }
    }
}

/// What happened to one upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// 1xx–3xx: the upstream answered normally.
    Ok,
    /// The request itself is wrong (most 4xx); repeating it cannot help.
    Fatal,
    /// Credentials are missing, expired or lack a scope (401, most 403).
    Auth,
    /// An enterprise/organisation policy forbids this feature (a 403 with policy wording).
    PolicyBlocked,
    /// The upstream throttled us (429, or 403 with rate-limit signals).
    RateLimited,
    /// The upstream says it is overloaded (503, 529).
    Overloaded,
    /// Any other 5xx.
    ServerError,
    /// The exchange ran out of time in the given phase.
    Timeout(TimeoutPhase),
    /// The connection failed or broke (refused, reset, TLS error, DNS failure).
    Connection,
}

impl Kind {
    /// Stable snake_case name used in metrics, logs and problem `type` URIs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Ok => "ok",
            Kind::Fatal => "fatal",
            Kind::Auth => "auth",
            Kind::PolicyBlocked => "policy_blocked",
            Kind::RateLimited => "rate_limited",
            Kind::Overloaded => "overloaded",
            Kind::ServerError => "server_error",
            Kind::Timeout(_) => "timeout",
            Kind::Connection => "connection",
        }
    }

    /// Extra detail that `as_str` leaves out: the phase of a timeout.
    pub const fn detail(self) -> Option<&'static str> {
        match self {
            Kind::Timeout(phase) => Some(phase.as_str()),
            _ => None,
        }
    }

    /// True for the kinds a retry can fix regardless of any server wait hint: transient
    /// transport trouble and server-side failures.
    ///
    /// `RateLimited` is `false` here because it is only worth retrying when the server's
    /// wait fits the caller's deadline; use [`Kind::retryable_within`] for that. Whether the
    /// *request* may be repeated (idempotency, body already streamed) is the caller's call.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Kind::Timeout(_) | Kind::Connection | Kind::Overloaded | Kind::ServerError
        )
    }

    /// Whether a retry is worth it given the server's wait hint (`Retry-After` or
    /// `x-ratelimit-reset`, see [`crate::retry_after`]) and the time left before the caller's
    /// deadline.
    ///
    /// * A retryable kind is retried unless the server asked for a wait longer than what is
    ///   left.
    /// * `RateLimited` is retried only when the server named a wait and that wait fits:
    ///   without a hint GitHub asks clients to back off for at least a minute, which no
    ///   interactive request can afford.
    pub fn retryable_within(self, wait: Option<Duration>, remaining_deadline: Duration) -> bool {
        match self {
            Kind::RateLimited => wait.is_some_and(|w| w <= remaining_deadline),
            k if k.is_retryable() => wait.is_none_or(|w| w <= remaining_deadline),
            _ => false,
        }
    }

    /// Whether this outcome says the *upstream* is unhealthy and should count against its
    /// circuit breaker.
    ///
    /// 5xx, overload, timeouts and connection failures do. The others do not, because they
    /// describe the caller, not the upstream: `Fatal` is a bad request, `Auth` and
    /// `PolicyBlocked` are one identity's credentials or organisation settings (tripping the
    /// breaker would lock every other identity out too), and `RateLimited` is a quota the
    /// server is enforcing correctly — it is handled by cooldown and `Retry-After`, and
    /// opening the breaker on it would only hide the server's own wait hint.
    pub const fn counts_as_breaker_failure(self) -> bool {
        matches!(
            self,
            Kind::ServerError | Kind::Overloaded | Kind::Timeout(_) | Kind::Connection
        )
    }

    /// True for [`Kind::Ok`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Kind::Ok)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail() {
            Some(detail) => write!(f, "{} ({detail})", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Serialize for TimeoutPhase {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Classifies an upstream HTTP response.
///
/// `body_prefix` is the first bytes of the body (a few KiB is plenty); it is only read for
/// 403 responses, to tell GitHub's three kinds of 403 apart (see [`crate::github403`]).
///
/// | status | kind |
/// |---|---|
/// | 1xx–3xx | `Ok` |
/// | 401 | `Auth` |
/// | 403 | `RateLimited`, `PolicyBlocked` or `Auth` (see [`crate::github403`]) |
/// | 429 | `RateLimited` |
/// | other 4xx (400, 404, 409, 413, 422, …) | `Fatal` |
/// | 503, 529 | `Overloaded` |
/// | other 5xx, and anything ≥ 600 | `ServerError` |
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body_prefix: &[u8]) -> Kind {
    let code = status.as_u16();
    match code {
        100..=399 => Kind::Ok,
        401 => Kind::Auth,
        403 => crate::github403::classify_forbidden(headers, body_prefix),
        429 => Kind::RateLimited,
        400..=499 => Kind::Fatal,
        503 | 529 => Kind::Overloaded,
        // Codes ≥ 600 are not HTTP semantics at all; treat them as a broken server.
        _ => Kind::ServerError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(code: u16) -> Kind {
        let status = StatusCode::from_u16(code).unwrap();
        classify_response(status, &HeaderMap::new(), b"")
    }

    #[test]
    fn status_table() {
        assert_eq!(classify(200), Kind::Ok);
        assert_eq!(classify(101), Kind::Ok);
        assert_eq!(classify(304), Kind::Ok);
        for code in [400, 404, 409, 413, 422, 405, 410] {
            assert_eq!(classify(code), Kind::Fatal, "{code}");
        }
        assert_eq!(classify(401), Kind::Auth);
        assert_eq!(classify(403), Kind::Auth);
        assert_eq!(classify(429), Kind::RateLimited);
        assert_eq!(classify(503), Kind::Overloaded);
        assert_eq!(classify(529), Kind::Overloaded);
        for code in [500, 502, 504, 599, 600, 999] {
            assert_eq!(classify(code), Kind::ServerError, "{code}");
        }
    }

    #[test]
    fn names_are_stable() {
        let all = [
            (Kind::Ok, "ok"),
            (Kind::Fatal, "fatal"),
            (Kind::Auth, "auth"),
            (Kind::PolicyBlocked, "policy_blocked"),
            (Kind::RateLimited, "rate_limited"),
            (Kind::Overloaded, "overloaded"),
            (Kind::ServerError, "server_error"),
            (Kind::Timeout(TimeoutPhase::Headers), "timeout"),
            (Kind::Connection, "connection"),
        ];
        for (kind, name) in all {
            assert_eq!(kind.as_str(), name);
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
        }
        let t = Kind::Timeout(TimeoutPhase::Body);
        assert_eq!(t.detail(), Some("body"));
        assert_eq!(t.to_string(), "timeout (body)");
        assert_eq!(Kind::Connection.detail(), None);
    }

    #[test]
    fn retry_and_breaker_policy() {
        let retryable = [
            Kind::Timeout(TimeoutPhase::Connect),
            Kind::Connection,
            Kind::Overloaded,
            Kind::ServerError,
        ];
        for k in retryable {
            assert!(k.is_retryable(), "{k}");
            assert!(k.counts_as_breaker_failure(), "{k}");
        }
        let not = [
            Kind::Ok,
            Kind::Fatal,
            Kind::Auth,
            Kind::PolicyBlocked,
            Kind::RateLimited,
        ];
        for k in not {
            assert!(!k.is_retryable(), "{k}");
            assert!(!k.counts_as_breaker_failure(), "{k}");
        }
    }

    #[test]
    fn retryable_within_deadline() {
        let secs = Duration::from_secs;
        assert!(Kind::RateLimited.retryable_within(Some(secs(2)), secs(5)));
        assert!(!Kind::RateLimited.retryable_within(Some(secs(6)), secs(5)));
        assert!(!Kind::RateLimited.retryable_within(None, secs(5)));
        assert!(Kind::ServerError.retryable_within(None, secs(1)));
        assert!(!Kind::Overloaded.retryable_within(Some(secs(30)), secs(5)));
        assert!(!Kind::Fatal.retryable_within(None, secs(60)));
    }
}
