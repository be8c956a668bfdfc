//! Per-upstream bulkhead: at most `max_in_flight` calls at once, at most `max_queue` waiting
//! (optionally for at most `max_wait`), and everything beyond that shed at once.
//!
//! Shedding early keeps a stalled upstream from tying up every client connection, and turns
//! an unbounded wait into a quick 503 the client can act on. Waiters are served in FIFO order
//! (tokio's semaphore is fair).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bulkhead limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadConfig {
    /// Calls running at once (0 is raised to 1).
    pub max_in_flight: usize,
    /// Calls waiting for a slot; more are shed immediately.
    pub max_queue: usize,
    /// Longest a queued call waits before being shed; `None` waits for as long as it takes
    /// (the caller's own deadline still applies).
    pub max_wait: Option<Duration>,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        BulkheadConfig {
            max_in_flight: 16,
            max_queue: 64,
            max_wait: Some(Duration::from_secs(10)),
        }
    }
}

/// Why a call was shed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Shed {
    /// Every slot is busy and the queue is full.
    #[error("bulkhead full: {max_in_flight} calls in flight and {max_queue} queued")]
    QueueFull {
        /// The in-flight limit.
        max_in_flight: usize,
        /// The queue limit.
        max_queue: usize,
    },
    /// Queued for `max_wait` without getting a slot.
    #[error("waited {}ms in the bulkhead queue without a free slot", waited.as_millis())]
    WaitedTooLong {
        /// How long it waited.
        waited: Duration,
    },
    /// The bulkhead was closed (shutting down).
    #[error("bulkhead closed")]
    Closed,
}

/// Counters for metrics and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BulkheadStats {
    /// Calls holding a slot now.
    pub in_flight: usize,
    /// Calls waiting now.
    pub queued: usize,
    /// Calls shed since creation.
    pub shed_total: u64,
}

/// A slot in the bulkhead; the slot is freed when this is dropped (or retired, when the
/// bulkhead was made smaller while it was held).
#[derive(Debug)]
pub struct BulkheadPermit {
    permit: Option<OwnedSemaphorePermit>,
    debt: Arc<AtomicUsize>,
}

impl Drop for BulkheadPermit {
    fn drop(&mut self) {
        let retire = self
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
            .is_ok();
        if let (true, Some(p)) = (retire, self.permit.take()) {
            p.forget();
        }
    }
}

/// A per-upstream concurrency limit with a bounded queue.
#[derive(Debug)]
pub struct Bulkhead {
    config: std::sync::Mutex<BulkheadConfig>,
    slots: Arc<Semaphore>,
    /// Slots still to retire after [`Bulkhead::reconfigure`] made the bulkhead smaller while
    /// they were held: each one given back while this is above zero is forgotten instead.
    debt: Arc<AtomicUsize>,
    queued: AtomicUsize,
    shed: AtomicU64,
}

/// Decrements the queue count however the wait ends (slot, timeout, or cancellation).
struct QueueSeat<'a>(&'a AtomicUsize);

impl Drop for QueueSeat<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Bulkhead {
    /// A bulkhead with the given limits.
    pub fn new(config: BulkheadConfig) -> Self {
        let max_in_flight = config.max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        let config = BulkheadConfig {
            max_in_flight,
            ..config
        };
        Bulkhead {
            config: std::sync::Mutex::new(config),
            slots: Arc::new(Semaphore::new(max_in_flight)),
            debt: Arc::new(AtomicUsize::new(0)),
            queued: AtomicUsize::new(0),
            shed: AtomicU64::new(0),
        }
    }

    /// The limits in use.
    pub fn config(&self) -> BulkheadConfig {
        *self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies new limits in place. Running and queued calls keep their places: a larger
    /// bulkhead admits waiters at once; a smaller one retires slots as running calls finish.
    pub fn reconfigure(&self, config: BulkheadConfig) {
        let mut current = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let old = current.max_in_flight;
        let new = config.max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        if new > old {
            // Slots not yet retired are simply kept; only the rest are new.
            let grow = new - old;
            let kept = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    Some(d.saturating_sub(grow))
                })
                .map_or(0, |d| d.min(grow));
            self.slots.add_permits(grow - kept);
        } else if new < old {
            let shrink = old - new;
            let forgotten = self.slots.forget_permits(shrink);
            self.debt.fetch_add(shrink - forgotten, Ordering::AcqRel);
        }
        *current = BulkheadConfig {
            max_in_flight: new,
            ..config
        };
    }

    fn permit(&self, p: OwnedSemaphorePermit) -> BulkheadPermit {
        BulkheadPermit {
            permit: Some(p),
            debt: Arc::clone(&self.debt),
        }
    }

    /// Takes a slot, queueing if needed; sheds at once when the queue is full.
    pub async fn acquire(&self) -> Result<BulkheadPermit, Shed> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => return Ok(self.permit(permit)),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(self.count(Shed::Closed)),
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        // Boxed: a call queues rarely, and the wait's state (the semaphore's queue entry and
        // the timer, ~300 bytes) would otherwise sit in the future of every caller's call.
        Box::pin(self.queue()).await
    }

    /// [`Bulkhead::acquire`] when no slot is free: waits in the bounded queue.
    async fn queue(&self) -> Result<BulkheadPermit, Shed> {
        // Read only when the call has to queue (its lock is not worth taking for a free slot).
        let config = self.config();
        let max_queue = config.max_queue;
        let entered = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q < max_queue).then_some(q + 1)
            });
        if entered.is_err() {
            return Err(self.count(Shed::QueueFull {
                max_in_flight: config.max_in_flight,
                max_queue,
            }));
        }
        let _seat = QueueSeat(&self.queued);
        let wait = Arc::clone(&self.slots).acquire_owned();
        let result = match config.max_wait {
            Some(limit) => match tokio::time::timeout(limit, wait).await {
                Ok(r) => r,
                Err(_) => return Err(self.count(Shed::WaitedTooLong { waited: limit })),
            },
            None => wait.await,
        };
        match result {
            Ok(permit) => Ok(self.permit(permit)),
            Err(_) => Err(self.count(Shed::Closed)),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> BulkheadStats {
        BulkheadStats {
            // Slots held = every permit still in play (the limit plus those to retire) minus
            // the free ones.
            in_flight: (self.config().max_in_flight + self.debt.load(Ordering::Acquire))
                .saturating_sub(self.slots.available_permits()),
            queued: self.queued.load(Ordering::Acquire),
            shed_total: self.shed.load(Ordering::Acquire),
        }
    }

    /// Sheds every queued and future call (for shutdown); running calls finish normally.
    pub fn close(&self) {
        self.slots.close();
    }

    fn count(&self, shed: Shed) -> Shed {
        self.shed.fetch_add(1, Ordering::AcqRel);
        shed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulkhead(max_in_flight: usize, max_queue: usize, max_wait: Option<u64>) -> Arc<Bulkhead> {
        Arc::new(Bulkhead::new(BulkheadConfig {
            max_in_flight,
            max_queue,
            max_wait: max_wait.map(Duration::from_secs),
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn sheds_beyond_in_flight_plus_queue() {
        let b = bulkhead(2, 1, None);
        let p1 = b.acquire().await.unwrap();
        let _p2 = b.acquire().await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(
            b.stats(),
            BulkheadStats {
                in_flight: 2,
                queued: 1,
                shed_total: 0
            }
        );
        let shed = b.acquire().await.unwrap_err();
        assert_eq!(
            shed,
            Shed::QueueFull {
                max_in_flight: 2,
                max_queue: 1
            }
        );
        assert_eq!(b.stats().shed_total, 1);
        // Freeing a slot serves the queued caller.
        drop(p1);
        waiter.await.unwrap().unwrap();
        assert_eq!(b.stats().queued, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn queued_calls_give_up_after_max_wait() {
        let b = bulkhead(1, 4, Some(3));
        let _held = b.acquire().await.unwrap();
        let shed = b.acquire().await.unwrap_err();
        assert_eq!(
            shed,
            Shed::WaitedTooLong {
                waited: Duration::from_secs(3)
            }
        );
        assert_eq!(b.stats().queued, 0);
        assert_eq!(b.stats().shed_total, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_queue_sheds_at_once_and_cancelled_waiters_leave_the_queue() {
        let b = bulkhead(1, 0, None);
        let held = b.acquire().await.unwrap();
        assert!(matches!(b.acquire().await, Err(Shed::QueueFull { .. })));

        let b2 = bulkhead(1, 1, None);
        let _h = b2.acquire().await.unwrap();
        let cancelled = tokio::time::timeout(Duration::from_secs(1), b2.acquire()).await;
        assert!(cancelled.is_err());
        assert_eq!(b2.stats().queued, 0);
        drop(held);
        assert!(b.acquire().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn reconfigure_grows_and_shrinks_without_dropping_calls() {
        let b = bulkhead(2, 4, None);
        let p1 = b.acquire().await.unwrap();
        let p2 = b.acquire().await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(b.stats().queued, 1);
        // Growing admits the waiter at once.
        b.reconfigure(BulkheadConfig {
            max_in_flight: 3,
            max_queue: 4,
            max_wait: None,
        });
        waiter.await.unwrap().unwrap();
        // Shrinking to 1 while 2 are held: both must finish before a new call gets in.
        b.reconfigure(BulkheadConfig {
            max_in_flight: 1,
            max_queue: 0,
            max_wait: None,
        });
        assert_eq!(b.stats().in_flight, 2);
        assert!(matches!(
            b.acquire().await,
            Err(Shed::QueueFull {
                max_in_flight: 1,
                max_queue: 0
            })
        ));
        drop(p1);
        assert!(matches!(b.acquire().await, Err(Shed::QueueFull { .. })));
        drop(p2);
        let p3 = b.acquire().await.unwrap();
        assert_eq!(b.stats().in_flight, 1);
        assert!(b.acquire().await.is_err());
        drop(p3);
        assert_eq!(b.stats().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_sheds_waiters() {
        let b = bulkhead(1, 2, None);
        let _held = b.acquire().await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        b.close();
        assert_eq!(waiter.await.unwrap(), Err(Shed::Closed));
        assert_eq!(b.acquire().await.unwrap_err(), Shed::Closed);
    }
}
