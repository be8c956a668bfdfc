//! Timers reused within a client connection, instead of one registered with tokio's timer wheel
//! and removed again for every request.
//!
//! Two timers ran per pass-through request: hyper's header-read timeout (a new boxed `Sleep`
//! each time a request head is awaited, dropped once it came) and the attempt's per-try timeout
//! (`tokio::time::timeout` around the upstream call). Each one made a timer entry, inserted it in
//! the wheel under the driver's lock at its first poll, and took it out under the lock again
//! when dropped, for a timeout that almost never fires.
//!
//! Here a connection keeps its spare `Sleep`s (in the task-local that `identity::per_connection`
//! scopes to the connection's future, beside its last credential). A timer taken from the
//! spares for an earlier deadline than the one it holds is moved there with `Sleep::reset`;
//! for a later one (hyper's next header-read timer) it is left where it is, and moved on to
//! its deadline only when it comes to the one it held ([`sleep_until`]). A timer dropped while
//! the connection runs goes back to the spares, still registered. So a kept-alive connection
//! registers its timers once and moves them on seldom, and a deadline is still exact: a timer
//! fires at the deadline it was last given, never before.
//!
//! A spare that waits in the list may still fire at its last deadline, and wakes the task that
//! polled it last: one spurious wake-up of the connection at most per timeout period (hyper
//! polls and finds nothing to do). Outside a connection's task (a waiting HTTP/2 stream that
//! became a task of its own, a queue replay) a timer is made and dropped as before.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};

/// Spare timers a connection keeps: hyper's header-read timer and an attempt's, with room for
/// one more (an HTTP/2 connection's streams run side by side).
const KEEP: usize = 3;

/// Runs `f` with the connection's spare timers, if the task is a client connection's: they
/// live in the connection's one task-local (`identity::per_connection`, which scopes its
/// last credential too: one scope entered per poll of the connection, not two).
fn with_spares<R>(f: impl FnOnce(&RefCell<Vec<Pin<Box<Sleep>>>>) -> R) -> Option<R> {
    crate::identity::with_connection(|c| f(&c.timers))
}

/// A sleep until `deadline`: a spare of the connection's, or a new one.
///
/// A spare set at or before `deadline` is not moved here: hyper asks for its header-read
/// timer again for every request, each time a little later, and `Sleep::reset` (the deadline
/// turned into the wheel's ticks and stored) was ~0.14k of a cache hit's instructions. The
/// [`Reused`] keeps the deadline it was given; should the `Sleep` come to its earlier one
/// first, the poll that sees it moves it on to that deadline and waits again. So a timer
/// still fires at the deadline it was last given, never before; the cost is one wake-up of
/// the task at the earlier deadline, at most one per period of the timeout (hyper polls and
/// finds nothing to do), instead of a reset per request.
pub(crate) fn sleep_until(deadline: Instant) -> Reused {
    let spare = with_spares(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).flatten();
    let sleep = match spare {
        Some(mut s) => {
            if s.deadline() > deadline {
                s.as_mut().reset(deadline);
            }
            s
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    Reused {
        sleep: Some(sleep),
        deadline,
    }
}

/// A timer that goes back to its connection's spares when dropped (see [`sleep_until`]).
pub(crate) struct Reused {
    /// Always `Some` until dropped. Set at or before `deadline` ([`sleep_until`]).
    sleep: Option<Pin<Box<Sleep>>>,
    /// When this timer fires.
    deadline: Instant,
}

impl Reused {
    /// Moves the deadline: an earlier one at once, a later one when the `Sleep` comes to the
    /// deadline it holds ([`sleep_until`]).
    pub(crate) fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        if let Some(s) = &mut self.sleep {
            if s.deadline() > deadline {
                s.as_mut().reset(deadline);
            }
        }
    }
}

impl Future for Reused {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // `Reused` is `Unpin`: the timer itself is boxed.
        let this = self.get_mut();
        let Some(s) = &mut this.sleep else {
            return Poll::Ready(());
        };
        loop {
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if s.deadline() >= this.deadline {
                return Poll::Ready(());
            }
            // At an earlier deadline the spare kept: moved on to this timer's own, and polled
            // again (so that it wakes the task then; ready at once if that has passed too).
            s.as_mut().reset(this.deadline);
        }
    }
}

impl Drop for Reused {
    fn drop(&mut self) {
        let Some(sleep) = self.sleep.take() else {
            return;
        };
        // Outside the connection's task (or the list full), the timer is dropped: removed from
        // the wheel as any other.
        let _ = with_spares(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < KEEP {
                    s.push(sleep);
                }
            }
        });
    }
}

/// Waits for `fut` at most until `deadline`, on a reused timer: `None` when the deadline came
/// first (`tokio::time::timeout`'s meaning, without a timer registered and removed per call).
pub(crate) async fn until<F: Future>(deadline: Instant, fut: F) -> Option<F::Output> {
    let mut timer = sleep_until(deadline);
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        // Unconstrained, as tokio's `timeout` polls its delay: when `fut` used up the task's
        // cooperative budget (a body of many small frames on a loaded machine), a budgeted
        // timer would answer `Pending` without looking at its deadline, and the timeout would
        // wait as long as data kept coming.
        match Pin::new(&mut tokio::task::unconstrained(Pin::new(&mut timer))).poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// hyper's timer for a client connection (its header-read timeout, HTTP/2's timers): sleeps
/// from the connection's spares ([`sleep_until`]) inside `identity::per_connection` (the plain
/// listener's and intercepted connections); elsewhere (an HTTP/2 stream that became a task of
/// its own) hyper-util's own `TokioTimer`, whose
/// sleep is one allocation where a [`Reused`] without spares would be two.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionTimer;

impl hyper::rt::Sleep for Reused {}

fn in_connection() -> bool {
    with_spares(|_| ()).is_some()
}

impl hyper::rt::Timer for ConnectionTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(std::time::Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        if in_connection() {
            Box::pin(sleep_until(deadline.into()))
        } else {
            hyper_util::rt::TokioTimer::new().sleep_until(deadline)
        }
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        match sleep.as_mut().downcast_mut_pin::<Reused>() {
            Some(s) => s.get_mut().reset(new_deadline.into()),
            None => hyper_util::rt::TokioTimer::new().reset(sleep, new_deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::per_connection;
    use std::time::Duration;

    /// A future that spends the task's whole cooperative budget at every poll (a body of many
    /// small frames) still times out: its deadline is looked at, as tokio's `timeout` does.
    /// Budgeted, the timer answered `Pending` until the channel was drained and the future won.
    #[tokio::test]
    async fn a_deadline_is_seen_when_the_future_spent_the_budget() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u8>();
        for _ in 0..2_000_000 {
            tx.send(0).unwrap();
        }
        drop(tx);
        let drain = std::future::poll_fn(move |cx| loop {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(_)) => continue,
                Poll::Ready(None) => return Poll::Ready(()),
                // The budget is spent: tokio wakes the task again at once.
                Poll::Pending => return Poll::Pending,
            }
        });
        let deadline = Instant::now() + Duration::from_millis(1);
        assert_eq!(
            until(deadline, drain).await,
            None,
            "the deadline came first"
        );
    }

    /// A timer given back in a connection is the one the next request gets, moved to its own
    /// deadline, and it fires at that deadline, not at the first one.
    #[tokio::test(start_paused = true)]
    async fn a_spare_is_reused_and_fires_at_its_new_deadline() {
        per_connection(async {
            let start = Instant::now();
            let first = sleep_until(start + Duration::from_secs(10));
            let addr = first.sleep.as_ref().map(|s| &**s as *const Sleep);
            drop(first);
            assert_eq!(with_spares(|s| s.borrow().len()).unwrap_or(0), 1);
            let second = sleep_until(start + Duration::from_secs(30));
            assert_eq!(second.sleep.as_ref().map(|s| &**s as *const Sleep), addr);
            // The first deadline passes without it firing; the second fires it.
            let early = until(start + Duration::from_secs(20), second).await;
            assert_eq!(early, None, "not fired at the first deadline");
            let second = sleep_until(start + Duration::from_secs(30));
            second.await;
            assert_eq!(Instant::now(), start + Duration::from_secs(30));
        })
        .await;
    }

    /// hyper's timer hands out reused sleeps inside a connection, and hyper-util's own outside
    /// one; both are reset in place and fire at their new deadline.
    #[tokio::test(start_paused = true)]
    async fn hypers_timer_reuses_inside_a_connection_only() {
        use hyper::rt::Timer;
        let t = ConnectionTimer;
        let at = |s: u64| (Instant::now() + Duration::from_secs(s)).into_std();
        let mut outside = t.sleep_until(at(5));
        assert!(!outside.is::<Reused>());
        let start = Instant::now();
        t.reset(&mut outside, at(2));
        outside.await;
        assert_eq!(Instant::now(), start + Duration::from_secs(2));
        per_connection(async {
            let mut inside = t.sleep_until(at(5));
            assert!(inside.is::<Reused>());
            let start = Instant::now();
            t.reset(&mut inside, at(3));
            inside.await;
            assert_eq!(Instant::now(), start + Duration::from_secs(3));
            // Given back when dropped, and handed out again.
            assert_eq!(with_spares(|s| s.borrow().len()).unwrap_or(0), 1);
        })
        .await;
    }

    /// `until` gives the output when it comes first, `None` when the deadline does; outside a
    /// connection it works as `tokio::time::timeout`.
    #[tokio::test(start_paused = true)]
    async fn until_is_a_timeout() {
        let now = Instant::now();
        assert_eq!(
            until(now + Duration::from_secs(1), async { 7 }).await,
            Some(7)
        );
        let slow = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(until(now + Duration::from_secs(1), slow).await, None);
        assert_eq!(Instant::now(), now + Duration::from_secs(1));
        per_connection(async {
            let now = Instant::now();
            let slow = tokio::time::sleep(Duration::from_secs(5));
            assert_eq!(until(now + Duration::from_secs(2), slow).await, None);
            assert_eq!(Instant::now(), now + Duration::from_secs(2));
            // The reused timer, moved earlier than where it last was, still fires on time.
            let slow = tokio::time::sleep(Duration::from_secs(5));
            let t = Instant::now();
            assert_eq!(until(t + Duration::from_millis(500), slow).await, None);
            assert_eq!(Instant::now(), t + Duration::from_millis(500));
        })
        .await;
    }
}
