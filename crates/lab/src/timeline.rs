//! Per-second request counters. The upstream counts every request it receives here, by arrival
//! time, so amplification is computed from the upstream's own count and never from what the
//! clients believe they sent.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use tokio::time::Instant;

/// Buckets beyond this many seconds all land in the last one (runs are bounded far below it).
const MAX_SECONDS: usize = 3600;

/// Requests per one-second bucket since [`Timeline::restart`].
#[derive(Debug)]
pub struct Timeline {
    origin: Mutex<Instant>,
    buckets: Vec<AtomicU64>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new()
    }
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline {
            origin: Mutex::new(Instant::now()),
            buckets: (0..MAX_SECONDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Zeroes the counts and makes "now" second 0 (called when the clients start).
    pub fn restart(&self) {
        if let Ok(mut o) = self.origin.lock() {
            *o = Instant::now();
        }
        for b in &self.buckets {
            b.store(0, Relaxed);
        }
    }

    /// The moment second 0 began.
    pub fn origin(&self) -> Instant {
        self.origin
            .lock()
            .map(|o| *o)
            .unwrap_or_else(|p| *p.into_inner())
    }

    /// Counts one request arriving now.
    pub fn record(&self) {
        let secs = Instant::now()
            .saturating_duration_since(self.origin())
            .as_secs() as usize;
        self.buckets[secs.min(MAX_SECONDS - 1)].fetch_add(1, Relaxed);
    }

    /// The counts of seconds `0..seconds`.
    pub fn per_second(&self, seconds: usize) -> Vec<u64> {
        self.buckets
            .iter()
            .take(seconds.min(MAX_SECONDS))
            .map(|b| b.load(Relaxed))
            .collect()
    }

    /// Every request counted so far, whatever its second.
    pub fn total(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }
}

/// Mean requests per second over seconds `from..to` of a per-second series.
pub fn mean_rate(series: &[u64], from: usize, to: usize) -> f64 {
    let to = to.min(series.len());
    if to <= from {
        return 0.0;
    }
    series[from..to].iter().sum::<u64>() as f64 / (to - from) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_land_in_their_second() {
        let t = Timeline::new();
        t.record();
        tokio::time::advance(std::time::Duration::from_millis(1500)).await;
        t.record();
        t.record();
        assert_eq!(t.per_second(3), vec![1, 2, 0]);
        assert_eq!(t.total(), 3);
        t.restart();
        assert_eq!(t.total(), 0);
        assert_eq!(mean_rate(&[2, 4, 6], 1, 3), 5.0);
        assert_eq!(mean_rate(&[2], 1, 3), 0.0);
    }
}
