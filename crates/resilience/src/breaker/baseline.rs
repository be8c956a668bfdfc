//! Latency-aware "slow": each request class keeps the latencies of its recent good calls, and
//! a call is slow when it takes `k ×` their median (never less than a floor), or longer than
//! the caller's absolute cut-off, whichever comes first.
//!
//! Only successful calls that were not slow teach the baseline, so a sudden slowdown (the
//! Oct 29 kind: 100 ms lists taking 1.2 s) is not learned as the new normal while it lasts; a
//! gradual drift still is, because calls a little slower than usual are not slow.
//!
//! Until a class has seen enough good calls, the caller's *prior* (the class's documented
//! normal latency) stands in for the median: a Weir started during a slowdown has no good calls
//! to learn from, and without a prior it would never see the slowdown as slow. The samples can
//! be taken out and put back ([`Baseline::samples`], [`Baseline::restore`]) so a restart does
//! not start from nothing.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::config::BreakerConfig;

/// The recent good latencies of one class, oldest first.
#[derive(Debug, Default)]
pub(super) struct Baseline {
    /// In nanoseconds (as [`nanos`] gives them): one integer compare per step of a search,
    /// where a `Duration` compares two fields.
    samples: VecDeque<u64>,
    /// The same samples in ascending order, kept in step with `samples` (one binary search and
    /// one short shift per call), so the median is an index and not a selection over a copy
    /// on every recorded call (a selection was ~4 % of a pass-through request's instructions).
    sorted: Vec<u64>,
    /// The last prior the caller gave (judging keeps it current).
    prior: Option<Duration>,
}

/// What the caller knows about a class's latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The class's documented normal latency: the baseline until enough good calls are seen
    /// (`None`: no prior, only learned medians and the absolute cut-off count).
    pub normal: Option<Duration>,
    /// The absolute slow-call cut-off.
    pub ceiling: Duration,
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
    /// Their median once `baseline_min_samples` are in; before that the class's prior (see
    /// `prior`), or `None` without one.
    pub p50: Option<Duration>,
    /// `p50` is the documented normal latency, not a learned median.
    pub prior: bool,
    /// The relative cut-off now in force (`max(k × p50, floor)`); `None` while learning or off.
    pub slow_after: Option<Duration>,
}

impl Baseline {
    /// The median of the remembered samples, once there are enough; until then the prior.
    fn p50(&self, c: &BreakerConfig) -> Option<Duration> {
        if !self.learned(c) {
            return self.prior;
        }
        self.sorted
            .get(self.sorted.len() / 2)
            .map(|n| Duration::from_nanos(*n))
    }

    fn learned(&self, c: &BreakerConfig) -> bool {
        self.samples.len() >= c.baseline_min_samples as usize
    }

    /// The relative cut-off, if the rule is on and has learned enough (or has a prior).
    fn slow_after(&self, c: &BreakerConfig) -> Option<Duration> {
        if c.slow_multiplier == 0.0 {
            return None;
        }
        let p50 = self.p50(c)?;
        Some(p50.mul_f64(c.slow_multiplier).max(c.slow_floor))
    }

    /// Judges a call that took `elapsed` with the caller's `timing`, and learns from it when
    /// it succeeded and was not slow.
    pub(super) fn judge(
        &mut self,
        c: &BreakerConfig,
        failure: bool,
        elapsed: Duration,
        timing: Timing,
    ) -> Slowness {
        self.prior = timing.normal.filter(|d| !d.is_zero());
        let too_slow = elapsed >= timing.ceiling;
        let relative = self.slow_after(c).is_some_and(|t| elapsed >= t);
        let slow = too_slow || relative;
        if !failure && !slow {
            self.learn(c, elapsed);
        }
        Slowness { slow, too_slow }
    }

    fn learn(&mut self, c: &BreakerConfig, elapsed: Duration) {
        let elapsed = nanos(elapsed);
        let bound = c.baseline_samples.max(1) as usize;
        // Over the bound (it was lowered): the oldest go until there is room for one.
        while self.samples.len() > bound {
            if let Some(old) = self.samples.pop_front() {
                if let Ok(i) = self.sorted.binary_search(&old) {
                    self.sorted.remove(i);
                }
            }
        }
        if self.samples.len() == bound {
            // Full (every call once learned): the oldest leaves as the new one comes in, by one
            // shift of the sorted samples between their two places, not a removal and an
            // insertion that each shift everything after them.
            if let Some(old) = self.samples.pop_front() {
                self.samples.push_back(elapsed);
                match self.sorted.binary_search(&old) {
                    Ok(i) => replace_sorted(&mut self.sorted, i, elapsed),
                    // Never: the two are kept in step.
                    Err(_) => insert_sorted(&mut self.sorted, elapsed),
                }
                return;
            }
        }
        self.samples.push_back(elapsed);
        insert_sorted(&mut self.sorted, elapsed);
    }

    /// The remembered good latencies, oldest first (to persist them).
    pub(super) fn samples(&self) -> Vec<Duration> {
        self.samples
            .iter()
            .map(|n| Duration::from_nanos(*n))
            .collect()
    }

    /// Puts back samples kept from an earlier run, older than any learned since (which stay
    /// the newest), within the ring's bound.
    pub(super) fn restore(&mut self, c: &BreakerConfig, old: &[Duration]) {
        let learned = std::mem::take(&mut self.samples);
        self.sorted.clear();
        for d in old.iter().copied() {
            self.learn(c, d);
        }
        for n in learned {
            self.learn(c, Duration::from_nanos(n));
        }
    }

    pub(super) fn view(&self, class: &'static str, c: &BreakerConfig) -> ClassLatency {
        ClassLatency {
            class,
            samples: self.samples.len() as u32,
            p50: self.p50(c),
            prior: !self.learned(c) && self.prior.is_some(),
            slow_after: self.slow_after(c),
        }
    }
}

/// A latency in nanoseconds, saturating (585 years: no call lasts that long).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn insert_sorted(sorted: &mut Vec<u64>, d: u64) {
    let at = sorted.partition_point(|x| *x < d);
    sorted.insert(at, d);
}

/// Replaces `sorted[i]` with `d`, keeping `sorted` ascending: the values between the old
/// place and the new one move by one (one `memmove`; a generic rotate by one cost more).
fn replace_sorted(sorted: &mut [u64], i: usize, d: u64) {
    let at = sorted.partition_point(|x| *x < d);
    if at <= i {
        sorted.copy_within(at..i, at + 1);
        sorted[at] = d;
    } else {
        sorted.copy_within(i + 1..at, i);
        sorted[at - 1] = d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// No prior: only learned medians and the absolute cut-off.
    fn cut(ceiling: Duration) -> Timing {
        Timing {
            normal: None,
            ceiling,
        }
    }

    #[test]
    fn learns_then_judges_relative_to_the_median() {
        let c = BreakerConfig::default();
        let mut b = Baseline::default();
        let ceiling = cut(Duration::from_secs(5));
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
            b.judge(&c, false, MS(800), cut(Duration::from_secs(10)));
        }
        let v = b.view("view", &c);
        assert_eq!(v.samples, 16);
        assert_eq!(v.slow_after, Some(MS(3200)));
        assert!(
            !b.judge(&c, false, MS(3000), cut(Duration::from_secs(10)))
                .slow
        );
        assert!(
            b.judge(&c, false, MS(3300), cut(Duration::from_secs(10)))
                .slow
        );
    }

    #[test]
    fn multiplier_zero_is_absolute_only() {
        let c = BreakerConfig {
            slow_multiplier: 0.0,
            ..Default::default()
        };
        let mut b = Baseline::default();
        for _ in 0..20 {
            b.judge(&c, false, MS(10), cut(Duration::from_secs(5)));
        }
        assert_eq!(b.view("list", &c).slow_after, None);
        assert!(
            !b.judge(&c, false, MS(4000), cut(Duration::from_secs(5)))
                .slow
        );
    }

    #[test]
    fn the_prior_judges_until_enough_good_calls_are_seen() {
        let c = BreakerConfig::default();
        let mut b = Baseline::default();
        let t = Timing {
            normal: Some(MS(250)),
            ceiling: Duration::from_secs(5),
        };
        // From the first call: 4 × 250 ms = 1 s; 3 s is slow, and not learned.
        let v = b.view("list", &c);
        assert_eq!((v.p50, v.prior), (None, false), "no prior given yet");
        assert!(b.judge(&c, false, MS(3000), t).slow);
        let v = b.view("list", &c);
        assert_eq!((v.p50, v.prior, v.samples), (Some(MS(250)), true, 0));
        assert_eq!(v.slow_after, Some(MS(1000)));
        // Good calls teach; once there are enough, their median takes over.
        for _ in 0..10 {
            assert!(!b.judge(&c, false, MS(600), t).slow);
        }
        let v = b.view("list", &c);
        assert_eq!((v.p50, v.prior), (Some(MS(600)), false));
        assert_eq!(v.slow_after, Some(MS(2400)));
    }

    #[test]
    fn restored_samples_are_older_than_new_ones_and_bounded() {
        let c = BreakerConfig {
            baseline_samples: 4,
            ..Default::default()
        };
        let mut b = Baseline::default();
        b.judge(&c, false, MS(7), cut(Duration::from_secs(5)));
        b.restore(&c, &[MS(1), MS(2), MS(3), MS(4), MS(5)]);
        assert_eq!(b.samples(), vec![MS(3), MS(4), MS(5), MS(7)]);
    }

    /// Replacing one value moves only the values between its old place and the new one, and
    /// leaves the order ascending, whichever way the new value lies (a sort says what is right).
    #[test]
    fn a_replaced_value_keeps_the_order() {
        let base: Vec<u64> = [1, 3, 3, 5, 8, 13].to_vec();
        for i in 0..base.len() {
            for new in 0..15 {
                let mut got = base.clone();
                replace_sorted(&mut got, i, new);
                let mut want = base.clone();
                want[i] = new;
                want.sort();
                assert_eq!(got, want, "replacing #{i} with {new}");
            }
        }
    }

    /// The kept order gives the median a selection over the ring gives, through evictions,
    /// repeated values and a restore (a fixed pseudo-random sequence).
    #[test]
    fn the_median_is_the_rings_median_through_evictions() {
        let c = BreakerConfig {
            baseline_samples: 9,
            baseline_min_samples: 1,
            slow_multiplier: 0.0,
            ..Default::default()
        };
        let mut b = Baseline::default();
        let mut x: u64 = 42;
        for n in 0..500 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            b.judge(&c, false, MS((x >> 33) % 40), cut(Duration::from_secs(5)));
            if n == 250 {
                b.restore(&c, &[MS(3), MS(3), MS(39)]);
            }
            let mut ring = b.samples();
            let mid = ring.len() / 2;
            let want = *ring.select_nth_unstable(mid).1;
            assert_eq!(b.view("list", &c).p50, Some(want), "after {n} calls");
            assert_eq!(b.sorted.len(), b.samples.len());
        }
    }
}
