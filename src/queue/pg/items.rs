//! The queue operations in PostgreSQL, with the same meaning as `weir_store::Store`'s: the
//! same states, the same allowed transitions (`weir_store::Transition::allowed_from`), the
//! same errors. Differences are the claim (`FOR UPDATE SKIP LOCKED` plus a lease) and lease
//! recovery; see the module above.

use super::{PgQueue, QUEUE_CHANNEL};
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use weir_store::{Item, ListFilter, NewItem, State, StateCounts, StoreError, Transition};

const COLUMNS: &str = "id, upstream, method, path_and_query, headers, body, identity, \
     credential_ref, dedupe_key, repo, problem_statement, state, created_at, attempts, \
     next_attempt_at, last_attempt_at, last_error, result, updated_at, needs_lookup, \
     provisional_job_id, provisional_session_id";

/// The database's clock in unix milliseconds: leases are dated by it, so replicas whose clocks
/// differ still agree on when a lease ran out.
pub(super) const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// An idle worker looks again at least this often (a `NOTIFY` wakes it sooner).
const MAX_IDLE: Duration = Duration::from_secs(30);
const MIN_IDLE: Duration = Duration::from_millis(50);

fn states(list: &[State]) -> Vec<&'static str> {
    list.iter().map(|s| s.as_str()).collect()
}

impl PgQueue {
    fn item(&self, row: &Row) -> Result<Item, StoreError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt {
            path: self.conn.db.clone().into(),
            detail: format!("unexpected stored {what}: {e}"),
        };
        let get = |e: tokio_postgres::Error| bad("value", &e);
        let headers: String = row.try_get("headers").map_err(get)?;
        let state: String = row.try_get("state").map_err(get)?;
        let result: Option<String> = row.try_get("result").map_err(get)?;
        let attempts: i32 = row.try_get("attempts").map_err(get)?;
        Ok(Item {
            id: row.try_get("id").map_err(get)?,
            upstream: row.try_get("upstream").map_err(get)?,
            method: row.try_get("method").map_err(get)?,
            path_and_query: row.try_get("path_and_query").map_err(get)?,
            headers: serde_json::from_str(&headers).map_err(|e| bad("headers", &e))?,
            body: row.try_get("body").map_err(get)?,
            identity: row.try_get("identity").map_err(get)?,
            credential_ref: row.try_get("credential_ref").map_err(get)?,
            dedupe_key: row.try_get("dedupe_key").map_err(get)?,
            repo: row.try_get("repo").map_err(get)?,
            problem_statement: row.try_get("problem_statement").map_err(get)?,
            state: state.parse().map_err(|e| bad("state", &e))?,
            created_at: row.try_get("created_at").map_err(get)?,
            attempts: attempts.max(0) as u32,
            next_attempt_at: row.try_get("next_attempt_at").map_err(get)?,
            last_attempt_at: row.try_get("last_attempt_at").map_err(get)?,
            last_error: row.try_get("last_error").map_err(get)?,
            result: result
                .map(|r| serde_json::from_str(&r).map_err(|e| bad("result", &e)))
                .transpose()?,
            updated_at: row.try_get("updated_at").map_err(get)?,
            needs_lookup: row.try_get("needs_lookup").map_err(get)?,
            provisional: match (
                row.try_get::<_, Option<String>>("provisional_job_id")
                    .map_err(get)?,
                row.try_get::<_, Option<String>>("provisional_session_id")
                    .map_err(get)?,
            ) {
                (Some(job_id), Some(session_id)) => {
                    Some(weir_store::Provisional { job_id, session_id })
                }
                _ => None,
            },
        })
    }

    fn items(&self, rows: Vec<Row>) -> Result<Vec<Item>, StoreError> {
        let mut items = rows
            .iter()
            .map(|r| self.item(r))
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by_key(|i| (i.created_at, i.id));
        Ok(items)
    }

    /// Inserts and announces the item in one statement: the `NOTIFY` is delivered when (and
    /// only if) the row is committed.
    pub async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        let headers = serde_json::to_string(&item.headers).map_err(|e| StoreError::Other {
            path: self.conn.db.clone().into(),
            detail: format!("headers not serialisable: {e}"),
        })?;
        let state = if item.in_doubt { "in_doubt" } else { "queued" };
        let sql = format!(
            "WITH ins AS (
               INSERT INTO weir_queue_items (upstream, method, path_and_query, headers, body,
                 identity, credential_ref, dedupe_key, repo, problem_statement, state,
                 created_at, attempts, next_attempt_at, updated_at, needs_lookup,
                 provisional_job_id, provisional_session_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 0, $12, $12, $13,
                 $14, $15)
               RETURNING {COLUMNS})
             SELECT ins.*, pg_notify('{QUEUE_CHANNEL}', ins.upstream) FROM ins"
        );
        let job_id = item.provisional.as_ref().map(|p| p.job_id.clone());
        let session_id = item.provisional.as_ref().map(|p| p.session_id.clone());
        let params: [&(dyn ToSql + Sync); 15] = [
            &item.upstream,
            &item.method,
            &item.path_and_query,
            &headers,
            &item.body,
            &item.identity,
            &item.credential_ref,
            &item.dedupe_key,
            &item.repo,
            &item.problem_statement,
            &state,
            &now_ms,
            &item.in_doubt,
            &job_id,
            &session_id,
        ];
        match self.conn.query_opt(&sql, &params).await {
            Ok(Some(row)) => self.item(&row),
            Ok(None) => Err(self.conn.unreachable("the insert returned no row")),
            Err(StoreError::Duplicate { .. }) => self.live_holder(&item.dedupe_key).await,
            Err(e) => Err(e),
        }
    }

    pub async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM weir_queue_items WHERE id = $1");
        self.conn
            .query_opt(&sql, &[&id])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    pub async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
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

    pub async fn counts(&self) -> Result<StateCounts, StoreError> {
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

    /// Claims the oldest due item of `upstream` that no live lease holds.
    pub async fn claim_next(
        &self,
        upstream: &str,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
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

    pub async fn release(&self, id: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE weir_queue_items SET lease_owner = NULL, lease_until = NULL
                 WHERE id = $1 AND lease_owner = $2 AND state <> 'replaying'",
                &[&id, &self.owner],
            )
            .await
            .map(|_| ())
    }

    /// Until the earliest moment something of `upstream` may be due or a lease runs out,
    /// bounded by [`MIN_IDLE`]..[`MAX_IDLE`]; [`MAX_IDLE`] when the database cannot say.
    pub async fn idle_wait(&self, upstream: &str, now_ms: i64) -> Duration {
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
        match next {
            Some(at) => Duration::from_millis(at.saturating_sub(now_ms).max(0) as u64)
                .clamp(MIN_IDLE, MAX_IDLE),
            None => MAX_IDLE,
        }
    }

    pub async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM weir_queue_items WHERE dedupe_key = $1
             ORDER BY state IN ('queued', 'replaying', 'in_doubt') DESC, id DESC LIMIT 1"
        );
        self.conn
            .query_opt(&sql, &[&key])
            .await?
            .map(|r| self.item(&r))
            .transpose()
    }

    /// Only the lease holder may start a replay: a replica whose claim ran out (and was taken
    /// over) gets `IllegalTransition` and does not send.
    pub async fn mark_replaying(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        let set = format!(
            "state = 'replaying', attempts = attempts + 1, last_attempt_at = $3,
             needs_lookup = FALSE, updated_at = $3, lease_until = {DB_NOW_MS} + $5"
        );
        let lease = self.lease.as_millis() as i64;
        self.transition(
            id,
            Transition::Replay,
            &set,
            "AND lease_owner = $4",
            &[&now_ms, &self.owner, &lease],
        )
        .await
    }

    pub async fn mark_done(
        &self,
        id: i64,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.transition(
            id,
            Transition::Done,
            "state = 'done', result = $3, updated_at = $4",
            "",
            &[&result, &now_ms],
        )
        .await
    }

    pub async fn mark_failed(
        &self,
        id: i64,
        reason: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Fail,
            "state = 'failed', last_error = $3, updated_at = $4",
            "",
            &[&reason, &now_ms],
        )
        .await
    }

    pub async fn mark_failed_with(
        &self,
        id: i64,
        reason: &str,
        result: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.transition(
            id,
            Transition::Fail,
            "state = 'failed', last_error = $3, result = $4, updated_at = $5",
            "",
            &[&reason, &result, &now_ms],
        )
        .await
    }

    /// The item answered with this provisional job or session id, in any state.
    pub async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
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

    pub async fn reschedule(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Reschedule,
            "state = CASE state WHEN 'replaying' THEN 'queued' ELSE state END,
             next_attempt_at = $3, last_error = $4, updated_at = $5",
            "",
            &[&next_attempt_at, &error, &now_ms],
        )
        .await
    }

    pub async fn mark_in_doubt(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::InDoubt,
            "state = 'in_doubt', needs_lookup = TRUE, next_attempt_at = $3, last_error = $4,
             updated_at = $5",
            "",
            &[&next_attempt_at, &error, &now_ms],
        )
        .await
    }

    pub async fn cancel(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Cancel,
            "state = 'cancelled', updated_at = $3",
            "",
            &[&now_ms],
        )
        .await
    }

    pub async fn retry(&self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        let r = self
            .transition(
                id,
                Transition::Retry,
                "state = CASE WHEN needs_lookup THEN 'in_doubt' ELSE 'queued' END,
                 attempts = 0, next_attempt_at = $3, updated_at = $3",
                "",
                &[&now_ms],
            )
            .await;
        match r {
            Err(StoreError::Duplicate { .. }) => {
                let key = self
                    .get(id)
                    .await?
                    .map(|i| i.dedupe_key)
                    .unwrap_or_default();
                self.live_holder(&key).await
            }
            Ok(item) => {
                self.notify(&item.upstream).await;
                Ok(item)
            }
            other => other,
        }
    }

    /// The `Duplicate` error naming the live item that holds `key`.
    async fn live_holder(&self, key: &str) -> Result<Item, StoreError> {
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

    pub async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        let cutoff = now_ms.saturating_sub(max_age_ms);
        let sql = format!(
            "UPDATE weir_queue_items SET state = 'expired', updated_at = $2,
               lease_owner = NULL, lease_until = NULL
             WHERE state = ANY($3) AND created_at < $1
               AND (lease_until IS NULL OR lease_until < {DB_NOW_MS})
             RETURNING {COLUMNS}"
        );
        let from = states(Transition::Expire.allowed_from());
        let rows = self.conn.query(&sql, &[&cutoff, &now_ms, &from]).await?;
        self.items(rows)
    }

    /// `replaying` items whose lease ran out (their replica died mid-send) become `in_doubt`.
    pub async fn recover_expired_leases(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "UPDATE weir_queue_items SET state = 'in_doubt', needs_lookup = TRUE,
               next_attempt_at = $1, updated_at = $1, lease_owner = NULL, lease_until = NULL,
               last_error = 'the replica sending this create stopped (its lease ran out)'
             WHERE state = 'replaying' AND (lease_until IS NULL OR lease_until < {DB_NOW_MS})
             RETURNING {COLUMNS}"
        );
        let rows = self.conn.query(&sql, &[&now_ms]).await?;
        self.items(rows)
    }

    /// Deletes long-ended items and, in the same statement, their sealed credentials.
    pub async fn purge_ended_before(
        &self,
        updated_before_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "WITH gone AS (
               DELETE FROM weir_queue_items
               WHERE state NOT IN ('queued', 'replaying', 'in_doubt') AND updated_at < $1
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

    /// `UPDATE … SET {set} WHERE id = $1 AND state = ANY($2) {guard}`; every transition but
    /// the start of a replay also ends the claim. `args` are `$3…`.
    async fn transition(
        &self,
        id: i64,
        op: Transition,
        set: &str,
        guard: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> Result<Item, StoreError> {
        let end_claim = if op == Transition::Replay {
            ""
        } else {
            ", lease_owner = NULL, lease_until = NULL"
        };
        let sql = format!(
            "UPDATE weir_queue_items SET {set}{end_claim}
             WHERE id = $1 AND state = ANY($2) {guard} RETURNING {COLUMNS}"
        );
        let from = states(op.allowed_from());
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&id, &from];
        all.extend_from_slice(args);
        if let Some(row) = self.conn.query_opt(&sql, &all).await? {
            return self.item(&row);
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
}

fn set_count(c: &mut StateCounts, s: State, n: u64) {
    match s {
        State::Queued => c.queued = n,
        State::Replaying => c.replaying = n,
        State::InDoubt => c.in_doubt = n,
        State::Done => c.done = n,
        State::Failed => c.failed = n,
        State::Cancelled => c.cancelled = n,
        State::Expired => c.expired = n,
        // A shared queue never holds hand-off offers (they are a laptop's), but count them
        // the same way should one appear.
        State::Offered => c.offered = n,
        State::HandedOff => c.handed_off = n,
    }
}
