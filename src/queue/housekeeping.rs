//! Expiry and purge of the create queue, run when something can expire: one task per queue
//! sleeps until the oldest waiting item reaches the maximum age or the oldest ended one its
//! keep time ([`QueueBackend::oldest`](super::backend::QueueBackend::oldest)), or until a
//! change wakes it ([`Queue::wake`](super::Queue)), instead of every worker asking every
//! second.

use super::backend::{sleep_or_never, wait_until};
use super::replay::{end, KEEP_ENDED};
use super::{now_ms, Queue};
use crate::events::Bus;
use std::time::Duration;

/// After a pass that expired or purged, the next one waits at least this long: what was due
/// and is still there (a PostgreSQL item under another replica's lease, a store that failed)
/// is looked at again once a second, not in a loop.
const AFTER_SWEEP: Duration = Duration::from_secs(1);
/// How long to wait when the store cannot say what is due.
const STORE_TROUBLE: Duration = Duration::from_secs(5);

/// Expires and purges what is due now, if anything; how long until the next pass (`None`:
/// nothing can expire or be purged until the queue changes).
pub(super) async fn pass(bus: &Bus, q: &Queue) -> Option<Duration> {
    let now = now_ms();
    let max_age = q.max_age.as_millis().min(i64::MAX as u128) as i64;
    let due = match q.store.oldest().await {
        Ok(o) => o.next_due(max_age, KEEP_ENDED.as_millis() as i64),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the create queue's oldest items");
            return Some(STORE_TROUBLE);
        }
    };
    match due {
        Some(at) if at <= now => {
            sweep(bus, q, max_age).await;
            Some(AFTER_SWEEP)
        }
        due => wait_until(due, now),
    }
}

/// Passes until the engine stops, each when the last one said, or sooner when the queue
/// changes (an insert can bring the first expiry closer).
pub(super) async fn keep(bus: &Bus, q: &Queue) {
    let mut stop = bus.stopping();
    loop {
        // Enabled before the pass reads the store, so a change during it is not lost.
        let woken = q.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let wait = pass(bus, q).await;
        tokio::select! {
            _ = woken => {}
            _ = sleep_or_never(wait) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

async fn sweep(bus: &Bus, q: &Queue, max_age: i64) {
    if let Ok(items) = q.store.expire_older_than(max_age, now_ms()).await {
        for it in items {
            end(bus, q, &it, "expired: not replayed within the maximum age").await;
        }
    }
    // Purge long-ended items, deleting the credentials of exactly the rows deleted (the
    // store returns them from the DELETE itself).
    let cutoff = now_ms() - KEEP_ENDED.as_millis() as i64;
    if let Ok(purged) = q.store.purge_ended_before(cutoff).await {
        for it in &purged {
            if let Some(acct) = &it.credential_ref {
                q.delete_credential(acct).await;
            }
        }
    }
}
