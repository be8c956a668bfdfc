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
//! scopes to the connection's future, beside its last credential). A timer taken
//! from the spares is given its new deadline lazily: the deadline is only written down
//! ([`Reused`]'s own), and the `Sleep` keeps the one the wheel holds as long as that one is not
//! later. When the `Sleep` fires at its older deadline, the timer sees that its own is still
//! ahead and moves the `Sleep` there (`Sleep::reset`, a later deadline: the entry's expiry
//! raised) and waits again. Only a deadline earlier than the wheel's is given to the `Sleep` at
//! once. A timer dropped while the connection runs goes back to the spares, still registered.
//! So a kept-alive connection registers its timers once and moves them on only when one of
//! them fires (once per timeout period at most, where every request moved both: `Sleep::reset`
//! was ~0.29k instructions of a pass-through request), and a deadline is still exact: a timer
//! completes at the deadline it was last given, never before.
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

/// A sleep until `deadline`: a spare of the connection's (its deadline given lazily, see the
/// module's doc), or a new one.
pub(crate) fn sleep_until(deadline: Instant) -> Reused {
    reused(take_spare().flatten(), deadline)
}

/// One of the connection's spare timers: `None` outside a connection, `Some(None)` when it has
/// none left.
fn take_spare() -> Option<Option<Pin<Box<Sleep>>>> {
    with_spares(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
}

/// A timer until `deadline` on `spare`, or on a new `Sleep`.
fn reused(spare: Option<Pin<Box<Sleep>>>, deadline: Instant) -> Reused {
    let sleep = match spare {
        Some(mut s) => {
            aim(s.as_mut(), deadline);
            s
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    Reused {
        sleep: Some(sleep),
        deadline,
    }
}

/// Gives `sleep` the deadline `deadline` if it is earlier than the one the `Sleep` has; a later
/// one is given when the `Sleep` fires ([`Reused`]'s poll).
fn aim(sleep: Pin<&mut Sleep>, deadline: Instant) {
    if deadline < sleep.deadline() {
        sleep.reset(deadline);
    }
}

/// A timer that goes back to its connection's spares when dropped (see [`sleep_until`]).
pub(crate) struct Reused {
    /// Always `Some` until dropped. Its own deadline is never later than `deadline`.
    sleep: Option<Pin<Box<Sleep>>>,
    /// When this timer completes.
    deadline: Instant,
}

impl Reused {
    /// Moves the deadline (later: nothing is touched until the `Sleep` fires).
    pub(crate) fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        if let Some(s) = &mut self.sleep {
            aim(s.as_mut(), deadline);
        }
    }
}

impl Future for Reused {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // `Reused` is `Unpin`: the timer itself is boxed.
        let me = self.get_mut();
        let Some(s) = &mut me.sleep else {
            return Poll::Ready(());
        };
        loop {
            match s.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // Fired at an older deadline than this timer's: moved on to its own (later:
                // the wheel's entry raised), and waited for again. At most twice: the second
                // deadline is this timer's.
                Poll::Ready(()) if s.deadline() < me.deadline => s.as_mut().reset(me.deadline),
                Poll::Ready(()) => return Poll::Ready(()),
            }
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

impl hyper::rt::Timer for ConnectionTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(std::time::Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        // One look at the connection's task-local: whether there is one, and its spare.
        match take_spare() {
            Some(spare) => Box::pin(reused(spare, deadline.into())),
            None => hyper_util::rt::TokioTimer::new().sleep_until(deadline),
        }
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        match sleep.as_mut().downcast_mut_pin::<Reused>() {
            Some(s) => s.get_mut().reset(new_deadline.into()),
            None => hyper_util::rt::TokioTimer::new().reset(sleep, new_deadline),
        }
    }
}

/// hyper's HTTP/1 timer on the plain listener, whose only use there is the header-read
/// timeout: a head awaited is marked on the connection's [`Heads`](super::idle::Heads) and
/// the limit is kept by the connection's one [`HeadGuard`](super::idle::HeadGuard), so no
/// timer is made, registered, polled and dropped per request (hyper's box, `Sleep` and its
/// clock read were ~0.5k of a cache hit's instructions, callgrind).
///
/// hyper asks for its header-read timer (`sleep_until`) each time it starts reading a request
/// head, polls it while the head is incomplete and drops it once the head is read: a mark when
/// asked is all the guard needs (the handler marks the head's end). The sleep it gets
/// ([`HeadWait`]) is zero-sized, so its box allocates nothing, and never fires. hyper adds
/// the limit to [`now`](hyper::rt::Timer::now) for a deadline this timer does not read: the
/// time the connection opened serves, where a clock read per request did.
///
/// `sleep` (unused by hyper's HTTP/1 server) gives a real timer, hyper-util's.
#[derive(Clone, Debug)]
pub(crate) struct HeadTimer {
    heads: std::sync::Arc<super::idle::Heads>,
    opened: std::time::Instant,
}

impl HeadTimer {
    pub(crate) fn new(heads: std::sync::Arc<super::idle::Heads>) -> HeadTimer {
        HeadTimer {
            heads,
            opened: std::time::Instant::now(),
        }
    }
}

/// The header-read "timer" [`HeadTimer`] hands hyper: it never fires (the connection's
/// [`HeadGuard`](super::idle::HeadGuard) closes a connection whose head is late).
#[derive(Debug)]
pub(crate) struct HeadWait;

impl Future for HeadWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl hyper::rt::Sleep for HeadWait {}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        hyper_util::rt::TokioTimer::new().sleep(duration)
    }

    fn sleep_until(&self, _deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.heads.begun();
        Box::pin(HeadWait)
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        if sleep.is::<HeadWait>() {
            self.heads.begun();
        } else {
            hyper_util::rt::TokioTimer::new().reset(sleep, new_deadline);
        }
    }

    fn now(&self) -> std::time::Instant {
        self.opened
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

    /// A deadline moved later is only written down (the `Sleep` keeps its older one), and the
    /// timer completes at the later deadline: not when the `Sleep` fires at the older one.
    #[tokio::test(start_paused = true)]
    async fn a_later_deadline_is_waited_for_past_the_older_one() {
        for inside in [false, true] {
            let run = async {
                let start = Instant::now();
                let mut t = sleep_until(start + Duration::from_secs(2));
                t.reset(start + Duration::from_secs(7));
                let held = t.sleep.as_ref().map(|s| s.deadline());
                assert_eq!(held, Some(start + Duration::from_secs(2)), "not moved yet");
                t.await;
                assert_eq!(Instant::now(), start + Duration::from_secs(7));
                // Given back (in a connection) still at 7 s: a later one is written down again.
                let t = sleep_until(Instant::now() + Duration::from_secs(3));
                let at = Instant::now();
                t.await;
                assert_eq!(Instant::now(), at + Duration::from_secs(3));
            };
            if inside {
                per_connection(run).await;
            } else {
                run.await;
            }
        }
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
