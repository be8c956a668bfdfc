//! The room a managed request's waiting phases run in, reused per worker thread.
//!
//! A managed request that must wait (a miss, a call) runs its remaining phases in one boxed
//! future ([`super::Handled`]) of kilobytes (~4.5 KB): past glibc's per-thread cache, which
//! serves sizes up to 1,032 bytes, so every request's malloc and free of it went through the
//! arena's bins (~0.45k instructions of a pass-through request, callgrind). Here the box is
//! kept when its future ends (done, or dropped with its connection) and the next request's
//! future is made in it: each thread keeps a few empty rooms.
//!
//! Every room holds the same future type, made by the one function [`super::parked`], so a
//! room taken from the spares is always the right size and kind.

use super::Parked;
use crate::body::Body;
use http::Response;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Empty rooms a thread keeps (an HTTP/1 connection has one request in flight at a time).
const KEEP: usize = 4;

pin_project_lite::pin_project! {
    /// One room: the phases' future while it runs (`None` between requests) and how one is
    /// made.
    struct Slot<F> {
        #[pin]
        fut: Option<F>,
        make: fn(Parked) -> F,
    }
}

/// A [`Slot`] with its future's type erased (every room is the same one).
trait Room: Send {
    /// Makes the future for `input` in this (empty) room.
    fn fill(self: Pin<&mut Self>, input: Parked);
    /// Polls the future; an empty room never completes (no caller polls one).
    fn poll_room(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<Body>>;
    /// Drops the future in place, where it is.
    fn empty(self: Pin<&mut Self>);
}

impl<F> Room for Slot<F>
where
    F: Future<Output = Response<Body>> + Send,
{
    fn fill(self: Pin<&mut Self>, input: Parked) {
        let mut this = self.project();
        this.fut.set(Some((this.make)(input)));
    }

    fn poll_room(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<Body>> {
        match self.project().fut.as_pin_mut() {
            Some(f) => f.poll(cx),
            None => Poll::Pending,
        }
    }

    fn empty(self: Pin<&mut Self>) {
        self.project().fut.set(None);
    }
}

type Boxed = Pin<Box<dyn Room>>;

thread_local! {
    static SPARE: RefCell<Vec<Boxed>> = const { RefCell::new(Vec::new()) };
}

/// A request's waiting phases, running in a room of their own (see the module's doc).
pub(crate) struct Held {
    /// `None` once the future is done.
    room: Option<Boxed>,
}

/// Starts `input`'s waiting phases ([`super::parked`]) in a spare room, or a new one.
pub(super) fn hold(input: Parked) -> Held {
    let spare = SPARE
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
        .ok()
        .flatten();
    let mut room = spare.unwrap_or_else(|| {
        Box::pin(Slot {
            fut: None,
            make: super::parked,
        })
    });
    room.as_mut().fill(input);
    Held { room: Some(room) }
}

/// Empties `room` (its future dropped where it is, before the spares are touched: dropping it
/// may run any code) and keeps it for the thread's next request.
fn give_back(mut room: Boxed) {
    room.as_mut().empty();
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < KEEP {
                s.push(room);
            }
        }
    });
}

impl Held {
    /// Polls the phases; `None` when polled again after they answered (no caller does).
    pub(super) fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<Response<Body>>> {
        let Some(room) = &mut self.room else {
            return Poll::Ready(None);
        };
        let resp = std::task::ready!(room.as_mut().poll_room(cx));
        if let Some(room) = self.room.take() {
            give_back(room);
        }
        Poll::Ready(Some(resp))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(room) = self.room.take() {
            give_back(room);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty room goes back to the thread's spares and is the next request's room.
    #[test]
    fn a_room_is_reused_and_its_future_dropped_when_given_back() {
        let spares = || SPARE.with(|s| s.borrow().len());
        let before = spares();
        let room: Boxed = Box::pin(Slot::<std::future::Ready<Response<Body>>> {
            fut: Some(std::future::ready(Response::new(crate::body::empty()))),
            make: |_| std::future::ready(Response::new(crate::body::empty())),
        });
        let at = &*room as *const dyn Room as *const u8;
        give_back(room);
        assert_eq!(spares(), (before + 1).min(KEEP));
        let again = SPARE.with(|s| s.borrow_mut().pop()).expect("a spare room");
        assert_eq!(&*again as *const dyn Room as *const u8, at, "the same room");
    }
}
