//! The bounded in-memory store. moka gives a concurrent cache with a byte budget (a weigher)
//! and least-recently-used eviction, so Weir does not hand-roll either.

use super::{CacheKey, Stored};
use moka::policy::EvictionPolicy;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone)]
pub struct Cache {
    inner: moka::sync::Cache<CacheKey, Arc<Stored>>,
}

/// Drops entries once they can no longer be served even on error. Freshness decisions use
/// tokio's clock in [`Stored::freshness`]; this is only memory housekeeping.
struct Expire;

impl moka::Expiry<CacheKey, Arc<Stored>> for Expire {
    fn expire_after_create(
        &self,
        _k: &CacheKey,
        v: &Arc<Stored>,
        _now: std::time::Instant,
    ) -> Option<Duration> {
        let now = Instant::now();
        let last = v
            .stale_if_error_until
            .max(v.revalidate_until)
            .max(v.fresh_until);
        Some(last.saturating_duration_since(now) + Duration::from_secs(1))
    }
}

impl Cache {
    pub fn new(max_bytes: u64) -> Cache {
        let inner = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_k: &CacheKey, v: &Arc<Stored>| v.weight())
            .eviction_policy(EvictionPolicy::lru())
            .expire_after(Expire)
            .build();
        Cache { inner }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<Stored>> {
        self.inner.get(key)
    }

    pub fn insert(&self, key: CacheKey, value: Arc<Stored>) {
        self.inner.insert(key, value);
    }

    /// Exact counts need moka's pending housekeeping applied first (status calls only).
    pub fn entry_count(&self) -> u64 {
        self.inner.run_pending_tasks();
        self.inner.entry_count()
    }

    pub fn weighted_size(&self) -> u64 {
        self.inner.run_pending_tasks();
        self.inner.weighted_size()
    }
}
