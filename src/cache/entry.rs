//! A stored response and how fresh it is.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::time::Duration;
use tokio::time::Instant;

/// Headers added to a stored answer on its way to a client (see [`Stored::to_response`]).
const ADDED_HEADERS: usize = 6;

/// A complete upstream response held in memory (cached, or shared between coalesced waiters).
#[derive(Debug)]
pub struct Stored {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub stored_at: Instant,
    pub fresh_until: Instant,
    /// Until then a stale copy is served at once while one background refresh runs.
    pub revalidate_until: Instant,
    /// Until then a stale copy is served when the upstream fails.
    pub stale_if_error_until: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Stale, inside the stale-while-revalidate window.
    Revalidate,
    /// Stale, only usable when the upstream fails.
    OnlyOnError,
    /// Too old to serve at all.
    Expired,
}

impl Stored {
    pub fn freshness(&self, now: Instant) -> Freshness {
        if now < self.fresh_until {
            Freshness::Fresh
        } else if now < self.revalidate_until {
            Freshness::Revalidate
        } else if now < self.stale_if_error_until {
            Freshness::OnlyOnError
        } else {
            Freshness::Expired
        }
    }

    pub fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }

    /// Bytes this entry costs, for the memory budget.
    pub fn weight(&self) -> u32 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum();
        u32::try_from(self.body.len() + headers + 256).unwrap_or(u32::MAX)
    }

    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// A response carrying this entry's status, headers and body (shared between waiters,
    /// cache hits and repeated creates); callers add their own headers.
    pub fn to_response(&self) -> http::Response<crate::body::Body> {
        self.to_response_in(http::HeaderMap::new())
    }

    /// [`Stored::to_response`] written into `room`, a header map this request no longer needs
    /// (the request's own): it is emptied first, and its memory is reused instead of freed
    /// while a new map is allocated. Nothing of what it held is kept.
    pub fn to_response_in(&self, mut room: http::HeaderMap) -> http::Response<crate::body::Body> {
        let mut resp = http::Response::new(crate::body::full(self.body.clone()));
        *resp.status_mut() = self.status;
        room.clear();
        // Room for the headers every answer gets on its way out (`Age`, `Cache-Status`,
        // `X-Request-Id`, `Weir-Policy`, `Keep-Alive`): a clone has no spare room, and the
        // first of them grew (rehashed) the map on every cache hit.
        room.reserve(self.headers.len() + ADDED_HEADERS);
        for (name, value) in &self.headers {
            room.append(name.clone(), value.clone());
        }
        // The map `Response::new` made is empty and owns no memory (`HeaderMap::new` does not
        // allocate): swapped out and forgotten rather than dropped (~50 instructions a hit).
        // Should an `http` release make `HeaderMap::new` allocate, this would leak a map per
        // hit: the debug builds (every test) say so.
        debug_assert_eq!(resp.headers().capacity(), 0);
        std::mem::forget(std::mem::replace(resp.headers_mut(), room));
        resp
    }
}
