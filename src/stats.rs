//! Counters behind `/_weir/api/status` and `/metrics`: per upstream and class, what clients
//! asked for and what actually reached the upstream (the difference is what Weir saved).

use crate::config::RouteClass;
use crate::surface::Surface;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct ClassCounters {
    pub client_requests: AtomicU64,
    pub upstream_requests: AtomicU64,
    pub coalesced: AtomicU64,
    pub cache_hits_fresh: AtomicU64,
    pub cache_hits_stale: AtomicU64,
    pub errors: AtomicU64,
    /// Refreshes the upstream answered `304 Not Modified` (the stored copy was revalidated
    /// with its `ETag`/`Last-Modified`, and no body was sent again).
    pub revalidated: AtomicU64,
    /// Clients' own conditional requests answered `304` from Weir's copy.
    pub not_modified: AtomicU64,
    /// Log (`stream`) answers replaced by the longer log the caller was already given.
    pub kept_longer: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ClassSnapshot {
    pub client_requests: u64,
    pub upstream_requests: u64,
    pub coalesced: u64,
    pub cache_hits_fresh: u64,
    pub cache_hits_stale: u64,
    pub errors: u64,
    pub revalidated: u64,
    pub not_modified: u64,
    pub kept_longer: u64,
}

impl ClassCounters {
    pub fn snapshot(&self) -> ClassSnapshot {
        ClassSnapshot {
            client_requests: self.client_requests.load(Relaxed),
            upstream_requests: self.upstream_requests.load(Relaxed),
            coalesced: self.coalesced.load(Relaxed),
            cache_hits_fresh: self.cache_hits_fresh.load(Relaxed),
            cache_hits_stale: self.cache_hits_stale.load(Relaxed),
            errors: self.errors.load(Relaxed),
            revalidated: self.revalidated.load(Relaxed),
            not_modified: self.not_modified.load(Relaxed),
            kept_longer: self.kept_longer.load(Relaxed),
        }
    }
}

impl std::ops::AddAssign for ClassSnapshot {
    fn add_assign(&mut self, o: ClassSnapshot) {
        self.client_requests += o.client_requests;
        self.upstream_requests += o.upstream_requests;
        self.coalesced += o.coalesced;
        self.cache_hits_fresh += o.cache_hits_fresh;
        self.cache_hits_stale += o.cache_hits_stale;
        self.errors += o.errors;
        self.revalidated += o.revalidated;
        self.not_modified += o.not_modified;
        self.kept_longer += o.kept_longer;
    }
}

/// Counters of one managed upstream.
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    classes: [ClassCounters; 7],
    errors_by_kind: Mutex<BTreeMap<String, u64>>,
    /// When recent rate-limit answers came (at most the policy's surge count), for the
    /// `surge_429` situation.
    rate_limits: Mutex<std::collections::VecDeque<tokio::time::Instant>>,
}

impl UpstreamCounters {
    pub fn class(&self, c: RouteClass) -> &ClassCounters {
        &self.classes[c as usize]
    }

    pub fn error(&self, c: RouteClass, kind: &str) {
        self.class(c).errors.fetch_add(1, Relaxed);
        if let Ok(mut m) = self.errors_by_kind.lock() {
            *m.entry(kind.to_string()).or_default() += 1;
        }
        if kind == "rate_limited" {
            if let Ok(mut q) = self.rate_limits.lock() {
                if q.len() >= crate::policy::SURGE_429_COUNT {
                    q.pop_front();
                }
                q.push_back(tokio::time::Instant::now());
            }
        }
    }

    /// A 429 surge: [`crate::policy::SURGE_429_COUNT`] rate-limit answers within
    /// [`crate::policy::SURGE_429_WINDOW`].
    pub fn rate_limit_surge(&self) -> bool {
        let Ok(q) = self.rate_limits.lock() else {
            return false;
        };
        q.len() >= crate::policy::SURGE_429_COUNT
            && q.front()
                .is_some_and(|t| t.elapsed() <= crate::policy::SURGE_429_WINDOW)
    }

    pub fn classes(&self) -> BTreeMap<&'static str, ClassSnapshot> {
        RouteClass::ALL
            .iter()
            .map(|c| (c.as_str(), self.class(*c).snapshot()))
            .collect()
    }

    pub fn totals(&self) -> ClassSnapshot {
        let mut t = ClassSnapshot::default();
        for c in RouteClass::ALL {
            t += self.class(c).snapshot();
        }
        t
    }

    pub fn errors_by_kind(&self) -> BTreeMap<String, u64> {
        self.errors_by_kind
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }
}

/// Counters for requests that are not to a managed upstream, and per surface.
#[derive(Debug, Default)]
pub struct GlobalCounters {
    surfaces: [AtomicU64; 4],
    pub passthrough_requests: AtomicU64,
    pub tunnels: AtomicU64,
    /// Bytes moved through blind tunnels (shared with each tunnel's task, which outlives the
    /// request that opened it).
    pub tunnel_bytes: std::sync::Arc<TunnelBytes>,
    pub rejected: AtomicU64,
    /// Requests recorded (`pipeline::record`), for the test that each is recorded once.
    #[cfg(test)]
    pub recorded: AtomicU64,
}

/// Bytes blind tunnels moved, counted as each chunk is written out.
#[derive(Debug, Default)]
pub struct TunnelBytes {
    /// Client to target.
    pub up: AtomicU64,
    /// Target to client.
    pub down: AtomicU64,
}

impl GlobalCounters {
    pub fn surface(&self, s: Surface) {
        self.surfaces[s.index()].fetch_add(1, Relaxed);
    }

    pub fn surfaces(&self) -> BTreeMap<&'static str, u64> {
        Surface::ALL
            .iter()
            .map(|s| (s.as_str(), self.surfaces[s.index()].load(Relaxed)))
            .collect()
    }
}
