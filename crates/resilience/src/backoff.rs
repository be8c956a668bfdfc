//! Exponential backoff with AWS-style "full jitter", and the injectable [`Jitter`] source that
//! the breaker shares.
//!
//! `sleep = random(0, min(cap, base · 2^attempt))`: full jitter spreads retries from many
//! clients across the whole interval, which the AWS Architecture Blog measured as the least
//! total work for a contended server. Randomness sits behind [`Jitter`] so tests use
//! [`NoJitter`] and get exactly the ceiling.

use std::time::Duration;

use rand::Rng;

/// A source of randomness for delays.
pub trait Jitter: Send {
    /// Picks a duration in `[0, max]`.
    fn pick(&mut self, max: Duration) -> Duration;
}

/// Uniformly random in `[0, max]`, from the thread-local RNG.
#[derive(Debug, Clone, Copy, Default)]
pub struct FullJitter;

impl Jitter for FullJitter {
    fn pick(&mut self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
    }
}

/// Always `max`: deterministic delays for tests (and for anyone who wants no randomness).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJitter;

impl Jitter for NoJitter {
    fn pick(&mut self, max: Duration) -> Duration {
        max
    }
}

/// Exponential backoff parameters. Attempt numbers start at 0 for the first retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// No delay ceiling exceeds this.
    pub cap: Duration,
}

impl Default for Backoff {
    /// base 100 ms, cap 2 s: short enough for interactive tools, and three retries stay under
    /// a second on average.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        }
    }
}

impl Backoff {
    /// Creates backoff parameters.
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Backoff { base, cap }
    }

    /// `min(cap, base · 2^attempt)`, saturating instead of overflowing.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The delay before retry number `attempt` (0-based): `jitter.pick(ceiling(attempt))`.
    pub fn delay(&self, attempt: u32, jitter: &mut dyn Jitter) -> Duration {
        jitter
            .pick(self.ceiling(attempt))
            .min(self.ceiling(attempt))
    }

    /// Like [`Backoff::delay`], but never shorter than a server's wait hint (`Retry-After`):
    /// the hint is a floor, the jittered delay only spreads clients out above it.
    pub fn delay_with_hint(
        &self,
        attempt: u32,
        hint: Option<Duration>,
        jitter: &mut dyn Jitter,
    ) -> Duration {
        let delay = self.delay(attempt, jitter);
        hint.map_or(delay, |h| h.max(delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn ceilings_double_then_cap() {
        let b = Backoff::default();
        let got: Vec<_> = (0..7).map(|a| b.ceiling(a)).collect();
        assert_eq!(
            got,
            [
                MS(100),
                MS(200),
                MS(400),
                MS(800),
                MS(1600),
                MS(2000),
                MS(2000)
            ]
        );
        assert_eq!(b.ceiling(u32::MAX), MS(2000));
        assert_eq!(b.ceiling(64), MS(2000));
    }

    #[test]
    fn no_jitter_is_the_ceiling() {
        let b = Backoff::default();
        assert_eq!(b.delay(2, &mut NoJitter), MS(400));
        assert_eq!(
            b.delay_with_hint(0, Some(MS(1500)), &mut NoJitter),
            MS(1500)
        );
        assert_eq!(b.delay_with_hint(4, Some(MS(5)), &mut NoJitter), MS(1600));
    }

    #[test]
    fn full_jitter_stays_in_range() {
        let b = Backoff::default();
        let mut j = FullJitter;
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = b.delay(3, &mut j);
            assert!(d <= MS(800));
            distinct.insert(d);
        }
        // 200 uniform draws over 800 ms of nanoseconds are (practically) never all equal.
        assert!(distinct.len() > 1);
        assert_eq!(j.pick(Duration::ZERO), Duration::ZERO);
    }
}
