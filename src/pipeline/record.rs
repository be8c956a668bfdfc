//! The last phase, recording (pingora's `logging` is the model): what one request did goes to
//! the status counters and the fallback policy's decision log here, once, when it ends.
//!
//! The phases before it note what happens on the request's [`Outcome`] as it happens (which
//! surface sent it; whether it was for an unmanaged host or a managed upstream and class; the
//! cache hits, fresh or stale, a joined flight, a client's `304`, a longer log kept; a rule's
//! decision), and touch no counter themselves. [`Recording`], held by the front door
//! (`super::front`), writes it all in [`request`] when the request ends: when its answer is
//! made (a refusal — a problem answer — counted then), or when its future is dropped because the
//! client went away (what it did so far is still counted, as when each phase counted for
//! itself). So each request is recorded exactly once, whichever path it took: a cache hit or
//! miss, pass-through, a create, a problem, a CONNECT, the control API or a refusal at the door
//! (the gateway's own refusals come in through [`super::finish`]).
//!
//! Not recorded here, because they count something other than one client request:
//! - upstream exchanges (`upstream_requests`, `errors` and their kinds, fallback attempts:
//!   `crate::upstream` `attempt`; the `model` class's own attempts in `super::model` and
//!   `super::model_stream`): a cache flight is shared by the requests that join it and outlives
//!   them, queue replays and Weir's own calls (`/user`) have no client request, a model's stream
//!   can fail after its answer was given, and the `surge_429` situation reads rate-limit errors
//!   as they happen, not when a request ends;
//! - a refresh the upstream revalidated (`revalidated`, `super::cache`'s flight): per flight;
//! - tunnels and their bytes (`super::tunnel`): a tunnel outlives the CONNECT that opened it;
//! - TLS interception's connections and handshake failures (`crate::intercept`): per connection;
//! - the body budget's refusals (`crate::body_budget`): the budget's own count, shared with the
//!   creates' detached tasks;
//! - background work: team signals, the cache's persistence, the queue's replays.
//!
//! The outcome is written through `&Outcome` (the phases share the request's context), with
//! relaxed atomics: one task writes them in turn, so each is a plain load and store.

use super::state::Proxy;
use crate::config::{RouteClass, UpstreamIndex};
use crate::policy::RecentDecision;
use crate::surface::Surface;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;

/// What one request did, noted by the phases as it happens and written by [`request`].
#[derive(Default)]
pub(crate) struct Outcome {
    /// The surface's index + 1; 0 before classification (a refusal at the front door, the
    /// control API).
    surface: AtomicU8,
    /// [`UNMANAGED`], or [`MANAGED`] | the class in the low byte and the upstream's index in the
    /// high 32 bits; 0 for a request with no route counter (CONNECT, the control API).
    route: AtomicU64,
    /// How many times each [`Event`] happened, one byte each.
    events: AtomicU64,
    /// The decision a rule made, for the decision log (`crate::policy::DecisionLog`). At most
    /// one per request: `create`/`list` decide their policy, `model` its fallback.
    decision: OnceLock<RecentDecision>,
}

const UNMANAGED: u64 = 1 << 8;
const MANAGED: u64 = 2 << 8;

/// What can happen to a managed request, each counted on its upstream and class.
#[derive(Clone, Copy)]
pub(super) enum Event {
    /// Answered from a fresh copy (`cache_hits_fresh`).
    FreshHit = 0,
    /// Answered from a stale copy: degraded, revalidating, held, or rescuing a failure
    /// (`cache_hits_stale`).
    StaleHit = 1,
    /// Joined a flight another request led (`coalesced`).
    Coalesced = 2,
    /// A client's own conditional GET answered `304` from Weir's copy (`not_modified`).
    NotModified = 3,
    /// A log answer replaced by the longer log the caller was given (`kept_longer`).
    KeptLonger = 4,
}

impl Outcome {
    /// The tool that sent the request.
    pub(super) fn surface(&self, s: Surface) {
        self.surface.store(s.index() as u8 + 1, Relaxed);
    }

    /// A request for a host Weir does not manage (passed through untouched).
    pub(super) fn unmanaged(&self) {
        self.route.store(UNMANAGED, Relaxed);
    }

    /// A request for managed upstream `up`, in route class `class`.
    pub(super) fn managed(&self, up: UpstreamIndex, class: RouteClass) {
        self.route.store(
            MANAGED | class as u64 | ((up.index() as u64) << 32),
            Relaxed,
        );
    }

    pub(super) fn saw(&self, e: Event) {
        let n = self.events.load(Relaxed);
        self.events.store(n + (1 << (8 * e as u32)), Relaxed);
    }

    /// A rule's decision for this request (`None`: the built-in default, never logged).
    pub(super) fn decided(&self, entry: Option<RecentDecision>) {
        if let Some(entry) = entry {
            let _ = self.decision.set(entry);
        }
    }
}

/// Records `seen` when dropped: at the end of the front door's work ([`Recording::end`]), or
/// with the request's future when the client goes away first.
pub(super) struct Recording<'a> {
    proxy: &'a Proxy,
    seen: &'a Outcome,
    refused: bool,
}

impl<'a> Recording<'a> {
    pub(super) fn start(proxy: &'a Proxy, seen: &'a Outcome) -> Recording<'a> {
        Recording {
            proxy,
            seen,
            refused: false,
        }
    }

    /// The request was answered (`refused`: with a problem).
    pub(super) fn end(mut self, refused: bool) {
        self.refused = refused;
    }
}

impl Recording<'_> {
    /// The request must wait: its outcome goes to a [`Pending`], which records it instead.
    pub(super) fn hand_over(self) {
        std::mem::forget(self);
    }
}

/// The recording of a request whose answer must wait: it owns the request's outcome, which its
/// future's phases note on, and records it once when dropped — answered ([`Pending::end`]), or
/// with the future when the client went away (even before the future was first polled).
pub(super) struct Pending {
    proxy: std::sync::Arc<Proxy>,
    seen: Outcome,
    refused: bool,
}

impl Pending {
    pub(super) fn new(proxy: std::sync::Arc<Proxy>, seen: Outcome) -> Pending {
        Pending {
            proxy,
            seen,
            refused: false,
        }
    }

    pub(super) fn seen(&self) -> &Outcome {
        &self.seen
    }

    /// The request was answered (`refused`: with a problem).
    pub(super) fn end(mut self, refused: bool) {
        self.refused = refused;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        request(&self.proxy, &self.seen, self.refused);
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        request(self.proxy, self.seen, self.refused);
    }
}

/// Writes what one request did: every per-request counter and the decision log, once.
fn request(proxy: &Proxy, seen: &Outcome, refused: bool) {
    let g = &proxy.global;
    #[cfg(test)]
    g.recorded.fetch_add(1, Relaxed);
    if let Some(s) = (seen.surface.load(Relaxed) as usize)
        .checked_sub(1)
        .and_then(|i| Surface::ALL.get(i))
    {
        g.surface(*s);
    }
    let route = seen.route.load(Relaxed);
    match route & 0xff00 {
        UNMANAGED => {
            g.passthrough_requests.fetch_add(1, Relaxed);
        }
        MANAGED => {
            let class = RouteClass::ALL[(route & 0xff) as usize];
            let up = UpstreamIndex::at((route >> 32) as usize);
            let c = proxy.upstreams.get(up).counters.class(class);
            c.client_requests.fetch_add(1, Relaxed);
            // Indexed by `Event`; only the lanes that moved are visited (a hit has one).
            let counters = [
                &c.cache_hits_fresh,
                &c.cache_hits_stale,
                &c.coalesced,
                &c.not_modified,
                &c.kept_longer,
            ];
            let mut events = seen.events.load(Relaxed);
            while events != 0 {
                let lane = events.trailing_zeros() / 8;
                let n = (events >> (8 * lane)) & 0xff;
                if let Some(counter) = counters.get(lane as usize) {
                    counter.fetch_add(n, Relaxed);
                }
                events &= !(0xff << (8 * lane));
            }
        }
        _ => {}
    }
    if refused {
        g.rejected.fetch_add(1, Relaxed);
    }
    if let Some(entry) = seen.decision.get() {
        proxy.policy_log.push(entry.clone());
    }
}
