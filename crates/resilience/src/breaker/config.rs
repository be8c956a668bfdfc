//! Circuit breaker settings, with defaults modelled on resilience4j (windowed rates) and
//! linkerd2-proxy (consecutive failures), sized for one developer's traffic, and a `validate()`
//! that names the bad field.

use std::time::Duration;

use thiserror::Error;

/// Settings for one [`crate::Breaker`].
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// Length of the time-based sliding window the rates are computed over.
    pub window: Duration,
    /// Buckets the window is split into (its time resolution).
    pub window_buckets: u32,
    /// The breaker never opens with fewer calls than this in the window: a 100 % failure
    /// rate over two calls is noise, not an outage.
    pub minimum_calls: u32,
    /// Opens when `failures / calls ≥` this (0.0–1.0].
    pub failure_rate_threshold: f64,
    /// Opens when `slow calls / calls ≥` this (0.0–1.0].
    pub slow_call_rate_threshold: f64,
    /// The slow-call cut-off the caller uses, if it uses a single one. The breaker never
    /// measures time itself (the caller passes `slow` to [`crate::Permit::record`]); this is
    /// only quoted in reasons ("slower than 2s").
    pub slow_call_duration: Option<Duration>,
    /// Wait after the first opening.
    pub open_base: Duration,
    /// Each consecutive opening multiplies the wait by this.
    pub open_multiplier: f64,
    /// The wait never exceeds this.
    pub open_max: Duration,
    /// Calls let through while half-open; the verdict is taken when all have reported.
    pub half_open_probes: u32,
    /// After staying closed this long, the next opening starts again from `open_base`
    /// (the upstream has recovered; an old incident should not lengthen a new one).
    pub reset_growth_after: Duration,
    /// Opens after this many failures in a row, whatever the window holds (0 = off). One
    /// laptop's traffic rarely fills the window's `minimum_calls`; a run of failures is the
    /// signal it does produce.
    pub consecutive_failures: u32,
    /// A call is "slow" when it takes `slow_multiplier ×` its class's recent median latency
    /// (0.0 = off: only the caller's absolute cut-off counts).
    pub slow_multiplier: f64,
    /// ...but never below this: a 40 ms → 200 ms wobble on a fast class is not trouble.
    pub slow_floor: Duration,
    /// Successful, not-slow calls remembered per class for the median.
    pub baseline_samples: u32,
    /// The relative rule applies once a class has this many samples.
    pub baseline_min_samples: u32,
    /// Degraded (still closed, calls flow) once the window holds this many calls and either
    /// rate below reaches its threshold.
    pub degraded_minimum_calls: u32,
    /// Degraded when `failures / calls ≥` this (0.0–1.0].
    pub degraded_failure_rate: f64,
    /// Degraded when `slow calls / calls ≥` this (0.0–1.0], slow by the relative rule or the
    /// absolute cut-off.
    pub degraded_slow_rate: f64,
    /// While cautious (see [`crate::Breaker::set_cautious`]): `minimum_calls` is lowered to this.
    pub cautious_minimum_calls: u32,
    /// While cautious: `consecutive_failures` is lowered to this (0 = keep the normal one).
    pub cautious_consecutive_failures: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(30),
            window_buckets: 10,
            minimum_calls: 20,
            failure_rate_threshold: 0.5,
            slow_call_rate_threshold: 0.8,
            slow_call_duration: None,
            open_base: Duration::from_secs(5),
            open_multiplier: 2.0,
            open_max: Duration::from_secs(120),
            half_open_probes: 3,
            reset_growth_after: Duration::from_secs(120),
            consecutive_failures: 5,
            slow_multiplier: 4.0,
            slow_floor: Duration::from_secs(1),
            baseline_samples: 64,
            baseline_min_samples: 10,
            degraded_minimum_calls: 5,
            degraded_failure_rate: 0.25,
            degraded_slow_rate: 0.5,
            cautious_minimum_calls: 5,
            cautious_consecutive_failures: 3,
        }
    }
}

/// A [`BreakerConfig`] field with an unusable value.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("breaker config: `{field}` {problem}")]
pub struct ConfigError {
    /// The field's name as written in this struct.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl BreakerConfig {
    /// Checks every field; the first bad one is named in the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, problem| Err(ConfigError { field, problem });
        if self.window.is_zero() {
            return bad("window", "must be longer than zero");
        }
        if self.window_buckets == 0 {
            return bad("window_buckets", "must be at least 1");
        }
        if self.minimum_calls == 0 {
            return bad("minimum_calls", "must be at least 1");
        }
        if !is_rate(self.failure_rate_threshold) {
            return bad("failure_rate_threshold", "must be in (0, 1]");
        }
        if !is_rate(self.slow_call_rate_threshold) {
            return bad("slow_call_rate_threshold", "must be in (0, 1]");
        }
        if !(self.open_multiplier.is_finite() && self.open_multiplier >= 1.0) {
            return bad("open_multiplier", "must be a number ≥ 1");
        }
        if self.open_max < self.open_base {
            return bad("open_max", "must not be shorter than open_base");
        }
        if self.half_open_probes == 0 {
            return bad("half_open_probes", "must be at least 1");
        }
        if !(self.slow_multiplier.is_finite()
            && (self.slow_multiplier == 0.0 || self.slow_multiplier >= 1.0))
        {
            return bad("slow_multiplier", "must be 0 (off) or a number ≥ 1");
        }
        if self.baseline_samples == 0 {
            return bad("baseline_samples", "must be at least 1");
        }
        if self.baseline_min_samples == 0 || self.baseline_min_samples > self.baseline_samples {
            return bad(
                "baseline_min_samples",
                "must be at least 1 and at most baseline_samples",
            );
        }
        if self.degraded_minimum_calls == 0 {
            return bad("degraded_minimum_calls", "must be at least 1");
        }
        if !is_rate(self.degraded_failure_rate) {
            return bad("degraded_failure_rate", "must be in (0, 1]");
        }
        if !is_rate(self.degraded_slow_rate) {
            return bad("degraded_slow_rate", "must be in (0, 1]");
        }
        if self.cautious_minimum_calls == 0 || self.cautious_minimum_calls > self.minimum_calls {
            return bad(
                "cautious_minimum_calls",
                "must be at least 1 and at most minimum_calls",
            );
        }
        if self.consecutive_failures > 0
            && self.cautious_consecutive_failures > self.consecutive_failures
        {
            return bad(
                "cautious_consecutive_failures",
                "must not be more than consecutive_failures",
            );
        }
        Ok(())
    }

    /// `minimum_calls`, lowered while cautious.
    pub fn minimum_calls_for(&self, cautious: bool) -> u32 {
        if cautious {
            self.cautious_minimum_calls.min(self.minimum_calls)
        } else {
            self.minimum_calls
        }
    }

    /// `consecutive_failures` (0 = off), lowered while cautious.
    pub fn consecutive_failures_for(&self, cautious: bool) -> u32 {
        match (cautious, self.cautious_consecutive_failures) {
            // Off stays off: caution lowers a threshold, it never adds a trigger.
            _ if self.consecutive_failures == 0 => 0,
            (true, n) if n > 0 => n,
            _ => self.consecutive_failures,
        }
    }

    /// The nominal wait for the `n`-th consecutive opening (1-based), before jitter.
    pub fn open_wait(&self, n: u32) -> Duration {
        let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.open_base.as_secs_f64() * self.open_multiplier.powi(exp);
        if secs.is_finite() && secs < self.open_max.as_secs_f64() {
            Duration::from_secs_f64(secs)
        } else {
            self.open_max
        }
    }
}

fn is_rate(x: f64) -> bool {
    x > 0.0 && x <= 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(BreakerConfig::default().validate(), Ok(()));
    }

    #[test]
    fn bad_fields_are_named() {
        let c = BreakerConfig {
            failure_rate_threshold: 1.5,
            ..Default::default()
        };
        let err = c.validate().unwrap_err();
        assert_eq!(err.field, "failure_rate_threshold");
        assert!(err.to_string().contains("failure_rate_threshold"));
        let c = BreakerConfig {
            open_multiplier: f64::NAN,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "open_multiplier");
        let c = BreakerConfig {
            half_open_probes: 0,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "half_open_probes");
        let c = BreakerConfig {
            cautious_minimum_calls: 30,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "cautious_minimum_calls");
        let c = BreakerConfig {
            slow_multiplier: 0.5,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "slow_multiplier");
        let c = BreakerConfig {
            consecutive_failures: 2,
            ..Default::default()
        };
        assert_eq!(
            c.validate().unwrap_err().field,
            "cautious_consecutive_failures"
        );
    }

    #[test]
    fn caution_lowers_the_thresholds() {
        let c = BreakerConfig::default();
        assert_eq!(
            (c.minimum_calls_for(false), c.minimum_calls_for(true)),
            (20, 5)
        );
        assert_eq!(
            (
                c.consecutive_failures_for(false),
                c.consecutive_failures_for(true)
            ),
            (5, 3)
        );
        let off = BreakerConfig {
            consecutive_failures: 0,
            ..Default::default()
        };
        assert_eq!(off.consecutive_failures_for(true), 0);
    }

    #[test]
    fn open_wait_grows_and_caps() {
        let c = BreakerConfig::default();
        let secs: Vec<u64> = (1..=8).map(|n| c.open_wait(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 120, 120, 120]);
        assert_eq!(c.open_wait(0), Duration::from_secs(5));
        assert_eq!(c.open_wait(u32::MAX), Duration::from_secs(120));
    }
}
