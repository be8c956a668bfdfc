//! What Weir saved lately (`saved` in the status document): upstream calls avoided, failures
//! hidden and creates kept, as differences of the engine's running totals against a sample
//! taken about an hour ago. Samples are taken at most once a minute, when the status is read,
//! so an idle Weir keeps no timer for them.

use crate::status::SavedStatus;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How far back the figures reach.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);
/// How often a sample is kept (at most 62 are held).
const STEP: Duration = Duration::from_secs(60);

/// The engine's running totals the figures are differences of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SavedTotals {
    /// Fresh and stale cache hits plus coalesced followers: calls never sent upstream.
    pub avoided: u64,
    /// Stale copies served instead of a failing, slow or struggling upstream's answer.
    pub hidden: u64,
    /// Creates stored in the queue because the upstream could not take them.
    pub kept: u64,
}

/// The samples, oldest first; the first is the engine's start (all zero).
#[derive(Debug)]
pub(crate) struct SavedWindow {
    samples: Mutex<VecDeque<(Instant, SavedTotals)>>,
}

impl SavedWindow {
    pub fn new(started: Instant) -> SavedWindow {
        SavedWindow {
            samples: Mutex::new(VecDeque::from([(started, SavedTotals::default())])),
        }
    }

    /// The figures at `now` for the totals `now`: the change since the newest sample that is
    /// at least [`WINDOW`] old, or since the oldest kept (the engine's start) when none is.
    pub fn observe(&self, now: Instant, totals: SavedTotals) -> SavedStatus {
        let Ok(mut samples) = self.samples.lock() else {
            return SavedStatus::default();
        };
        if samples
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= STEP)
        {
            samples.push_back((now, totals));
        }
        let cut = now.checked_sub(WINDOW);
        while samples.len() >= 2 && cut.is_some_and(|cut| samples[1].0 <= cut) {
            samples.pop_front();
        }
        let (at, base) = samples.front().copied().unwrap_or((now, totals));
        SavedStatus {
            window_secs: now.saturating_duration_since(at).as_secs(),
            // Totals only grow; a learned upstream dropped from the list takes its share with it.
            upstream_calls_avoided: totals.avoided.saturating_sub(base.avoided),
            failures_hidden: totals.hidden.saturating_sub(base.hidden),
            creates_kept: totals.kept.saturating_sub(base.kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(avoided: u64, hidden: u64, kept: u64) -> SavedTotals {
        SavedTotals {
            avoided,
            hidden,
            kept,
        }
    }

    #[test]
    fn within_the_first_hour_everything_since_start_counts() {
        let start = Instant::now();
        let w = SavedWindow::new(start);
        let s = w.observe(start + Duration::from_secs(600), t(40, 3, 2));
        assert_eq!(s.window_secs, 600);
        assert_eq!(
            (s.upstream_calls_avoided, s.failures_hidden, s.creates_kept),
            (40, 3, 2)
        );
    }

    #[test]
    fn after_an_hour_only_the_last_hour_counts() {
        let start = Instant::now();
        let w = SavedWindow::new(start);
        let min = |m: u64| start + Duration::from_secs(60 * m);
        // Read once a minute for two hours; 10 calls avoided a minute, a create every 10.
        for m in 1..=120 {
            w.observe(min(m), t(10 * m, m / 2, m / 10));
        }
        let s = w.observe(min(120), t(1200, 60, 12));
        assert_eq!(s.window_secs, 3600);
        assert_eq!(s.upstream_calls_avoided, 600);
        assert_eq!(s.failures_hidden, 30);
        assert_eq!(s.creates_kept, 6);
        // No more than an hour and a minute of samples is held.
        assert!(w.samples.lock().unwrap().len() <= 62);
    }

    #[test]
    fn a_late_first_read_says_how_long_its_window_is() {
        // Nobody read the status for three hours: the only base is the start.
        let start = Instant::now();
        let w = SavedWindow::new(start);
        let s = w.observe(start + Duration::from_secs(3 * 3600), t(90, 9, 1));
        assert_eq!(s.window_secs, 3 * 3600);
        assert_eq!(s.upstream_calls_avoided, 90);
        // Read again an hour and a half later: the figures cover that hour, not the start.
        let s = w.observe(start + Duration::from_secs(4 * 3600 + 1800), t(150, 10, 4));
        assert_eq!(s.window_secs, 5400);
        assert_eq!(
            (s.upstream_calls_avoided, s.failures_hidden, s.creates_kept),
            (60, 1, 3)
        );
    }

    #[test]
    fn reads_more_often_than_a_minute_keep_no_extra_samples() {
        let start = Instant::now();
        let w = SavedWindow::new(start);
        for s in 1..=300 {
            w.observe(start + Duration::from_secs(s), t(s, 0, 0));
        }
        // The start and one a minute.
        assert_eq!(w.samples.lock().unwrap().len(), 6);
    }

    #[test]
    fn totals_that_shrink_count_as_nothing_saved() {
        let start = Instant::now();
        let w = SavedWindow::new(start);
        w.observe(start + Duration::from_secs(3700), t(50, 5, 5));
        let s = w.observe(start + Duration::from_secs(7400), t(20, 1, 1));
        assert_eq!(
            (s.upstream_calls_avoided, s.failures_hidden, s.creates_kept),
            (0, 0, 0)
        );
    }
}
