//! Latency-aware "slow": each request class keeps the latencies of its recent good calls, and
//! a call is slow when it takes `k ×` their median (never less than a floor), or longer than
//! the caller's absolute cut-off, whichever comes first.
//!
//! Only successful calls that were not slow teach the baseline, so a sudden slowdown (the
//! Oct 29 kind: 100 ms lists taking 1.2 s) is not learned as the new normal while it lasts; a
//! gradual drift still is, because calls a little slower than usual are not slow.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::config::BreakerConfig;

/// The recent good latencies of one class, oldest first.
#[derive(Debug, Default)]
pub(super) struct Baseline {
    samples: VecDeque<Duration>,
}

/// How one timed call was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slowness {
    /// Slower than usual for its class (relative rule or absolute cut-off): counts toward
    /// *degraded*.
    pub slow: bool,
    /// Slower than the absolute cut-off: also counts toward *opening*. Relative slowness alone
    /// never opens the breaker, because those calls still succeed.
    pub too_slow: bool,
}

/// One class's baseline in the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassLatency {
    /// The caller's class key (e.g. `list`).
    pub class: &'static str,
    /// Good calls remembered.
    pub samples: u32,
    /// Their median; `None` until `baseline_min_samples` are in.
    pub p50: Option<Duration>,
    /// The relative cut-off now in force (`max(k × p50, floor)`); `None` while learning or off.
    pub slow_after: Option<Duration>,
}

impl Baseline {
    /// The median of the remembered samples, once there are enough.
    fn p50(&self, c: &BreakerConfig) -> Option<Duration> {
        if self.samples.len() < c.baseline_min_samples as usize {
            return None;
        }
        let mut v: Vec<Duration> = self.samples.iter().copied().collect();
        v.sort_unstable();
        Some(v[v.len() / 2])
    }

    /// The relative cut-off, if the rule is on and has learned enough.
    fn slow_after(&self, c: &BreakerConfig) -> Option<Duration> {
        if c.slow_multiplier == 0.0 {
            return None;
        }
        let p50 = self.p50(c)?;
        Some(p50.mul_f64(c.slow_multiplier).max(c.slow_floor))
    }

    /// Judges a call that took `elapsed`, with the caller's absolute cut-off `ceiling`, and
    /// learns from it when it succeeded and was not slow.
    pub(super) fn judge(
        &mut self,
        c: &BreakerConfig,
        failure: bool,
        elapsed: Duration,
        ceiling: Duration,
    ) -> Slowness {
        let too_slow = elapsed >= ceiling;
        let relative = self.slow_after(c).is_some_and(|t| elapsed >= t);
        let slow = too_slow || relative;
        if !failure && !slow {
            if self.samples.len() >= c.baseline_samples as usize {
                self.samples.pop_front();
            }
            self.samples.push_back(elapsed);
        }
        Slowness { slow, too_slow }
    }

    pub(super) fn view(&self, class: &'static str, c: &BreakerConfig) -> ClassLatency {
        ClassLatency {
            class,
            samples: self.samples.len() as u32,
            p50: self.p50(c),
            slow_after: self.slow_after(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn learns_then_judges_relative_to_the_median() {
        let c = BreakerConfig::default();
        let mut b = Baseline::default();
        let ceiling = Duration::from_secs(5);
        // Learning: nothing under the ceiling is slow yet.
        for _ in 0..9 {
            assert!(!b.judge(&c, false, MS(100), ceiling).slow);
        }
        assert_eq!(b.view("list", &c).p50, None);
        assert!(
            !b.judge(&c, false, MS(1200), ceiling).slow,
            "still learning"
        );
        // 10 samples now (the 1.2 s one was not slow, so it was learned); median 100 ms.
        assert_eq!(b.view("list", &c).p50, Some(MS(100)));
        // 4 × 100 ms = 400 ms, raised to the 1 s floor.
        assert_eq!(b.view("list", &c).slow_after, Some(MS(1000)));
        let s = b.judge(&c, false, MS(1200), ceiling);
        assert_eq!(
            s,
            Slowness {
                slow: true,
                too_slow: false
            }
        );
        assert!(!b.judge(&c, false, MS(900), ceiling).slow);
        // Slow calls and failures are not learned.
        let before = b.view("list", &c).samples;
        b.judge(&c, false, MS(3000), ceiling);
        b.judge(&c, true, MS(10), ceiling);
        assert_eq!(b.view("list", &c).samples, before);
        // The absolute cut-off still applies, and alone means "too slow".
        let s = b.judge(&c, false, MS(5000), ceiling);
        assert!(s.slow && s.too_slow);
    }

    #[test]
    fn a_slow_class_gets_a_higher_cut_off_and_the_ring_is_bounded() {
        let c = BreakerConfig {
            baseline_samples: 16,
            ..Default::default()
        };
        let mut b = Baseline::default();
        for _ in 0..40 {
            b.judge(&c, false, MS(800), Duration::from_secs(10));
        }
        let v = b.view("view", &c);
        assert_eq!(v.samples, 16);
        assert_eq!(v.slow_after, Some(MS(3200)));
        assert!(!b.judge(&c, false, MS(3000), Duration::from_secs(10)).slow);
        assert!(b.judge(&c, false, MS(3300), Duration::from_secs(10)).slow);
    }

    #[test]
    fn multiplier_zero_is_absolute_only() {
        let c = BreakerConfig {
            slow_multiplier: 0.0,
            ..Default::default()
        };
        let mut b = Baseline::default();
        for _ in 0..20 {
            b.judge(&c, false, MS(10), Duration::from_secs(5));
        }
        assert_eq!(b.view("list", &c).slow_after, None);
        assert!(!b.judge(&c, false, MS(4000), Duration::from_secs(5)).slow);
    }
}
