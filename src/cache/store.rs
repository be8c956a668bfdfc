//! The bounded in-memory store. moka gives a concurrent cache with a byte budget (a weigher)
//! and least-recently-used eviction, so Weir does not hand-roll either. List, view and log entries
//! are also handed to the disk writer ([`super::persist`]) when persistence is on.

use super::persist::{self, ClearError, Persistence};
use super::{CacheKey, Pace, Served, Stored};
use crate::secrets::SecretStore;
use crate::status::CachePersistence;
use moka::policy::EvictionPolicy;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone)]
pub struct Cache {
    inner: moka::sync::Cache<CacheKey, Arc<Stored>, KeyHash>,
    /// This store among every store of the process (never reused): the memo's entries name it.
    id: u64,
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

/// When the store stops giving `v` out: a second after its last window ([`Expire`]). moka's
/// `get` returns nothing past it, and so must a memo ([`memo`]).
fn kept_until(v: &Stored) -> Instant {
    v.stale_if_error_until
        .max(v.revalidate_until)
        .max(v.fresh_until)
        + Duration::from_secs(1)
}

impl moka::Expiry<CacheKey, Arc<Stored>> for Expire {
    fn expire_after_create(
        &self,
        _k: &CacheKey,
        v: &Arc<Stored>,
        _now: std::time::Instant,
    ) -> Option<Duration> {
        Some(kept_until(v).saturating_duration_since(Instant::now()))
    }
}

fn memory(max_bytes: u64) -> moka::sync::Cache<CacheKey, Arc<Stored>, KeyHash> {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|_k: &CacheKey, v: &Arc<Stored>| v.weight())
        .eviction_policy(EvictionPolicy::lru())
        .expire_after(Expire)
        // Whatever leaves the store (evicted by the byte budget, expired, replaced,
        // invalidated) is forgotten by every thread's memo too.
        .eviction_listener(|_k, _v, _cause| memo::changed())
        .build_with_hasher(KeyHash)
}

/// Each thread's memo of the last answers it read from the store, so that a client asking the
/// same key again and again (a poll, a list refreshed by an editor) does not pay moka's whole
/// `get` each time: its clock, its read log and its housekeeping were ~1.05k of a fresh hit's
/// ~22.5k instructions (callgrind, session 18).
///
/// What keeps it exact: one process-wide generation, bumped after every change of any store
/// (an insert, a clear, and whatever moka evicts, expires or replaces, told by its eviction
/// listener). A memo entry is used only while the generation is the one read *before* its
/// store read, only for the same store (`Cache::id`, never reused) and the same 32-byte key
/// (compared whole). So a memo answer is always the store's current value for that key: an
/// entry replaced, evicted or cleared is never served from a memo. The recency that moka's
/// LRU order needs is still recorded: every [`memo::TOUCH_EVERY`]th use of an entry goes to
/// the store again.
///
/// Two more things moka's `get` did that a memo must too: an entry past its last window (plus
/// a second, [`kept_until`]) is not given out, though moka's listener hears of its expiry only
/// at its next housekeeping (a cache-only or offline Weir inserts nothing for hours, and would
/// have served a long-expired answer as stale); and a memo keeps nothing alive: it holds a
/// `Weak`, so an answer evicted or cleared is freed as the store lets it go.
mod memo {
    use super::{kept_until, AtomicU64, CacheKey, Instant, Ordering, Stored};
    use std::cell::RefCell;
    use std::sync::{Arc, Weak};

    /// Entries per thread: a client polling a few lists in turn still finds them.
    const SLOTS: usize = 4;
    /// Uses of a memo entry between two reads through the store (its LRU recency).
    pub const TOUCH_EVERY: u32 = 32;

    static GENERATION: AtomicU64 = AtomicU64::new(0);
    static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

    /// A new store's id (never 0, never given twice).
    pub fn new_store() -> u64 {
        NEXT_STORE.fetch_add(1, Ordering::Relaxed)
    }

    /// Some store changed: every memo entry read before now is void.
    pub fn changed() {
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }

    /// The generation to record with a store read: read *before* the read, so a change made
    /// during it voids the memo entry.
    pub fn generation() -> u64 {
        GENERATION.load(Ordering::Acquire)
    }

    struct Slot {
        store: u64,
        key: CacheKey,
        generation: u64,
        uses: u32,
        /// When the store stops giving it out ([`kept_until`]).
        until: Instant,
        value: Weak<Stored>,
    }

    #[derive(Default)]
    struct Memo {
        slots: [Option<Slot>; SLOTS],
        /// The slot the next new entry takes (round robin).
        next: usize,
    }

    thread_local! {
        static MEMO: RefCell<Memo> = RefCell::new(Memo::default());
    }

    /// The memo's value for `key` of store `store`, when it is still the store's at `now`
    /// (read only for an entry found: a caller that has the time already passes it).
    pub fn get(store: u64, key: &CacheKey, now: impl FnOnce() -> Instant) -> Option<Arc<Stored>> {
        let mut now = Some(now);
        MEMO.try_with(|m| {
            let mut m = m.try_borrow_mut().ok()?;
            let generation = generation();
            let mut found = None;
            for slot in m.slots.iter_mut() {
                let Some(s) = slot else { continue };
                if s.generation != generation {
                    // Void, and what it holds is let go now.
                    *slot = None;
                    continue;
                }
                if s.store == store && s.key == *key {
                    s.uses += 1;
                    if s.uses >= TOUCH_EVERY {
                        // Read through the store this time (its recency).
                        *slot = None;
                        return None;
                    }
                    let now = now.take().map(|now| now());
                    found = s
                        .value
                        .upgrade()
                        .filter(|_| now.is_some_and(|n| n < s.until));
                    if found.is_none() {
                        *slot = None;
                    }
                }
            }
            found
        })
        .ok()
        .flatten()
    }

    /// Remembers `value`, read from store `store` under `key` at `generation`.
    pub fn put(store: u64, key: CacheKey, generation: u64, value: &Arc<Stored>) {
        let _ = MEMO.try_with(|m| {
            let Ok(mut m) = m.try_borrow_mut() else {
                return;
            };
            let at = m.next;
            m.next = (at + 1) % SLOTS;
            m.slots[at] = Some(Slot {
                store,
                key,
                generation,
                uses: 0,
                until: kept_until(value),
                value: Arc::downgrade(value),
            });
        });
    }
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
            id: memo::new_store(),
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

    /// The entry under `key`: this thread's memo of it while it is still the store's
    /// (see [`memo`]), else moka's.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Stored>> {
        self.get_with(key, Instant::now)
    }

    /// [`Cache::get`] for a caller that read the time already (`now`): a fresh hit judges
    /// freshness at that instant, and the memo needs no clock read of its own.
    pub fn get_at(&self, key: &CacheKey, now: Instant) -> Option<Arc<Stored>> {
        self.get_with(key, || now)
    }

    fn get_with(&self, key: &CacheKey, now: impl FnOnce() -> Instant) -> Option<Arc<Stored>> {
        if let Some(v) = memo::get(self.id, key, now) {
            return Some(v);
        }
        let generation = memo::generation();
        let v = self.inner.get(key)?;
        memo::put(self.id, *key, generation, &v);
        Some(v)
    }

    /// Stores `value`; a durable one is also handed to the disk writer (never waits).
    pub fn insert(&self, key: CacheKey, value: Arc<Stored>, durability: Durability) {
        if durability == Durability::Persist {
            self.persistence.put(key, value.clone());
        }
        self.inner.insert(key, value);
        // After the insert: a memo entry read before it is void from now on.
        memo::changed();
    }

    /// Empties memory (the remembered logs too) and the disk file. Memory is emptied even when
    /// the disk cannot be.
    pub async fn clear(&self) -> Result<(), ClearError> {
        self.inner.invalidate_all();
        memo::changed();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::MemoryOnlyReason;
    use bytes::Bytes;

    fn memory_cache(max_bytes: u64) -> Cache {
        Cache {
            inner: memory(max_bytes),
            id: memo::new_store(),
            persistence: Arc::new(Persistence::memory_only(MemoryOnlyReason::Disabled, "test")),
            pace: Arc::new(Pace::default()),
            served: Served::default(),
        }
    }

    fn entry(body: &'static str) -> Arc<Stored> {
        let now = Instant::now();
        Arc::new(Stored {
            status: http::StatusCode::OK,
            headers: http::HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
            stored_at: now,
            fresh_until: now + Duration::from_secs(60),
            revalidate_until: now + Duration::from_secs(60),
            stale_if_error_until: now + Duration::from_secs(60),
        })
    }

    fn body(c: &Cache, k: &CacheKey) -> Option<Bytes> {
        c.get(k).map(|e| e.body.clone())
    }

    /// The memo never answers with what the store no longer holds under that key: a value
    /// replaced, cleared, or evicted by the byte budget; nor with another store's value, nor
    /// another key's. Each check reads the key again and again, so the memo is in play.
    #[tokio::test]
    async fn the_memo_answers_only_with_the_stores_current_value() {
        let (a, b) = (memory_cache(1 << 20), memory_cache(1 << 20));
        let k = CacheKey::from_bytes([1; 32]);
        let other = CacheKey::from_bytes([2; 32]);
        a.insert(k, entry("one"), Durability::MemoryOnly);
        for _ in 0..100 {
            assert_eq!(body(&a, &k).as_deref(), Some(&b"one"[..]));
            assert!(b.get(&k).is_none(), "another store's value");
            assert!(a.get(&other).is_none(), "another key's value");
        }
        a.insert(k, entry("two"), Durability::MemoryOnly);
        for _ in 0..3 {
            assert_eq!(body(&a, &k).as_deref(), Some(&b"two"[..]), "replaced");
        }
        a.clear().await.unwrap();
        assert!(a.get(&k).is_none(), "cleared");
        // A budget that holds one entry: the first is evicted when the second comes.
        let small = memory_cache(u64::from(entry("x").weight()) + 10);
        small.insert(k, entry("x"), Durability::MemoryOnly);
        for _ in 0..3 {
            assert!(small.get(&k).is_some());
        }
        small.insert(other, entry("y"), Durability::MemoryOnly);
        small.inner.run_pending_tasks();
        assert_eq!(
            small.inner.contains_key(&k) as u8 + small.inner.contains_key(&other) as u8,
            1
        );
        for key in [k, other] {
            for _ in 0..3 {
                assert_eq!(small.get(&key).is_some(), small.inner.contains_key(&key));
            }
        }
    }

    /// Past its last window and a second, an entry is given out by neither moka nor the memo,
    /// though nothing was inserted since and moka's listener has not heard of the expiry (an
    /// offline Weir would have served it as stale for as long as nothing else changed); and the
    /// memo keeps no answer alive once the store lets it go.
    #[tokio::test(start_paused = true)]
    async fn the_memo_gives_out_no_expired_entry_and_keeps_none_alive() {
        let c = memory_cache(1 << 20);
        let k = CacheKey::from_bytes([4; 32]);
        let now = Instant::now();
        let short = Arc::new(Stored {
            status: http::StatusCode::OK,
            headers: http::HeaderMap::new(),
            body: Bytes::from_static(b"short"),
            stored_at: now,
            fresh_until: now + Duration::from_secs(2),
            revalidate_until: now + Duration::from_secs(2),
            stale_if_error_until: now + Duration::from_secs(2),
        });
        c.insert(k, short, Durability::MemoryOnly);
        for _ in 0..3 {
            assert!(c.get(&k).is_some());
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        // Other tests' stores change the process-wide generation at any time, which voids the
        // memo too: only a look with no change around it says what the memo itself does.
        let v = c.inner.get(&k).expect("moka's own clock has not run");
        let mut clean_looks = 0;
        for _ in 0..1000 {
            let generation = memo::generation();
            memo::put(c.id, k, generation, &v);
            let got = memo::get(c.id, &k, Instant::now);
            if memo::generation() == generation {
                assert!(got.is_none(), "the memo gave out an expired entry");
                clean_looks += 1;
            }
        }
        assert!(clean_looks > 0);

        let k2 = CacheKey::from_bytes([5; 32]);
        let kept = entry("kept");
        let weak = Arc::downgrade(&kept);
        c.insert(k2, kept, Durability::MemoryOnly);
        for _ in 0..3 {
            assert!(c.get(&k2).is_some());
        }
        // (moka's `invalidate_all` lets go lazily, at its housekeeping; `invalidate` at once.)
        c.inner.invalidate(&k2);
        c.inner.run_pending_tasks();
        assert!(
            weak.upgrade().is_none(),
            "a memo kept a value the store let go"
        );
    }

    /// Every [`memo::TOUCH_EVERY`]th read of a memo entry goes to the store, which records
    /// its recency for the least-recently-used order.
    #[test]
    fn a_memo_entry_goes_back_to_the_store_for_its_recency() {
        let c = memory_cache(1 << 20);
        let k = CacheKey::from_bytes([3; 32]);
        c.insert(k, entry("z"), Durability::MemoryOnly);
        let id = c.id;
        let mut from_memo = 0;
        for _ in 0..(3 * memo::TOUCH_EVERY) {
            if memo::get(id, &k, Instant::now).is_some() {
                from_memo += 1;
            } else {
                let g = memo::generation();
                let v = c.inner.get(&k).unwrap();
                memo::put(id, k, g, &v);
            }
        }
        assert!(from_memo > 0);
        assert!(from_memo < 3 * memo::TOUCH_EVERY - 2, "{from_memo}");
    }
}
