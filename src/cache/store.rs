//! The bounded in-memory store. moka gives a concurrent cache with a byte budget (a weigher)
//! and least-recently-used eviction, so Weir does not hand-roll either. List, view and log entries
//! are also handed to the disk writer ([`super::persist`]) when persistence is on.

use super::persist::{self, ClearError, Persistence};
use super::{CacheKey, Pace, Served, Stored};
use crate::secrets::SecretStore;
use crate::status::CachePersistence;
use moka::policy::EvictionPolicy;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone)]
pub struct Cache {
    inner: moka::sync::Cache<CacheKey, Arc<Stored>, KeyHash>,
    persistence: Arc<Persistence>,
    /// Degradation-aware freshness: upstream strain and per-key refresh times.
    pace: Arc<Pace>,
    /// The longest log each caller was given (`stream` documents never shrink).
    served: Served,
}

/// Whether an entry may outlive this run (list, view and log answers; never a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Persist,
    MemoryOnly,
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

fn memory(max_bytes: u64) -> moka::sync::Cache<CacheKey, Arc<Stored>, KeyHash> {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|_k: &CacheKey, v: &Arc<Stored>| v.weight())
        .eviction_policy(EvictionPolicy::lru())
        .expire_after(Expire)
        .build_with_hasher(KeyHash)
}

/// The memory map's hash of a [`CacheKey`]: its first eight bytes. A key is already a blake3
/// hash (of an input holding the caller's keyed identity), so its bytes are uniform and no
/// client can choose them; hashing them again with SipHash was a few hundred instructions of
/// every cache lookup. Equality still compares all 32 bytes.
#[derive(Clone, Copy, Default)]
struct KeyHash;

impl std::hash::BuildHasher for KeyHash {
    type Hasher = FirstEight;
    fn build_hasher(&self) -> FirstEight {
        FirstEight(0)
    }
}

struct FirstEight(u64);

impl std::hash::Hasher for FirstEight {
    fn write(&mut self, bytes: &[u8]) {
        match bytes.first_chunk::<8>() {
            Some(b) => self.0 ^= u64::from_le_bytes(*b),
            // Not a key's bytes (none are shorter): mixed in all the same.
            None => {
                for b in bytes {
                    self.0 = self.0.rotate_left(8) ^ u64::from(*b);
                }
            }
        }
    }
    // The slice's length (always 32) says nothing.
    fn write_usize(&mut self, _: usize) {}
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Cache {
    /// The cache of a starting engine: what `data_dir/cache.sqlite` still holds is loaded and
    /// later entries are written there, unless `disk_max_bytes` is `None` or there is no
    /// keychain for the sealing key (then memory only, and the status says why).
    pub async fn open(
        max_bytes: u64,
        data_dir: &Path,
        disk_max_bytes: Option<u64>,
        secrets: &SecretStore,
    ) -> Cache {
        let opened = persist::open(data_dir, disk_max_bytes, secrets).await;
        let inner = memory(max_bytes);
        for (k, v) in opened.entries {
            inner.insert(k, Arc::new(v));
        }
        Cache {
            inner,
            persistence: Arc::new(opened.persistence),
            pace: Arc::new(Pace::default()),
            served: Served::default(),
        }
    }

    /// When each key was refreshed and whether each upstream is strained.
    pub fn pace(&self) -> &Pace {
        &self.pace
    }

    /// The longest log each caller was given.
    pub fn served(&self) -> &Served {
        &self.served
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<Stored>> {
        self.inner.get(key)
    }

    /// Stores `value`; a durable one is also handed to the disk writer (never waits).
    pub fn insert(&self, key: CacheKey, value: Arc<Stored>, durability: Durability) {
        if durability == Durability::Persist {
            self.persistence.put(key, value.clone());
        }
        self.inner.insert(key, value);
    }

    /// Empties memory (the remembered logs too) and the disk file. Memory is emptied even when
    /// the disk cannot be.
    pub async fn clear(&self) -> Result<(), ClearError> {
        self.inner.invalidate_all();
        self.inner.run_pending_tasks();
        // The logs remembered for followers are copies of cached answers: forgotten too.
        self.served.clear();
        self.persistence.clear().await
    }

    /// Waits until every entry handed to the writer is on disk; `close` stops the writer
    /// (engine shutdown).
    pub async fn flush(&self, close: bool) {
        self.persistence.flush(close).await;
    }

    /// Whether entries survive a restart, and if not why.
    pub fn persistence(&self) -> CachePersistence {
        self.persistence.status()
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
