//! Upstream cooldown: "do not call this upstream before T", set from `Retry-After` /
//! `x-ratelimit-reset` so one throttled response stops every caller, not just the one that
//! saw it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A thread-safe "hold until" marker. Later deadlines win; earlier ones never shorten a hold.
#[derive(Debug, Default)]
pub struct Cooldown {
    until: Mutex<Option<Instant>>,
    /// Whether `until` holds a deadline, set under its lock: every call asks
    /// [`Cooldown::remaining`], almost always with no hold, and is answered without the clock
    /// or the lock.
    held: AtomicBool,
}

impl Cooldown {
    /// No hold.
    pub fn new() -> Self {
        Cooldown::default()
    }

    /// Holds calls until `at`, unless a later hold is already in place.
    pub fn hold_until(&self, at: Instant) {
        let mut until = self.lock();
        *until = Some(until.map_or(at, |u| u.max(at)));
        self.held.store(true, Ordering::Release);
    }

    /// Holds calls for `wait` from now (see [`Cooldown::hold_until`]).
    pub fn hold_for(&self, wait: Duration) {
        self.hold_until(Instant::now() + wait);
    }

    /// How long calls must still wait; `None` when not holding.
    pub fn remaining(&self) -> Option<Duration> {
        if !self.held.load(Ordering::Acquire) {
            return None;
        }
        let now = Instant::now();
        let mut until = self.lock();
        match *until {
            Some(u) if u > now => Some(u - now),
            Some(_) => {
                *until = None; // expired: forget it so later reads are cheap
                self.held.store(false, Ordering::Release);
                None
            }
            None => None,
        }
    }

    /// Ends any hold at once (e.g. the user pressed "retry now").
    pub fn clear(&self) {
        let mut until = self.lock();
        *until = None;
        self.held.store(false, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The guarded value is a plain Option; a panic elsewhere cannot leave it torn.
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    #[tokio::test(start_paused = true)]
    async fn keeps_the_latest_hold_and_expires() {
        let c = Cooldown::new();
        assert_eq!(c.remaining(), None);
        c.hold_for(Duration::from_secs(10));
        c.hold_for(Duration::from_secs(3)); // shorter: ignored
        assert_eq!(c.remaining(), Some(Duration::from_secs(10)));
        advance(Duration::from_secs(4)).await;
        assert_eq!(c.remaining(), Some(Duration::from_secs(6)));
        c.hold_until(Instant::now() + Duration::from_secs(20)); // longer: wins
        assert_eq!(c.remaining(), Some(Duration::from_secs(20)));
        advance(Duration::from_secs(20)).await;
        assert_eq!(c.remaining(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn clear_ends_the_hold() {
        let c = Cooldown::new();
        c.hold_for(Duration::from_secs(60));
        c.clear();
        assert_eq!(c.remaining(), None);
    }

    /// The quick "no hold" answer never hides a hold set after an expiry or a clear.
    #[tokio::test(start_paused = true)]
    async fn a_hold_after_an_expiry_or_a_clear_is_seen() {
        let c = Cooldown::new();
        c.hold_for(Duration::from_secs(1));
        advance(Duration::from_secs(2)).await;
        assert_eq!(c.remaining(), None);
        c.hold_for(Duration::from_secs(5));
        assert_eq!(c.remaining(), Some(Duration::from_secs(5)));
        c.clear();
        assert_eq!(c.remaining(), None);
        c.hold_for(Duration::from_secs(7));
        assert_eq!(c.remaining(), Some(Duration::from_secs(7)));
    }
}
