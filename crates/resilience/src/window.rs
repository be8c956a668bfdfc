//! A time-bucketed sliding window of tallies, shared by the retry budget and the breaker.
//!
//! The window is split into `n` buckets of `window / n` each. A record lands in the bucket of
//! the current instant; a sum covers the current bucket and the `n - 1` before it, so it sees
//! between `window · (n-1)/n` and `window` of history. Buckets are reused in a ring and reset
//! lazily when their epoch is stale, so memory is fixed and no background task is needed.

use std::time::Duration;

use tokio::time::Instant;

/// Something that can be added up bucket by bucket.
pub(crate) trait Tally: Default + Copy {
    /// Adds `other` into `self`.
    fn merge(&mut self, other: &Self);
}

/// Epoch of a slot that holds nothing; no real epoch reaches it.
const EMPTY: u64 = u64::MAX;

#[derive(Debug)]
pub(crate) struct TimeWindow<T> {
    origin: Instant,
    /// At least 1. Nanoseconds as a `u64` (584 years): a `u128` division on every recorded
    /// call cost more than the rest of the bucket arithmetic.
    bucket_nanos: u64,
    /// `(epoch, tally)` per ring slot; `epoch` is the bucket index since `origin`.
    slots: Vec<(u64, T)>,
    /// The sum at an epoch ([`TimeWindow::sum_at`]'s), kept in step by [`TimeWindow::add_at`]
    /// while records land in that epoch, so a record followed by a sum (the breaker's, on
    /// every call) does not add up every bucket again; `EMPTY` when not known (a bucket was
    /// handed out to be written, or the window cleared).
    summed: (u64, T),
}

impl<T: Tally> TimeWindow<T> {
    /// A window of `window` split into `buckets` buckets (both clamped to sane minimums, so a
    /// zero never divides anything).
    pub(crate) fn new(window: Duration, buckets: u32, now: Instant) -> Self {
        let buckets = buckets.max(1);
        let bucket_nanos = u64::try_from(window.as_nanos() / u128::from(buckets))
            .unwrap_or(u64::MAX)
            .max(1);
        TimeWindow {
            origin: now,
            bucket_nanos,
            slots: vec![(EMPTY, T::default()); buckets as usize],
            summed: (EMPTY, T::default()),
        }
    }

    /// The bucket index of `now` since the origin (for [`TimeWindow::current_at`] and
    /// [`TimeWindow::sum_at`], so a record and the sum after it work it out once).
    pub(crate) fn epoch(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        nanos / self.bucket_nanos
    }

    /// The tally of the current bucket, for recording into.
    pub(crate) fn current(&mut self, now: Instant) -> &mut T {
        let epoch = self.epoch(now);
        self.current_at(epoch)
    }

    /// [`TimeWindow::current`] for an `epoch` already worked out.
    pub(crate) fn current_at(&mut self, epoch: u64) -> &mut T {
        // Written by the caller: the kept sum no longer knows it.
        self.summed.0 = EMPTY;
        self.bucket_at(epoch)
    }

    /// Adds `add` into the bucket of `epoch` and returns the window's sum at `epoch` after it
    /// ([`TimeWindow::sum_at`]'s), from the kept sum when the last one was at this epoch.
    pub(crate) fn add_at(&mut self, epoch: u64, add: &T) -> T {
        self.bucket_at(epoch).merge(add);
        if self.summed.0 == epoch {
            self.summed.1.merge(add);
        } else {
            self.summed = (epoch, self.sum_over(epoch));
        }
        self.summed.1
    }

    /// The bucket of `epoch`, emptied first if it held an older one's.
    fn bucket_at(&mut self, epoch: u64) -> &mut T {
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(epoch % len) as usize];
        if slot.0 != epoch {
            *slot = (epoch, T::default());
        }
        &mut slot.1
    }

    /// The sum of all buckets still inside the window at `now`.
    pub(crate) fn sum(&self, now: Instant) -> T {
        self.sum_at(self.epoch(now))
    }

    /// [`TimeWindow::sum`] for an `epoch` already worked out.
    pub(crate) fn sum_at(&self, epoch: u64) -> T {
        if self.summed.0 == epoch {
            return self.summed.1;
        }
        self.sum_over(epoch)
    }

    /// The sum of the buckets inside the window at `epoch`, added up.
    fn sum_over(&self, epoch: u64) -> T {
        let oldest = epoch.saturating_sub(self.slots.len() as u64 - 1);
        let mut total = T::default();
        for (e, t) in &self.slots {
            if (oldest..=epoch).contains(e) {
                total.merge(t);
            }
        }
        total
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        for slot in &mut self.slots {
            *slot = (EMPTY, T::default());
        }
        self.summed.0 = EMPTY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    struct Count(u64);
    impl Tally for Count {
        fn merge(&mut self, other: &Self) {
            self.0 += other.0;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slides_and_clears() {
        let start = Instant::now();
        let mut w = TimeWindow::<Count>::new(Duration::from_secs(10), 10, start);
        w.current(start).0 += 5;
        assert_eq!(w.sum(start), Count(5));
        tokio::time::advance(Duration::from_secs(5)).await;
        w.current(Instant::now()).0 += 3;
        assert_eq!(w.sum(Instant::now()), Count(8));
        // 10 s after the first record its bucket has left the window.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(w.sum(Instant::now()), Count(3));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(w.sum(Instant::now()), Count(0));
        w.current(Instant::now()).0 += 1;
        w.clear();
        assert_eq!(w.sum(Instant::now()), Count(0));
        w.current(Instant::now()).0 += 2;
        assert_eq!(w.sum(Instant::now()), Count(2));
    }

    /// Buckets shorter than a second are counted from whole seconds and nanoseconds alike.
    #[tokio::test(start_paused = true)]
    async fn sub_second_buckets_are_counted_exactly() {
        let start = Instant::now();
        let w = TimeWindow::<Count>::new(Duration::from_secs(1), 4, start);
        assert_eq!(w.epoch(start), 0);
        assert_eq!(w.epoch(start + Duration::from_millis(249)), 0);
        assert_eq!(w.epoch(start + Duration::from_millis(250)), 1);
        assert_eq!(w.epoch(start + Duration::from_millis(1_300)), 5);
        assert_eq!(w.epoch(start + Duration::from_secs(3_600)), 14_400);
    }

    /// The kept sum is always the buckets' own sum: records at one epoch and the next, epochs
    /// out of order (two threads' clocks), buckets written directly, clears (a fixed
    /// pseudo-random sequence).
    #[tokio::test(start_paused = true)]
    async fn the_kept_sum_is_the_buckets_sum() {
        let start = Instant::now();
        let mut w = TimeWindow::<Count>::new(Duration::from_secs(1), 4, start);
        let mut x: u64 = 7;
        let mut epoch = 0u64;
        for n in 0..2_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (x >> 33) % 16 {
                0..=2 => epoch += 1,
                3 => epoch += 5,
                4 => w.current_at(epoch).0 += 2,
                5 if n % 7 == 0 => w.clear(),
                _ => {}
            }
            let at = epoch.saturating_sub((x >> 40) % 2);
            let got = w.add_at(at, &Count(1 + (x >> 50) % 3));
            assert_eq!(got, w.sum_over(at), "step {n}");
            assert_eq!(w.sum_at(epoch), w.sum_over(epoch), "step {n}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn records_at_origin_after_clear_count() {
        let start = Instant::now();
        let mut w = TimeWindow::<Count>::new(Duration::from_secs(1), 4, start);
        w.clear();
        assert_eq!(w.sum(start), Count(0));
        w.current(start).0 += 1;
        assert_eq!(w.sum(start), Count(1));
    }
}
