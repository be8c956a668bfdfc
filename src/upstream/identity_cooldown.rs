//! Per-identity cooldowns: GitHub's rate limits are per user, so a 429 (or a rate-limit 403)
//! earned by one credential holds back that credential only. Bounded: expired holds are pruned
//! on insert, and beyond [`MAX_IDENTITIES`] the hold that ends soonest is dropped.

use crate::identity::Identity;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// At most this many identities are held at once (a laptop has a handful).
const MAX_IDENTITIES: usize = 4096;

/// "Do not send this identity's requests before T", per identity.
#[derive(Default)]
pub(crate) struct IdentityCooldowns {
    until: Mutex<HashMap<Identity, Instant>>,
    /// Holds in the map, set under its lock: every upstream attempt asks
    /// [`IdentityCooldowns::remaining`], almost always with none held, and is answered without
    /// the clock, the lock or hashing the identity.
    held: AtomicUsize,
}

impl IdentityCooldowns {
    /// Holds `who` for `wait` from now, unless a later hold is already in place.
    pub fn hold_for(&self, who: Identity, wait: Duration) {
        let now = Instant::now();
        let at = now + wait;
        let mut map = self.lock();
        if !map.contains_key(&who) && map.len() >= MAX_IDENTITIES {
            map.retain(|_, u| *u > now);
            if map.len() >= MAX_IDENTITIES {
                if let Some(k) = map.iter().min_by_key(|(_, u)| **u).map(|(k, _)| *k) {
                    map.remove(&k);
                }
            }
        }
        let e = map.entry(who).or_insert(at);
        *e = (*e).max(at);
        self.held.store(map.len(), Ordering::Release);
    }

    /// How long `who` must still wait; `None` when not held.
    pub fn remaining(&self, who: &Identity) -> Option<Duration> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let now = Instant::now();
        let mut map = self.lock();
        match map.get(who) {
            Some(u) if *u > now => Some(*u - now),
            Some(_) => {
                map.remove(who);
                self.held.store(map.len(), Ordering::Release);
                None
            }
            None => None,
        }
    }

    /// Identities currently held.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|u| **u > now).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Identity, Instant>> {
        // A plain map of deadlines: a panic elsewhere cannot leave it torn.
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::IdentityKey;

    fn id(token: &str) -> Identity {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, token.parse().unwrap());
        IdentityKey::new([3; 32]).identify(&h)
    }

    #[tokio::test(start_paused = true)]
    async fn holds_one_identity_only_and_expires() {
        let c = IdentityCooldowns::default();
        c.hold_for(id("a"), Duration::from_secs(30));
        c.hold_for(id("a"), Duration::from_secs(3)); // shorter: ignored
        assert_eq!(c.remaining(&id("a")), Some(Duration::from_secs(30)));
        assert_eq!(c.remaining(&id("b")), None);
        assert_eq!(c.len(), 1);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(c.remaining(&id("a")), None);
        assert_eq!(c.len(), 0);
    }

    /// The quick "none held" answer never hides a hold set after the last one expired, and a
    /// hold on one identity is still checked for the others.
    #[tokio::test(start_paused = true)]
    async fn a_hold_after_an_expiry_is_seen() {
        let c = IdentityCooldowns::default();
        assert_eq!(c.remaining(&id("a")), None);
        c.hold_for(id("a"), Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(c.remaining(&id("a")), None);
        c.hold_for(id("b"), Duration::from_secs(5));
        assert_eq!(c.remaining(&id("a")), None);
        assert_eq!(c.remaining(&id("b")), Some(Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn stays_bounded() {
        let c = IdentityCooldowns::default();
        for i in 0..MAX_IDENTITIES + 10 {
            c.hold_for(id(&format!("t{i}")), Duration::from_secs(60 + i as u64));
        }
        assert_eq!(c.lock().len(), MAX_IDENTITIES);
        // The newest holds survive.
        assert!(c
            .remaining(&id(&format!("t{}", MAX_IDENTITIES + 9)))
            .is_some());
    }
}
