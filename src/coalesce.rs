//! Coalescing ("single flight"): N concurrent identical requests become one upstream request.
//!
//! The first caller for a key becomes the leader and starts the fetch as a detached task, so a
//! leader that hangs up (a client with a 50 ms timeout) does not cancel it, and a reissue joins
//! the same flight instead of starting another. Every waiter gets the same outcome.

use crate::cache::CacheKey;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// What a flight ends with. Cloned to every waiter, so it is cheap to clone.
pub type Outcome<T, E> = Result<Arc<T>, Arc<E>>;

type Slot<T, E> = watch::Receiver<Option<Outcome<T, E>>>;

pub struct Coalescer<T, E> {
    flights: Arc<Mutex<HashMap<CacheKey, Slot<T, E>>>>,
    /// Where the fetch tasks run (the engine's tracker, see [`Coalescer::tracked`]).
    tasks: TaskTracker,
}

impl<T, E> Clone for Coalescer<T, E> {
    fn clone(&self) -> Self {
        Coalescer {
            flights: self.flights.clone(),
            tasks: self.tasks.clone(),
        }
    }
}

/// A coalescer with a tracker of its own (tests, and parts no shutdown waits for).
impl<T, E> Default for Coalescer<T, E> {
    fn default() -> Self {
        Coalescer::tracked(TaskTracker::new())
    }
}

impl<T, E> Coalescer<T, E> {
    /// A coalescer whose fetch tasks run on `tasks`.
    pub fn tracked(tasks: TaskTracker) -> Self {
        Coalescer {
            flights: Arc::default(),
            tasks,
        }
    }
}

/// How a caller took part in a flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

/// Removes the flight from the map when the fetch task ends, even if it panicked, so later
/// callers start a new flight instead of waiting forever.
struct FlightGuard<T, E> {
    key: CacheKey,
    flights: Arc<Mutex<HashMap<CacheKey, Slot<T, E>>>>,
}

impl<T, E> Drop for FlightGuard<T, E> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.flights.lock() {
            m.remove(&self.key);
        }
    }
}

impl<T, E> Coalescer<T, E>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Joins the flight for `key`, or starts one running `fetch` if there is none.
    /// Returns the outcome (`None` if the fetch task died without one) and this caller's role.
    pub async fn run<F, Fut>(&self, key: CacheKey, fetch: F) -> (Option<Outcome<T, E>>, Role)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome<T, E>> + Send + 'static,
    {
        let (mut rx, role) = self.join_or_start(key, fetch);
        let outcome = match rx.wait_for(|v| v.is_some()).await {
            Ok(v) => v.clone(),
            // The sender is gone without an outcome: the fetch task panicked.
            Err(_) => None,
        };
        (outcome, role)
    }

    /// Starts a flight for `key` only if none is running (background revalidation).
    /// Returns whether it started one.
    pub fn start_if_idle<F, Fut>(&self, key: CacheKey, fetch: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome<T, E>> + Send + 'static,
    {
        let (_rx, role) = self.join_or_start(key, fetch);
        role == Role::Leader
    }

    /// Whether a flight for `key` is running (a new caller would join it).
    pub fn is_running(&self, key: &CacheKey) -> bool {
        self.flights
            .lock()
            .map(|m| m.contains_key(key))
            .unwrap_or(false)
    }

    pub fn in_flight(&self) -> usize {
        self.flights.lock().map(|m| m.len()).unwrap_or(0)
    }

    fn join_or_start<F, Fut>(&self, key: CacheKey, fetch: F) -> (Slot<T, E>, Role)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome<T, E>> + Send + 'static,
    {
        let mut map = match self.flights.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(rx) = map.get(&key) {
            return (rx.clone(), Role::Follower);
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key, rx.clone());
        drop(map);
        let guard = FlightGuard {
            key,
            flights: self.flights.clone(),
        };
        let fut = fetch();
        self.tasks.spawn(async move {
            let outcome = fut.await;
            // Remove before publishing: a caller arriving after the outcome starts afresh
            // (and finds the freshly cached answer) rather than joining a finished flight.
            drop(guard);
            tx.send_replace(Some(outcome));
        });
        (rx, Role::Leader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn key(n: u8) -> CacheKey {
        let id = crate::identity::IdentityKey::new([n; 32]).identify(&http::HeaderMap::new());
        CacheKey::new(
            &crate::bench_api::upstream_named("up0"),
            &http::Method::GET,
            "/",
            &id,
            &http::HeaderMap::new(),
            &[],
        )
    }

    #[tokio::test(start_paused = true)]
    async fn many_waiters_one_fetch() {
        let c: Coalescer<u32, String> = Coalescer::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (c, calls) = (c.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                c.run(key(1), move || async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(Arc::new(7))
                })
                .await
            }));
        }
        let mut leaders = 0;
        for t in tasks {
            let (out, role) = t.await.unwrap();
            assert_eq!(*out.unwrap().unwrap(), 7);
            leaders += usize::from(role == Role::Leader);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(leaders, 1);
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn leader_hanging_up_does_not_cancel() {
        let c: Coalescer<u32, String> = Coalescer::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let mk = |calls: Arc<AtomicUsize>| {
            move || async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(Arc::new(1))
            }
        };
        // The leader gives up after 50 ms, then reissues, twice.
        for _ in 0..3 {
            let _ =
                tokio::time::timeout(Duration::from_millis(50), c.run(key(2), mk(calls.clone())))
                    .await;
        }
        let (out, role) = c.run(key(2), mk(calls.clone())).await;
        assert_eq!(*out.unwrap().unwrap(), 1);
        assert_eq!(role, Role::Follower);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn panicking_fetch_releases_waiters() {
        let c: Coalescer<u32, String> = Coalescer::default();
        let (out, _) = c.run(key(3), || async { panic!("boom") }).await;
        assert!(out.is_none());
        assert_eq!(c.in_flight(), 0);
    }
}
