//! The queue backend: the one set of queue operations the request path, the replay workers and
//! the control API use, over SQLite (one Weir, the default) or PostgreSQL (gateway replicas
//! sharing one queue).
//!
//! An enum rather than a trait object: there are exactly two backends, the calls are async,
//! and `match` keeps every operation's two implementations side by side.

#[cfg(feature = "gateway")]
use super::pg::PgQueue;
use std::time::Duration;
use weir_store::{AsyncStore, Item, ListFilter, NewItem, StateCounts, StoreError};

pub(crate) use crate::status::QueueBackend as BackendKind;

/// The durable create queue's storage.
pub(crate) enum QueueStore {
    Sqlite(AsyncStore),
    #[cfg(feature = "gateway")]
    Postgres(PgQueue),
}

/// How long an idle SQLite worker waits before looking again (a single process: new items
/// wake it directly, this only catches items whose retry time came).
const SQLITE_IDLE: Duration = Duration::from_secs(1);

/// What keeps a claimed item's lease alive while a worker sends it (PostgreSQL only; a build
/// without the `gateway` feature has no claims, so no guard can exist).
#[cfg(feature = "gateway")]
pub(crate) type ClaimGuard = super::pg::lease::ClaimKeeper;
#[cfg(not(feature = "gateway"))]
pub(crate) type ClaimGuard = std::convert::Infallible;

impl QueueStore {
    pub fn kind(&self) -> BackendKind {
        match self {
            QueueStore::Sqlite(_) => BackendKind::Sqlite,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(_) => BackendKind::Postgresql,
        }
    }

    pub async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.insert(item, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.insert(item, now_ms).await,
        }
    }

    /// A gateway's queue, shared by its replicas (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        #[cfg(feature = "gateway")]
        return matches!(self, QueueStore::Postgres(_));
        #[cfg(not(feature = "gateway"))]
        false
    }

    /// Hand-off offers (#14) live in a laptop's own SQLite queue only: a gateway replica
    /// never runs a developer's local agent.
    fn local_only(&self) -> Result<&AsyncStore, StoreError> {
        match self {
            QueueStore::Sqlite(s) => Ok(s),
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => Err(StoreError::Other {
                path: p.conn.db.clone().into(),
                detail: "a shared (gateway) queue takes no local-agent hand-offs".into(),
            }),
        }
    }

    pub async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.local_only()?
            .insert_offered(item, expires_at_ms, offer, now_ms)
            .await
    }

    pub async fn hand_off(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.local_only()?.hand_off(id, result, now_ms).await
    }

    pub async fn record_hand_off_result(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.local_only()?
            .record_hand_off_result(id, result, now_ms)
            .await
    }

    pub async fn requeue(&self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        self.local_only()?.requeue(id, why, now_ms).await
    }

    pub async fn withdraw(&self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        self.local_only()?.withdraw(id, why, now_ms).await
    }

    pub async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.expired_offers(now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(_) => Ok(Vec::new()),
        }
    }

    pub async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.get(id).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.get(id).await,
        }
    }

    pub async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.list(filter).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.list(filter).await,
        }
    }

    pub async fn counts(&self) -> Result<StateCounts, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.counts().await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.counts().await,
        }
    }

    /// The next due item of `upstream`, claimed for this worker. SQLite: one process, one
    /// worker per upstream, nothing to claim. PostgreSQL: `FOR UPDATE SKIP LOCKED` plus a lease,
    /// so no two replicas work on one item; [`QueueStore::release`] gives it back untouched.
    pub async fn claim_next(
        &self,
        upstream: &str,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.next_due(upstream, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.claim_next(upstream, now_ms).await,
        }
    }

    /// Keeps this worker's claim on `id` alive while the guard lives (PostgreSQL: renewed every
    /// lease/3; SQLite: one process, no claims).
    pub fn keep_claim(&self, id: i64) -> Option<ClaimGuard> {
        #[cfg(not(feature = "gateway"))]
        let _ = id;
        match self {
            QueueStore::Sqlite(_) => None,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => Some(p.keep_claim(id)),
        }
    }

    /// Gives a claimed item back without changing it (the gate was closed, nothing was sent).
    pub async fn release(&self, id: i64) {
        #[cfg(not(feature = "gateway"))]
        let _ = id;
        #[cfg(feature = "gateway")]
        if let QueueStore::Postgres(p) = self {
            if let Err(e) = p.release(id).await {
                // Not fatal: the lease runs out by itself.
                tracing::debug!(id, error = %e, "could not release a queue claim");
            }
        }
    }

    /// How long an idle worker may sleep before something of `upstream` can be due (a new
    /// item wakes it sooner).
    #[cfg_attr(not(feature = "gateway"), allow(unused_variables))]
    pub async fn idle_wait(&self, upstream: &str, now_ms: i64) -> Duration {
        match self {
            QueueStore::Sqlite(_) => SQLITE_IDLE,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.idle_wait(upstream, now_ms).await,
        }
    }

    pub async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.find_by_dedupe_key(key).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.find_by_dedupe_key(key).await,
        }
    }

    /// The item answered with this provisional job or session id (see
    /// `pipeline::provisional`).
    pub async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.find_by_provisional_id(id).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.find_by_provisional_id(id).await,
        }
    }

    /// `failed`, with what the upstream answered (its status and error) as the result.
    pub async fn mark_failed_with(
        &self,
        id: i64,
        reason: &str,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.mark_failed_with(id, reason, result, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.mark_failed_with(id, reason, result, now_ms).await,
        }
    }

    pub async fn mark_replaying(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.mark_replaying(id, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.mark_replaying(id, now_ms).await,
        }
    }

    pub async fn mark_done(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.mark_done(id, result, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.mark_done(id, result, now_ms).await,
        }
    }

    pub async fn mark_failed(
        &self,
        id: i64,
        reason: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.mark_failed(id, reason, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.mark_failed(id, reason, now_ms).await,
        }
    }

    pub async fn reschedule(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.reschedule(id, next_attempt_at, error, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.reschedule(id, next_attempt_at, error, now_ms).await,
        }
    }

    pub async fn mark_in_doubt(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.mark_in_doubt(id, next_attempt_at, error, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.mark_in_doubt(id, next_attempt_at, error, now_ms).await,
        }
    }

    pub async fn cancel(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.cancel(id, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.cancel(id, now_ms).await,
        }
    }

    pub async fn retry(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.retry(id, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.retry(id, now_ms).await,
        }
    }

    pub async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.expire_older_than(max_age_ms, now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.expire_older_than(max_age_ms, now_ms).await,
        }
    }

    /// Items a stopped Weir left `replaying` become `in_doubt`. SQLite: at start, all of them
    /// (only this process writes the file). PostgreSQL: only those whose lease ran out (their
    /// replica died mid-replay); every replica checks this as it goes, not just at start.
    pub async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.recover_after_crash(now_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.recover_expired_leases(now_ms).await,
        }
    }

    /// Run by the workers between items: nothing for SQLite (recovered at start), expired
    /// leases for PostgreSQL.
    #[cfg_attr(not(feature = "gateway"), allow(unused_variables))]
    pub async fn recover_while_running(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(_) => Ok(Vec::new()),
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.recover_expired_leases(now_ms).await,
        }
    }

    pub async fn purge_ended_before(
        &self,
        updated_before_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        match self {
            QueueStore::Sqlite(s) => s.purge_ended_before(updated_before_ms).await,
            #[cfg(feature = "gateway")]
            QueueStore::Postgres(p) => p.purge_ended_before(updated_before_ms).await,
        }
    }
}
