//! Per-key client rate limits (GCRA via `governor`), with the data for `Retry-After` and the
//! IETF `RateLimit` / `RateLimit-Policy` response headers.
//!
//! Header syntax follows draft-ietf-httpapi-ratelimit-headers-11 (May 2026; same syntax as
//! -09/-10): `RateLimit-Policy: "burst";q=20;w=1` (quota `q` per window `w` seconds) and
//! `RateLimit: "burst";r=0;t=3` (`r` quota units left, `t` seconds of effective window). The
//! policy identifier is a Structured-Fields string, hence the quotes. On refusal `t` and
//! `Retry-After` carry the same whole-second value: the draft says `Retry-After` should not
//! point earlier than the end of the effective window.
//!
//! GCRA has no fixed window; we report `t` as the time until the key's bucket is full again
//! (rounded up to whole seconds), the moment after which its `r` is sure to be the full quota.
//!
//! Time comes from [`TokioClock`], so tests drive it with paused tokio time. Memory stays
//! bounded: every [`SWEEP_EVERY`] checks, keys whose bucket is full again (idle for a whole
//! window) are dropped, so the map holds only keys active within the last window plus at most
//! `SWEEP_EVERY` newcomers.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use http::{HeaderMap, HeaderName, HeaderValue};
use thiserror::Error;

/// Checks between sweeps of idle keys.
pub const SWEEP_EVERY: u64 = 256;

/// A monotonic clock for `governor` backed by `tokio::time::Instant` (pausable in tests).
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl governor::clock::Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// One rate-limit policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Policy identifier shown in the headers (letters, digits, `-`, `_`, `.`).
    pub policy: String,
    /// Requests allowed back to back (the quota `q`).
    pub burst: u32,
    /// Time for an empty bucket to refill completely (the window `w`).
    pub per: Duration,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            policy: "burst".to_owned(),
            burst: 20,
            per: Duration::from_secs(1),
        }
    }
}

/// A [`RateLimitConfig`] that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RateLimitConfigError {
    /// `burst` was 0.
    #[error("rate limit `burst` must be at least 1")]
    ZeroBurst,
    /// `per` was too short to give each request a non-zero share of it.
    #[error("rate limit `per` must be at least 1ns per request of `burst`")]
    PeriodTooShort,
    /// `policy` was empty or held characters outside `[A-Za-z0-9._-]`.
    #[error(
        "rate limit `policy` {0:?} must be non-empty and use only letters, digits, '-', '_', '.'"
    )]
    BadPolicyName(String),
}

/// Where a key stands after a check; carries everything the response headers need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitStatus {
    /// Policy identifier.
    pub policy: Arc<str>,
    /// Quota per window (`q`).
    pub quota: u32,
    /// Window in whole seconds (`w`).
    pub window_secs: u64,
    /// Requests left right now (`r`).
    pub remaining: u32,
    /// Time until the bucket is full again (`t`, before rounding).
    pub reset: Duration,
}

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("rate limit `{}` exceeded; retry in {}s", status.policy, whole_secs(*retry_after))]
pub struct Throttled {
    /// How long until this key may make one more request.
    pub retry_after: Duration,
    /// The key's status (with `remaining == 0`).
    pub status: RateLimitStatus,
}

/// Ready-made header values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `RateLimit-Policy` value, e.g. `"burst";q=20;w=1`.
    pub policy: String,
    /// `RateLimit` value, e.g. `"burst";r=0;t=3`.
    pub ratelimit: String,
    /// `Retry-After` value in seconds, only on refusal.
    pub retry_after: Option<String>,
}

impl RateLimitHeaders {
    /// Sets `RateLimit-Policy`, `RateLimit` and (if refused) `Retry-After` on `headers`.
    pub fn insert_into(&self, headers: &mut HeaderMap) {
        let fields = [
            (
                HeaderName::from_static("ratelimit-policy"),
                Some(&self.policy),
            ),
            (HeaderName::from_static("ratelimit"), Some(&self.ratelimit)),
            (http::header::RETRY_AFTER, self.retry_after.as_ref()),
        ];
        for (name, value) in fields {
            // Values are built from validated names and integers, so parsing cannot fail;
            // if it somehow did, omitting an advisory header beats failing the response.
            if let Some(Ok(v)) = value.map(|v| HeaderValue::from_str(v)) {
                headers.insert(name, v);
            }
        }
    }
}

impl RateLimitStatus {
    /// Header values for an allowed request.
    pub fn header_values(&self) -> RateLimitHeaders {
        self.headers(self.remaining, whole_secs(self.reset), None)
    }

    fn headers(&self, remaining: u32, t: u64, retry_after: Option<u64>) -> RateLimitHeaders {
        RateLimitHeaders {
            policy: format!(
                "\"{}\";q={};w={}",
                self.policy, self.quota, self.window_secs
            ),
            ratelimit: format!("\"{}\";r={remaining};t={t}", self.policy),
            retry_after: retry_after.map(|s| s.to_string()),
        }
    }
}

impl Throttled {
    /// Header values for a refused request: `r=0`, and `t` equal to `Retry-After`.
    pub fn header_values(&self) -> RateLimitHeaders {
        let secs = whole_secs(self.retry_after);
        self.status.headers(0, secs, Some(secs))
    }
}

type Limiter<K> = RateLimiter<K, DashMapStateStore<K>, TokioClock, StateInformationMiddleware>;

/// A keyed GCRA rate limiter, e.g. keyed by `(surface, identity)`.
pub struct KeyedRateLimiter<K: Hash + Eq + Clone> {
    limiter: Limiter<K>,
    clock: TokioClock,
    policy: Arc<str>,
    quota: Quota,
    window_secs: u64,
    checks: AtomicU64,
}

impl<K: Hash + Eq + Clone> KeyedRateLimiter<K> {
    /// A limiter applying `config` to each key separately.
    pub fn new(config: &RateLimitConfig) -> Result<Self, RateLimitConfigError> {
        let valid_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if config.policy.is_empty() || !config.policy.chars().all(valid_name) {
            return Err(RateLimitConfigError::BadPolicyName(config.policy.clone()));
        }
        let burst = NonZeroU32::new(config.burst).ok_or(RateLimitConfigError::ZeroBurst)?;
        let quota = Quota::with_period(config.per / burst.get())
            .ok_or(RateLimitConfigError::PeriodTooShort)?
            .allow_burst(burst);
        let clock = TokioClock::default();
        let limiter = RateLimiter::new(quota, DashMapStateStore::default(), &clock);
        Ok(KeyedRateLimiter {
            limiter,
            clock,
            policy: Arc::from(config.policy.as_str()),
            quota,
            window_secs: whole_secs(quota.burst_size_replenished_in()).max(1),
            checks: AtomicU64::new(0),
        })
    }

    /// Counts one request for `key`.
    pub fn check(&self, key: &K) -> Result<RateLimitStatus, Throttled> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.retain_recent();
        }
        match self.limiter.check_key(key) {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                let used = self.quota.burst_size().get().saturating_sub(remaining);
                Ok(self.status(remaining, self.quota.replenish_interval() * used))
            }
            Err(not_until) => {
                let retry_after = not_until.wait_time_from(self.clock.now());
                // Empty bucket: one interval per request still to refill after the wait.
                let refill_rest =
                    self.quota.replenish_interval() * (self.quota.burst_size().get() - 1);
                Err(Throttled {
                    retry_after,
                    status: self.status(0, retry_after + refill_rest),
                })
            }
        }
    }

    /// Drops keys whose bucket is full again; runs automatically every [`SWEEP_EVERY`] checks.
    pub fn retain_recent(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.limiter.len()
    }

    /// True when no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.limiter.is_empty()
    }

    fn status(&self, remaining: u32, reset: Duration) -> RateLimitStatus {
        RateLimitStatus {
            policy: Arc::clone(&self.policy),
            quota: self.quota.burst_size().get(),
            window_secs: self.window_secs,
            remaining,
            reset,
        }
    }
}

/// Rounds up to whole seconds (header values are delay-seconds).
fn whole_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    fn limiter(burst: u32, per_secs: u64) -> KeyedRateLimiter<(&'static str, &'static str)> {
        KeyedRateLimiter::new(&RateLimitConfig {
            policy: "burst".into(),
            burst,
            per: Duration::from_secs(per_secs),
        })
        .unwrap()
    }

    const KEY: (&str, &str) = ("sessions", "octocat");

    #[tokio::test(start_paused = true)]
    async fn burst_then_refuse_with_headers() {
        let l = limiter(3, 3);
        let remaining: Vec<u32> = (0..3).map(|_| l.check(&KEY).unwrap().remaining).collect();
        assert_eq!(remaining, [2, 1, 0]);
        let first = l.check(&KEY).unwrap_err();
        // One request refills every second.
        assert_eq!(first.retry_after, Duration::from_secs(1));
        let h = first.header_values();
        assert_eq!(h.policy, r#""burst";q=3;w=3"#);
        assert_eq!(h.ratelimit, r#""burst";r=0;t=1"#);
        assert_eq!(h.retry_after.as_deref(), Some("1"));
        assert_eq!(
            first.to_string(),
            "rate limit `burst` exceeded; retry in 1s"
        );

        advance(Duration::from_millis(400)).await;
        let later = l.check(&KEY).unwrap_err();
        assert_eq!(later.retry_after, Duration::from_millis(600));
        // Rounded up: never tell a client it may come back before it really may.
        assert_eq!(later.header_values().retry_after.as_deref(), Some("1"));

        advance(Duration::from_millis(600)).await;
        let ok = l.check(&KEY).unwrap();
        assert_eq!(ok.remaining, 0);
        assert_eq!(ok.header_values().ratelimit, r#""burst";r=0;t=3"#);
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_headers_report_time_to_full() {
        let l = limiter(20, 1);
        let s = l.check(&KEY).unwrap();
        assert_eq!(s.remaining, 19);
        assert_eq!(s.reset, Duration::from_millis(50));
        let h = s.header_values();
        assert_eq!(h.policy, r#""burst";q=20;w=1"#);
        assert_eq!(h.ratelimit, r#""burst";r=19;t=1"#);
        assert_eq!(h.retry_after, None);
        let mut map = HeaderMap::new();
        h.insert_into(&mut map);
        assert_eq!(map["ratelimit-policy"], r#""burst";q=20;w=1"#);
        assert_eq!(map["ratelimit"], r#""burst";r=19;t=1"#);
        assert!(map.get("retry-after").is_none());
        let mut map = HeaderMap::new();
        for _ in 0..19 {
            l.check(&KEY).unwrap();
        }
        l.check(&KEY)
            .unwrap_err()
            .header_values()
            .insert_into(&mut map);
        assert_eq!(map["retry-after"], "1");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_independent() {
        let l = limiter(1, 10);
        l.check(&("sessions", "a")).unwrap();
        assert!(l.check(&("sessions", "a")).is_err());
        l.check(&("sessions", "b")).unwrap();
        l.check(&("tokens", "a")).unwrap();
        assert_eq!(l.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_swept() {
        let l = KeyedRateLimiter::<u64>::new(&RateLimitConfig {
            burst: 5,
            per: Duration::from_secs(1),
            ..Default::default()
        })
        .unwrap();
        for k in 0..100 {
            l.check(&k).unwrap();
        }
        assert_eq!(l.len(), 100);
        advance(Duration::from_secs(2)).await;
        l.retain_recent();
        assert!(l.is_empty());
        // The automatic sweep: the check that completes SWEEP_EVERY first sweeps idle keys.
        for k in 0..SWEEP_EVERY - 101 {
            l.check(&(1000 + k)).unwrap();
        }
        assert_eq!(l.len() as u64, SWEEP_EVERY - 101);
        advance(Duration::from_secs(2)).await;
        l.check(&7).unwrap();
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = RateLimitConfig::default();
        let err = |c: RateLimitConfig| KeyedRateLimiter::<u8>::new(&c).err().unwrap();
        assert_eq!(
            err(RateLimitConfig {
                burst: 0,
                ..base.clone()
            }),
            RateLimitConfigError::ZeroBurst
        );
        assert_eq!(
            err(RateLimitConfig {
                per: Duration::ZERO,
                ..base.clone()
            }),
            RateLimitConfigError::PeriodTooShort
        );
        assert!(matches!(
            err(RateLimitConfig {
                policy: "a\"b".into(),
                ..base.clone()
            }),
            RateLimitConfigError::BadPolicyName(_)
        ));
        assert!(matches!(
            err(RateLimitConfig {
                policy: String::new(),
                ..base
            }),
            RateLimitConfigError::BadPolicyName(_)
        ));
    }

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_secs(Duration::ZERO), 0);
        assert_eq!(whole_secs(Duration::from_nanos(1)), 1);
        assert_eq!(whole_secs(Duration::from_secs(3)), 3);
    }
}
