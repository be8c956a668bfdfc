//! The wall clock certificates are dated with, injectable so tests can move time without sleeping.
//!
//! Certificate validity is wall-clock (UTC) time, not a monotonic `Instant`, so this is a small
//! trait rather than `tokio::time`.

use std::fmt::Debug;
use std::sync::{Mutex, PoisonError};

use time::{Duration, OffsetDateTime};

/// Source of the current UTC time.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> OffsetDateTime;
}

/// The real system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when told to (tests, and callers that want deterministic dates).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<OffsetDateTime>,
}

impl ManualClock {
    pub fn new(now: OffsetDateTime) -> Self {
        Self {
            now: Mutex::new(now),
        }
    }

    pub fn set(&self, now: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
