//! Retry budget per upstream (Finagle/Linkerd style): retries may add at most `ratio` extra
//! load over a sliding window, plus a small floor so a quiet upstream can still be retried.
//!
//! A retry is allowed when, over the window,
//! `retries + 1 ≤ ratio · requests + min_retries_per_sec · window_secs`.
//! Per-request retry limits cannot stop a retry storm when *every* request fails — each one
//! still multiplies load by its attempt count; a budget caps the total instead.
//!
//! Call [`RetryBudget::record_request`] once per *original* request (not per retry), and
//! [`RetryBudget::try_withdraw`] before each retry.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::window::{Tally, TimeWindow};

/// Retry budget settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// Retries allowed per original request over the window (0.2 = at most 20 % extra load).
    pub ratio: f64,
    /// Length of the sliding window.
    pub window: Duration,
    /// Retries always allowed per second of window, whatever the request count.
    pub min_retries_per_sec: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            ratio: 0.2,
            window: Duration::from_secs(10),
            min_retries_per_sec: 10,
        }
    }
}

/// Counters for metrics and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BudgetStats {
    /// Original requests recorded in the current window.
    pub requests_in_window: u64,
    /// Retries allowed in the current window.
    pub retries_in_window: u64,
    /// Retries still available right now.
    pub available: u64,
    /// Retries allowed since creation.
    pub retries_allowed_total: u64,
    /// Retries refused since creation.
    pub retries_refused_total: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    requests: u64,
    retries: u64,
}

impl Tally for Counts {
    fn merge(&mut self, other: &Self) {
        self.requests += other.requests;
        self.retries += other.retries;
    }
}

#[derive(Debug)]
struct Inner {
    config: BudgetConfig,
    reserve: f64,
    window: TimeWindow<Counts>,
    allowed_total: u64,
    refused_total: u64,
}

/// A thread-safe retry budget for one upstream.
#[derive(Debug)]
pub struct RetryBudget {
    inner: Mutex<Inner>,
}

/// Buckets per window: fine enough that the window slides smoothly (1 s at the default).
const BUCKETS: u32 = 10;

impl RetryBudget {
    /// A budget with the given settings. A negative or NaN `ratio` is treated as 0.
    pub fn new(config: BudgetConfig) -> Self {
        let (config, reserve) = sanitise(config);
        RetryBudget {
            inner: Mutex::new(Inner {
                config,
                reserve,
                window: TimeWindow::new(config.window, BUCKETS, Instant::now()),
                allowed_total: 0,
                refused_total: 0,
            }),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> BudgetConfig {
        self.lock().config
    }

    /// Applies new settings in place; the totals are kept, and the window's counts too unless
    /// its length changed.
    pub fn reconfigure(&self, config: BudgetConfig) {
        let (config, reserve) = sanitise(config);
        let mut inner = self.lock();
        if config.window != inner.config.window {
            inner.window = TimeWindow::new(config.window, BUCKETS, Instant::now());
        }
        inner.config = config;
        inner.reserve = reserve;
    }

    /// Records one original request (deposits `ratio` of a retry).
    pub fn record_request(&self) {
        self.record_request_at(Instant::now());
    }

    /// [`RetryBudget::record_request`] at `now`, for a caller that has just read the clock.
    pub fn record_request_at(&self, now: Instant) {
        let mut inner = self.lock();
        inner.window.current(now).requests += 1;
    }

    /// Takes one retry from the budget; `false` means "do not retry".
    pub fn try_withdraw(&self) -> bool {
        let now = Instant::now();
        let mut inner = self.lock();
        let counts = inner.window.sum(now);
        if available(&inner, counts) >= 1 {
            inner.window.current(now).retries += 1;
            inner.allowed_total += 1;
            true
        } else {
            inner.refused_total += 1;
            false
        }
    }

    /// Current counters.
    pub fn stats(&self) -> BudgetStats {
        let now = Instant::now();
        let inner = self.lock();
        let counts = inner.window.sum(now);
        BudgetStats {
            requests_in_window: counts.requests,
            retries_in_window: counts.retries,
            available: available(&inner, counts),
            retries_allowed_total: inner.allowed_total,
            retries_refused_total: inner.refused_total,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update of plain counters;
        // the counters are still usable, so carry on rather than spread the panic.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A negative or NaN ratio becomes 0; the reserve is the floor's retries per window.
fn sanitise(config: BudgetConfig) -> (BudgetConfig, f64) {
    let ratio = if config.ratio.is_finite() && config.ratio > 0.0 {
        config.ratio
    } else {
        0.0
    };
    let config = BudgetConfig { ratio, ..config };
    let reserve = f64::from(config.min_retries_per_sec) * config.window.as_secs_f64();
    (config, reserve)
}

fn available(inner: &Inner, counts: Counts) -> u64 {
    // Float is exact enough here: counts are far below 2^52.
    let limit = inner.config.ratio * counts.requests as f64 + inner.reserve;
    (limit.floor() as u64).saturating_sub(counts.retries)
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::new(BudgetConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn all_failures_are_capped_by_ratio_plus_reserve() {
        let budget = RetryBudget::default();
        let mut allowed = 0;
        for _ in 0..1000 {
            budget.record_request();
            // Every request fails and wants three retries.
            for _ in 0..3 {
                if budget.try_withdraw() {
                    allowed += 1;
                }
            }
        }
        // 20 % of 1000 + 10/s · 10 s.
        assert_eq!(allowed, 300);
        let stats = budget.stats();
        assert_eq!(stats.retries_allowed_total, 300);
        assert_eq!(stats.retries_refused_total, 3000 - 300);
        assert_eq!(stats.available, 0);
        assert_eq!(stats.requests_in_window, 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn reserve_allows_retries_when_quiet() {
        let budget = RetryBudget::new(BudgetConfig {
            ratio: 0.2,
            window: Duration::from_secs(10),
            min_retries_per_sec: 1,
        });
        let allowed = (0..20).filter(|_| budget.try_withdraw()).count();
        assert_eq!(allowed, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn window_slides() {
        let budget = RetryBudget::new(BudgetConfig {
            ratio: 0.5,
            window: Duration::from_secs(10),
            min_retries_per_sec: 0,
        });
        for _ in 0..10 {
            budget.record_request();
        }
        assert_eq!((0..10).filter(|_| budget.try_withdraw()).count(), 5);
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..4 {
            budget.record_request();
        }
        // 14 requests · 0.5 = 7, 5 used.
        assert_eq!((0..10).filter(|_| budget.try_withdraw()).count(), 2);
        // The first batch (and its 5 retries) leaves the window; the second stays.
        tokio::time::advance(Duration::from_secs(5)).await;
        let stats = budget.stats();
        assert_eq!(stats.requests_in_window, 4);
        assert_eq!(stats.retries_in_window, 2);
        assert_eq!(stats.available, 0);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(budget.stats().requests_in_window, 0);
        assert!(!budget.try_withdraw());
    }

    #[tokio::test(start_paused = true)]
    async fn bad_ratio_means_reserve_only() {
        let budget = RetryBudget::new(BudgetConfig {
            ratio: f64::NAN,
            window: Duration::from_secs(1),
            min_retries_per_sec: 2,
        });
        for _ in 0..100 {
            budget.record_request();
        }
        assert_eq!((0..10).filter(|_| budget.try_withdraw()).count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn reconfigure_keeps_the_window_and_applies_the_new_ratio() {
        let budget = RetryBudget::new(BudgetConfig {
            ratio: 0.1,
            window: Duration::from_secs(10),
            min_retries_per_sec: 0,
        });
        for _ in 0..10 {
            budget.record_request();
        }
        assert_eq!((0..5).filter(|_| budget.try_withdraw()).count(), 1);
        budget.reconfigure(BudgetConfig {
            ratio: 0.5,
            window: Duration::from_secs(10),
            min_retries_per_sec: 0,
        });
        // Same 10 requests and 1 retry in the window: 0.5 · 10 − 1 = 4 more.
        assert_eq!((0..10).filter(|_| budget.try_withdraw()).count(), 4);
        assert_eq!(budget.stats().retries_allowed_total, 5);
        assert_eq!(budget.config().ratio, 0.5);
    }

    #[test]
    fn shared_across_threads() {
        let budget = std::sync::Arc::new(RetryBudget::default());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let b = budget.clone();
                std::thread::spawn(move || (0..100).filter(|_| b.try_withdraw()).count())
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 100);
    }
}
