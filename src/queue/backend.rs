//! The queue backend: the one set of queue operations the request path, the replay workers and
//! the control API use, as a trait with two implementations: SQLite (one Weir, the default:
//! [`weir_store::AsyncStore`], below) and PostgreSQL (gateway replicas sharing one queue:
//! [`super::pg::PgQueue`]). Every state change is one [`Change`] through
//! [`QueueBackend::apply`]; both backends run the SQL rendered from the same transition table
//! (`weir_store::TRANSITIONS`).

use std::time::Duration;
use weir_store::{
    AsyncStore, Change, Finish, HandOffRecord, Item, ListFilter, NewItem, Oldest, StateCounts,
    StoreError, UpstreamId, Usage,
};

pub use crate::status::QueueBackend as BackendKind;

/// Keeps a claim alive while it lives; dropping it stops the renewal (PostgreSQL's lease
/// renewer, `pg::lease`). Opaque here, so the trait does not need the gateway feature.
pub type ClaimKeeper = Box<dyn std::any::Any + Send>;

/// The durable create queue's storage.
#[async_trait::async_trait]
pub trait QueueBackend: Send + Sync {
    fn kind(&self) -> BackendKind;

    /// Why the backend cannot store items now, when it found out on its own (the laptop's
    /// lazily made file could not be created); `None` when it can, as far as it knows.
    fn unusable(&self) -> Option<String> {
        None
    }

    /// A gateway's queue, shared by its replicas (PostgreSQL).
    fn is_shared(&self) -> bool {
        self.kind() == BackendKind::Postgresql
    }

    /// Stores a new `queued` (or `in_doubt`) item. `Err(Duplicate)` names the live item that
    /// already holds its dedupe key.
    async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError>;

    /// Stores an `offered` item (#14) and its offer row (`weir_store::offer`: the offer
    /// JSON, its expiry) in one transaction. Both backends store offers; the engine makes
    /// them on a laptop only (a gateway replica runs no developer's local agent,
    /// `handoff::HandoffError::Gateway`).
    async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError>;

    /// Moves item `id` as `change` says, when the transition table allows it from its state
    /// (`IllegalTransition` otherwise, `NotFound` for no such item). What the change writes
    /// to the item's offer row (a confirmation) is written in the same transaction.
    async fn apply(&self, id: i64, change: Change, now_ms: i64) -> Result<Item, StoreError>;

    /// Records the local agent's outcome on the offer row of a `handed_off` item (its state
    /// does not change); the updated record. `NotFound` unless the item is handed off.
    async fn record_hand_off_result(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError>;

    /// The hand-off record of item `id`, if it was ever offered.
    async fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError>;
    /// Items in the filter's states that were offered, with their records, newest first.
    async fn list_offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError>;

    async fn get(&self, id: i64) -> Result<Option<Item>, StoreError>;
    async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError>;
    async fn counts(&self) -> Result<StateCounts, StoreError>;
    /// What the live items take, in total and for `identity` (the queue's caps).
    async fn live_usage(&self, identity: &str) -> Result<Usage, StoreError>;
    /// The item holding `key`: the live one if there is one, else the newest.
    async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError>;
    /// The item answered with this provisional job or session id (see `pipeline::provisional`).
    async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError>;
    /// Offered items whose offer ran out, oldest first.
    async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError>;

    /// The next due item of `upstream`, claimed for this worker. SQLite: one process, one
    /// worker per upstream, nothing to claim. PostgreSQL: `FOR UPDATE SKIP LOCKED` plus a
    /// lease, so no two replicas work on one item; [`QueueBackend::release`] gives it back.
    async fn claim_next(
        &self,
        upstream: &UpstreamId,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError>;
    /// Keeps this worker's claim on `id` alive while the guard lives (PostgreSQL: renewed
    /// every lease/3; SQLite: no claims).
    fn keep_claim(&self, id: i64) -> Option<ClaimKeeper>;
    /// Gives a claimed item back without changing it (the gate was closed, nothing was sent).
    async fn release(&self, id: i64);
    /// How long an idle worker may sleep before something of `upstream` can be due (a new
    /// item wakes it sooner); `None` when nothing of it waits, so only a change can make
    /// something due: it sleeps until woken.
    async fn idle_wait(&self, upstream: &UpstreamId, now_ms: i64) -> Option<Duration>;

    /// Every queued or in-doubt item created more than `max_age_ms` ago → expired.
    async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError>;
    /// Items a stopped Weir left `replaying` become `in_doubt`. SQLite: at start, all of them
    /// (only this process writes the file). PostgreSQL: only those whose lease ran out.
    async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError>;
    /// Run by the workers between items: nothing for SQLite (recovered at start), expired
    /// leases for PostgreSQL (every replica checks as it goes).
    async fn recover_while_running(&self, now_ms: i64) -> Result<Vec<Item>, StoreError>;
    /// Deletes ended items last changed before `updated_before_ms`; returns them.
    async fn purge_ended_before(&self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError>;
    /// The oldest rows expiry and purge can act on, so that they run when something can
    /// expire (`super::housekeeping`) instead of on a tick.
    async fn oldest(&self) -> Result<Oldest, StoreError>;
}

/// The longest an idle SQLite worker (or the housekeeping) sleeps before a due time: it
/// bounds how late that time is seen after the machine slept (tokio's clock stops during
/// suspend; due times are wall clock). With nothing due there is no cap: every change that
/// makes an item due wakes them (`Queue::wake`: an insert, a retry, an offer back in the
/// queue), so an idle queue's workers sleep until one (#32 item 4; they woke every five
/// minutes, all of them, each with two store calls).
pub(super) const IDLE_CAP: Duration = Duration::from_secs(300);
/// The shortest idle sleep: a due time that just passed (or a clock step) is not a spin.
pub(super) const MIN_IDLE: Duration = Duration::from_millis(50);

/// How long to sleep until `at` (unix ms), within [`MIN_IDLE`]..[`IDLE_CAP`]; `None` (until
/// woken) when nothing is due.
pub(super) fn wait_until(at: Option<i64>, now_ms: i64) -> Option<Duration> {
    at.map(|at| {
        Duration::from_millis(at.saturating_sub(now_ms).max(0) as u64).clamp(MIN_IDLE, IDLE_CAP)
    })
}

/// Sleeps `wait`, or for ever (`None`: until whatever it is raced against).
pub(super) async fn sleep_or_never(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// SQLite: each operation runs on the store's own thread (see `weir_store::async_store`).
#[async_trait::async_trait]
impl QueueBackend for AsyncStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.insert(&item, now_ms)).await
    }

    async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.call(move |s| s.insert_offered(&item, expires_at_ms, &offer, now_ms))
            .await
    }

    async fn apply(&self, id: i64, change: Change, now_ms: i64) -> Result<Item, StoreError> {
        self.call(move |s| s.apply(id, &change, now_ms)).await
    }

    async fn record_hand_off_result(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        self.call(move |s| s.record_hand_off_result(id, &finish, now_ms))
            .await
    }

    async fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        self.call(move |s| s.hand_off_record(id)).await
    }

    async fn list_offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        self.call(move |s| s.list_offers(&filter)).await
    }

    async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        self.call(move |s| s.get(id)).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.list(&filter)).await
    }

    async fn counts(&self) -> Result<StateCounts, StoreError> {
        self.call(|s| s.counts()).await
    }

    async fn live_usage(&self, identity: &str) -> Result<Usage, StoreError> {
        let identity = identity.to_owned();
        self.call(move |s| s.live_usage(&identity)).await
    }

    async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        let key = key.to_owned();
        self.call(move |s| s.find_by_dedupe_key(&key)).await
    }

    async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        let id = id.to_owned();
        self.call(move |s| s.find_by_provisional_id(&id)).await
    }

    async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.expired_offers(now_ms)).await
    }

    async fn claim_next(
        &self,
        upstream: &UpstreamId,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
        let upstream = upstream.clone();
        self.call(move |s| s.next_due(upstream.as_str(), now_ms))
            .await
    }

    fn keep_claim(&self, _id: i64) -> Option<ClaimKeeper> {
        None
    }

    async fn release(&self, _id: i64) {}

    /// Until the upstream's next due item (its earliest `next_attempt_at`): one process
    /// writes the file, and nothing is in flight while its one worker is idle, so no lease
    /// can make an item due sooner. New items wake the worker (`Queue::wake`).
    async fn idle_wait(&self, upstream: &UpstreamId, now_ms: i64) -> Option<Duration> {
        let upstream = upstream.clone();
        match self
            .call(move |s| s.next_attempt_at(upstream.as_str()))
            .await
        {
            Ok(at) => wait_until(at, now_ms),
            // The next claim reports the trouble; look again soon, not in a loop.
            Err(_) => Some(Duration::from_secs(5)),
        }
    }

    async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.expire_older_than(max_age_ms, now_ms))
            .await
    }

    async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.recover_after_crash(now_ms)).await
    }

    async fn recover_while_running(&self, _now_ms: i64) -> Result<Vec<Item>, StoreError> {
        Ok(Vec::new())
    }

    async fn purge_ended_before(&self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.call(move |s| s.purge_ended_before(updated_before_ms))
            .await
    }

    async fn oldest(&self) -> Result<Oldest, StoreError> {
        self.call(|s| s.oldest()).await
    }
}

/// A SQLite backend by itself, at `path` (tests and tools; the engine opens it through
/// `Queue::open`).
pub async fn open_sqlite(path: &std::path::Path) -> Result<Box<dyn QueueBackend>, StoreError> {
    let store = AsyncStore::open(path, weir_store::StoreOptions::default()).await?;
    Ok(Box::new(store))
}

#[cfg(feature = "gateway")]
/// A PostgreSQL backend by itself, over plain TCP at `url`, migrated, claiming with `lease`
/// (tests and tools; the engine opens it through `Queue::open_postgres`).
pub async fn open_postgres(
    url: &str,
    lease: Duration,
) -> Result<Box<dyn QueueBackend>, StoreError> {
    use super::pg;
    let config: tokio_postgres::Config = url.parse().map_err(|e| StoreError::Other {
        path: "postgresql".into(),
        detail: format!("not a PostgreSQL URL: {e}"),
    })?;
    let conn = std::sync::Arc::new(pg::PgConn::new(config, pg::PgTls::Plain));
    pg::migrations::migrate(&conn).await?;
    Ok(Box::new(pg::PgQueue {
        conn,
        owner: pg::owner_name(),
        lease,
    }))
}
