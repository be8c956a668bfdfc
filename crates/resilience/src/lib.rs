//! Weir's resilience primitives: the pieces the engine's request path calls to decide
//! whether to send, retry, wait or shed.
//!
//! # Layout
//!
//! In request-path order:
//!
//! - [`ratelimit`] — per-client GCRA limits (`governor`) and the IETF `RateLimit` /
//!   `RateLimit-Policy` header values.
//! - [`bulkhead`] — per-upstream concurrency limit with a bounded queue; sheds the excess.
//! - [`cooldown`] — "do not call this upstream before T", set from server wait hints.
//! - [`breaker`] — circuit breaker per upstream on consecutive failures, failure rate and
//!   slow-call rate (slow relative to each class's own latency baseline), with a degraded
//!   state, caution, half-open probes, growing open waits, snapshots and transition events.
//! - [`kind`] — classifies an upstream outcome into a [`Kind`] that drives everything else.
//! - [`github403`] — the rule that tells GitHub's rate-limit, policy and auth 403s apart.
//! - [`retry_after`] — parses `Retry-After` and `x-ratelimit-reset` into a wait.
//! - [`http_date`] — HTTP-dates (IMF-fixdate, RFC 850, asctime) on the `time` crate.
//! - [`backoff`] — exponential backoff with full jitter; the injectable [`Jitter`].
//! - [`budget`] — retry budget per upstream (retries ≤ ratio of requests over a window).
//! - `window` (private) — the time-bucketed sliding window behind the budget and breaker.
//!
//! Everything time-based reads `tokio::time::Instant`, so tests run under
//! `#[tokio::test(start_paused = true)]`; randomness comes through [`Jitter`], so tests use
//! [`NoJitter`].

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod cooldown;
pub mod github403;
pub mod http_date;
pub mod kind;
pub mod ratelimit;
pub mod retry_after;
mod window;

pub use backoff::{Backoff, FullJitter, Jitter, NoJitter};
pub use breaker::{
    Breaker, BreakerConfig, BreakerEvent, BreakerSnapshot, ClassLatency,
    ConfigError as BreakerConfigError, Permit, Reason as BreakerReason, Rejected, Slowness, State,
    Timing,
};
pub use budget::{BudgetConfig, BudgetStats, RetryBudget};
pub use bulkhead::{Bulkhead, BulkheadConfig, BulkheadPermit, BulkheadStats, Shed};
pub use cooldown::Cooldown;
pub use kind::{classify_response, Kind, TimeoutPhase};
pub use ratelimit::{
    KeyedRateLimiter, RateLimitConfig, RateLimitConfigError, RateLimitHeaders, RateLimitStatus,
    Throttled, TokioClock,
};
pub use retry_after::{parse_ratelimit_reset, parse_retry_after, wait_hint};

#[cfg(test)]
mod tests {
    /// The engine shares these across tasks behind `Arc`; this fails to compile otherwise.
    #[test]
    fn shared_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Breaker>();
        check::<crate::Permit>();
        check::<crate::RetryBudget>();
        check::<crate::Bulkhead>();
        check::<crate::BulkheadPermit>();
        check::<crate::Cooldown>();
        check::<crate::KeyedRateLimiter<(String, String)>>();
    }
}
