//! The queue operations in PostgreSQL, with the same meaning as `weir_store::Store`'s: the
//! same states, the same transitions (the SQL rendered from `weir_store::TRANSITIONS`), the
//! same errors. Differences are the claim (`FOR UPDATE SKIP LOCKED` plus a lease) and lease
//! recovery; see the module above.

use super::rows::{bind, set_count, states, NewRow, COLUMNS};
use super::{PgQueue, QUEUE_CHANNEL};
use crate::queue::backend::ClaimKeeper;
use crate::queue::backend::{BackendKind, QueueBackend};
use std::time::Duration;
use tokio_postgres::types::ToSql;
use weir_store::{
    Change, Dialect, Finish, HandOffRecord, Item, ListFilter, NewItem, Oldest, State, StateCounts,
    StoreError, Transition, UpstreamId, Usage, Value,
};

/// The database's clock in unix milliseconds: leases are dated by it, so replicas whose clocks
/// differ still agree on when a lease ran out.
pub(super) const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// An idle worker looks again at least this often, even with nothing due. Only a safety net:
/// an insert or a retry is announced (`NOTIFY`, which wakes it at once), every other due time
/// (a backoff's next attempt, another replica's lease running out) is in what `idle_wait`
/// reads, and notifications lost while the `LISTEN` connection was down wake every worker when
/// it is back (`listen`). A minute, not less: an idle replica's workers (one per upstream) do
/// not wake on a short fixed period (#32, "idle means asleep"; it was 30 s).
const MAX_IDLE: Duration = Duration::from_secs(60);
const MIN_IDLE: Duration = Duration::from_millis(50);

impl PgQueue {
    /// The `Duplicate` error naming the live item that holds `key`.
    pub(super) async fn live_holder(&self, key: &str) -> Result<Item, StoreError> {
        match self.find_by_dedupe_key(key).await? {
            Some(live) if live.state.is_live() => Err(StoreError::Duplicate {
                existing_id: live.id,
            }),
            // The holder ended in between: report it as a conflict to retry.
            _ => Err(StoreError::Other {
                path: self.conn.db.clone().into(),
                detail: format!("the dedupe key {key} was taken and released concurrently; retry"),
            }),
        }
    }

    async fn notify(&self, upstream: &str) {
        let sql = format!("SELECT pg_notify('{QUEUE_CHANNEL}', $1)");
        let _ = self.conn.execute(&sql, &[&upstream]).await;
    }

    /// `replaying` items whose lease ran out (their replica died mid-send) become `in_doubt`.
    async fn recover_expired_leases(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "UPDATE weir_queue_items SET state = {}, needs_lookup = TRUE,
               next_attempt_at = $1, updated_at = $1, lease_owner = NULL, lease_until = NULL,
               last_error = 'the replica sending this create stopped (its lease ran out)'
             WHERE {} AND (lease_until IS NULL OR lease_until < {DB_NOW_MS})
             RETURNING {COLUMNS}",
            Transition::Recover.state_sql(),
            Transition::Recover.guard_sql()
        );
        let rows = self.conn.query(&sql, &[&now_ms]).await?;
        self.items(rows)
    }
}

#[async_trait::async_trait]
impl QueueBackend for PgQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgresql
    }

    /// Inserts and announces the item in one statement: the `NOTIFY` is delivered when (and
    /// only if) the row is committed.
    async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        let state = if item.in_doubt {
            State::InDoubt
        } else {
            State::Queued
        };
        let row = NewRow::new(self, item, state, now_ms, now_ms)?;
        let sql = format!(
            "WITH ins AS ({})
             SELECT ins.*, pg_notify('{QUEUE_CHANNEL}', ins.upstream) FROM ins",
            NewRow::insert_sql()
        );
        match self.conn.query_opt(&sql, &row.params()).await {
            Ok(Some(r)) => self.item(&r),
            Ok(None) => Err(self.conn.unreachable("the insert returned no row")),
            Err(StoreError::Duplicate { .. }) => self.live_holder(row.dedupe_key()).await,
            Err(e) => Err(e),
        }
    }

    async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM weir_queue_items WHERE id = $1");
        self.conn
            .query_opt(&sql, &[&id])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        let wanted = if filter.states.is_empty() {
            states(&State::ALL)
        } else {
            states(&filter.states)
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM weir_queue_items WHERE state = ANY($1)
             ORDER BY id DESC LIMIT $2"
        );
        let limit = i64::from(filter.limit);
        let rows = self.conn.query(&sql, &[&wanted, &limit]).await?;
        rows.iter().map(|r| self.item(r)).collect()
    }

    async fn counts(&self) -> Result<StateCounts, StoreError> {
        let rows = self
            .conn
            .query(
                "SELECT state, COUNT(*) FROM weir_queue_items GROUP BY state",
                &[],
            )
            .await?;
        let mut counts = StateCounts::default();
        for r in rows {
            let state: String = r.get(0);
            let n: i64 = r.get(1);
            if let Ok(s) = state.parse::<State>() {
                set_count(&mut counts, s, n.max(0) as u64);
            }
        }
        Ok(counts)
    }

    async fn live_usage(&self, identity: &str) -> Result<Usage, StoreError> {
        let size = "octet_length(body) + octet_length(headers)";
        let Some(r) = self
            .conn
            .query_opt(
                &format!(
                    "SELECT COUNT(*), COALESCE(SUM({size}), 0)::BIGINT,
                            COUNT(*) FILTER (WHERE identity = $1),
                            COALESCE(SUM({size}) FILTER (WHERE identity = $1), 0)::BIGINT
                     FROM weir_queue_items
                     WHERE state IN ('queued', 'replaying', 'in_doubt', 'offered')"
                ),
                &[&identity],
            )
            .await?
        else {
            return Ok(Usage::default());
        };
        let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
        Ok(Usage {
            items: n(0),
            bytes: n(1),
            identity_items: n(2),
            identity_bytes: n(3),
        })
    }

    /// Claims the oldest due item of `upstream` that no live lease holds.
    async fn claim_next(
        &self,
        upstream: &UpstreamId,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
        let upstream = upstream.as_str();
        let sql = format!(
            "UPDATE weir_queue_items SET lease_owner = $3, lease_until = {DB_NOW_MS} + $4
             WHERE id = (
               SELECT id FROM weir_queue_items
               WHERE upstream = $1 AND state IN ('queued', 'in_doubt') AND next_attempt_at <= $2
                 AND (lease_until IS NULL OR lease_until < {DB_NOW_MS})
               ORDER BY created_at, id LIMIT 1
               FOR UPDATE SKIP LOCKED)
             RETURNING {COLUMNS}"
        );
        let lease = self.lease.as_millis() as i64;
        self.conn
            .query_opt(&sql, &[&upstream, &now_ms, &self.owner, &lease])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    async fn release(&self, id: i64) {
        let r = self
            .conn
            .execute(
                "UPDATE weir_queue_items SET lease_owner = NULL, lease_until = NULL
                 WHERE id = $1 AND lease_owner = $2 AND state <> 'replaying'",
                &[&id, &self.owner],
            )
            .await;
        if let Err(e) = r {
            // Not fatal: the lease runs out by itself.
            tracing::debug!(id, error = %e, "could not release a queue claim");
        }
    }

    /// Until the earliest moment something of `upstream` may be due or a lease runs out,
    /// bounded by [`MIN_IDLE`]..[`MAX_IDLE`]; [`MAX_IDLE`] when the database cannot say.
    async fn idle_wait(&self, upstream: &UpstreamId, now_ms: i64) -> Option<Duration> {
        let upstream = upstream.as_str();
        let sql = format!(
            "SELECT LEAST(
               (SELECT MIN(GREATEST(next_attempt_at, COALESCE(lease_until, 0)))
                  FROM weir_queue_items WHERE upstream = $1 AND state IN ('queued', 'in_doubt')),
               (SELECT MIN(lease_until) FROM weir_queue_items WHERE state = 'replaying')
                  + ($2 - {DB_NOW_MS}))"
        );
        let next: Option<i64> = match self.conn.query_opt(&sql, &[&upstream, &now_ms]).await {
            Ok(Some(r)) => r.get(0),
            _ => None,
        };
        // Always a time: other replicas change the table too.
        Some(idle_for(next, now_ms))
    }

    async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM weir_queue_items WHERE dedupe_key = $1
             ORDER BY state IN ('queued', 'replaying', 'in_doubt', 'offered') DESC, id DESC
             LIMIT 1"
        );
        self.conn
            .query_opt(&sql, &[&key])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    /// Applies `change` when the transition table allows it (the SQL is rendered from it, as
    /// for SQLite). Only the lease holder may start a replay: a replica whose claim ran out
    /// (and was taken over) gets `IllegalTransition` and does not send. Every other transition
    /// also ends the claim; a retry is announced to the replicas. What the change writes to
    /// the item's offer row (a confirmation) is a CTE of the same statement.
    async fn apply(&self, id: i64, change: Change, now_ms: i64) -> Result<Item, StoreError> {
        let op = change.event();
        let (sets, guards) = if op == Transition::Replay {
            let lease = self.lease.as_millis() as i64;
            let until = Value::Sql(format!("{DB_NOW_MS} + {lease}"));
            let owner = Value::Text(self.owner.clone());
            (vec![("lease_until", until)], vec![("lease_owner", owner)])
        } else {
            (
                vec![("lease_owner", Value::Null), ("lease_until", Value::Null)],
                vec![],
            )
        };
        let stmt = change.update(
            Dialect::Postgres,
            "weir_queue_items",
            COLUMNS,
            now_ms,
            sets,
            guards,
        );
        let (sql, offer_binds) = match change.offer_write(now_ms) {
            Some(write) => Self::with_offer_write(&stmt.sql, stmt.binds.len() + 1, write),
            None => (stmt.sql.clone(), Vec::new()),
        };
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&id];
        all.extend(stmt.binds.iter().map(bind));
        all.extend(offer_binds.iter().map(bind));
        match self.conn.query_opt(&sql, &all).await {
            Ok(Some(row)) => {
                let item = self.item(&row)?;
                if op == Transition::Retry {
                    self.notify(item.upstream.as_str()).await;
                }
                return Ok(item);
            }
            Ok(None) => {}
            Err(StoreError::Duplicate { .. }) if op == Transition::Retry => {
                let key = self
                    .get(id)
                    .await?
                    .map(|i| i.dedupe_key)
                    .unwrap_or_default();
                return self.live_holder(&key).await;
            }
            Err(e) => return Err(e),
        }
        let state: Option<String> = self
            .conn
            .query_opt("SELECT state FROM weir_queue_items WHERE id = $1", &[&id])
            .await?
            .map(|r| r.get(0));
        Err(match state.and_then(|s| s.parse::<State>().ok()) {
            Some(from) => StoreError::IllegalTransition { id, from, op },
            None => StoreError::NotFound { id },
        })
    }

    /// The item answered with this provisional job or session id, in any state.
    async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM weir_queue_items
             WHERE provisional_job_id = $1 OR provisional_session_id = $1 LIMIT 1"
        );
        self.conn
            .query_opt(&sql, &[&id])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        let cutoff = now_ms.saturating_sub(max_age_ms);
        let sql = format!(
            "UPDATE weir_queue_items SET state = {}, updated_at = $2,
               lease_owner = NULL, lease_until = NULL
             WHERE {} AND created_at < $1
               AND (lease_until IS NULL OR lease_until < {DB_NOW_MS})
             RETURNING {COLUMNS}",
            Transition::Expire.state_sql(),
            Transition::Expire.guard_sql()
        );
        let rows = self.conn.query(&sql, &[&cutoff, &now_ms]).await?;
        self.items(rows)
    }

    /// Deletes long-ended items and, in the same statement, their sealed credentials.
    async fn purge_ended_before(&self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "WITH gone AS (
               DELETE FROM weir_queue_items
               WHERE state NOT IN ('queued', 'replaying', 'in_doubt', 'offered')
                 AND updated_at < $1
               RETURNING {COLUMNS}),
             creds AS (
               DELETE FROM weir_queue_credentials c USING gone
               WHERE c.account = gone.credential_ref
                 AND NOT EXISTS (SELECT 1 FROM weir_queue_items i
                                 WHERE i.credential_ref = c.account AND i.id <> gone.id))
             SELECT * FROM gone"
        );
        let rows = self.conn.query(&sql, &[&updated_before_ms]).await?;
        self.items(rows)
    }

    fn keep_claim(&self, id: i64) -> Option<ClaimKeeper> {
        Some(Box::new(self.renew_claim(id)))
    }

    async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.insert_offer(item, expires_at_ms, offer, now_ms).await
    }

    async fn record_hand_off_result(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        self.record_finish(id, finish, now_ms).await
    }

    async fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        self.record_of(id).await
    }

    async fn list_offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        self.offers(filter).await
    }

    async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.expired(now_ms).await
    }

    /// Only `replaying` items whose lease ran out: the other replicas may be sending theirs.
    async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.recover_expired_leases(now_ms).await
    }

    async fn recover_while_running(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.recover_expired_leases(now_ms).await
    }

    /// As SQLite's (`weir_store::Store::oldest`). A waiting item under another replica's
    /// lease is not expired until the lease ends, so its expiry can come due more than once;
    /// the housekeeping's shortest sleep keeps that from spinning.
    async fn oldest(&self) -> Result<Oldest, StoreError> {
        let sql = "SELECT (SELECT MIN(created_at) FROM weir_queue_items
                            WHERE state IN ('queued', 'in_doubt')),
                          (SELECT MIN(updated_at) FROM weir_queue_items
                            WHERE state NOT IN ('queued', 'replaying', 'in_doubt', 'offered'))";
        let row = self.conn.query_opt(sql, &[]).await?;
        Ok(row
            .map(|r| Oldest {
                waiting_created_at: r.get(0),
                ended_updated_at: r.get(1),
            })
            .unwrap_or_default())
    }
}

/// How long an idle worker sleeps when the next item is due at `next` (unix ms on this
/// replica's clock; `None` when nothing is), within [`MIN_IDLE`]..[`MAX_IDLE`].
fn idle_for(next: Option<i64>, now_ms: i64) -> Duration {
    match next {
        Some(at) => {
            Duration::from_millis(at.saturating_sub(now_ms).max(0) as u64).clamp(MIN_IDLE, MAX_IDLE)
        }
        None => MAX_IDLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #32 item 4: with nothing due an idle worker sleeps a minute, not 30 s; a due time
    /// sooner than that is kept to the millisecond, and one that passed is not a spin.
    #[test]
    fn an_idle_worker_sleeps_until_the_next_due_time_or_a_minute() {
        let now = 1_700_000_000_000;
        assert_eq!(idle_for(None, now), Duration::from_secs(60));
        assert_eq!(
            idle_for(Some(now + 7_250), now),
            Duration::from_millis(7_250)
        );
        assert_eq!(
            idle_for(Some(now + 3_600_000), now),
            Duration::from_secs(60)
        );
        assert_eq!(idle_for(Some(now - 5_000), now), MIN_IDLE);
    }
}
