//! The SQLite writes: [`Store::apply`] runs a [`Change`] with the SQL rendered from the
//! transition table ([`crate::machine`]); inserts, the bulk moves (expire, recover) and the
//! purge. Each returns the updated [`Item`]s so the caller can emit an event and, when an item
//! has ended (`State::is_end`), delete its keychain secret.

use rusqlite::types::{ToSqlOutput, Value as SqlValue};
use rusqlite::{params, OptionalExtension, ToSql, Transaction};

use crate::item::{Item, ItemResult, NewItem, State, COLUMNS};
use crate::machine::{Change, Dialect, Transition, Value};
use crate::offer::{json_text, offer_upsert, Confirmation, Finish, HandOffRecord, OFFER_COLUMNS};
use crate::store::Store;
use crate::StoreError;

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Owned(match self {
            Value::Int(i) => SqlValue::Integer(*i),
            Value::Text(t) => SqlValue::Text(t.clone()),
            Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
            Value::Null => SqlValue::Null,
            // Rendered into the statement, never bound.
            Value::Sql(_) => SqlValue::Null,
        }))
    }
}

pub(crate) const LIVE_STATES: &str = "'queued', 'replaying', 'in_doubt', 'offered'";

impl Store {
    /// Stores a new `queued` item, due at `now_ms`. Committed and fsynced when this returns.
    /// Fails with [`StoreError::Duplicate`] if a live item already has the same dedupe key.
    pub fn insert(&mut self, item: &NewItem, now_ms: i64) -> Result<Item, StoreError> {
        let state = if item.in_doubt { "in_doubt" } else { "queued" };
        self.insert_as(item, state, now_ms, None, now_ms)
    }

    /// Stores a new `offered` item, a create offered to the local agent (never replayed while
    /// offered), and its offer row (`offer`: rule, checkout, …; `expires_at_ms`), in one
    /// transaction. `expires_at_ms` is also the item's `next_attempt_at` (unused while
    /// offered). Holds its dedupe key like a queued item.
    pub fn insert_offered(
        &mut self,
        item: &NewItem,
        expires_at_ms: i64,
        offer: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let offer = json_text(offer);
        self.insert_as(item, "offered", expires_at_ms, Some(offer), now_ms)
    }

    /// Inserts the item; with `offer`, also its offer row, in the same transaction.
    fn insert_as(
        &mut self,
        item: &NewItem,
        state: &'static str,
        next_attempt_at: i64,
        offer: Option<String>,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let headers = serde_json::to_string(&item.headers).map_err(|e| StoreError::Other {
            path: self.path.clone(),
            detail: format!("headers not serialisable: {e}"),
        })?;
        self.write(|tx, path| {
            tx.query_row(
                &format!(
                    "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                         identity, credential_ref, dedupe_key, repo, problem_statement, state,
                         created_at, attempts, next_attempt_at, updated_at, needs_lookup,
                         provisional_job_id, provisional_session_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?11, 0, ?14, ?11, ?13,
                         ?15, ?16)
                     RETURNING {COLUMNS}"
                ),
                params![
                    item.upstream,
                    item.method.as_str(),
                    item.path_and_query,
                    headers,
                    item.body,
                    item.identity,
                    item.credential_ref,
                    item.dedupe_key,
                    item.repo,
                    item.problem_statement,
                    now_ms,
                    state,
                    item.in_doubt,
                    next_attempt_at,
                    item.provisional.as_ref().map(|p| p.job_id.as_str()),
                    item.provisional.as_ref().map(|p| p.session_id.as_str()),
                ],
                Item::from_row,
            )
            .map_err(|e| duplicate_or(tx, path, &item.dedupe_key, e))
            .and_then(|stored| {
                if let Some(offer) = &offer {
                    tx.execute(
                        "INSERT INTO handoff_offers (item_id, offer, expires_at, created_at,
                             updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?4)",
                        params![stored.id, offer, next_attempt_at, now_ms],
                    )
                    .map_err(|e| StoreError::from_sqlite(path, e))?;
                }
                Ok(stored)
            })
        })
    }

    /// Applies `change` to item `id` when the table ([`crate::machine::TRANSITIONS`]) allows
    /// it from the item's state; the updated item. What the change writes to the item's offer
    /// row ([`Change::offer_write`]) is written in the same transaction, only when the item
    /// moved. When no row matches, the same transaction tells "no such item" from "wrong
    /// state". A retry whose dedupe key was taken meanwhile fails with
    /// [`StoreError::Duplicate`].
    pub fn apply(&mut self, id: i64, change: &Change, now_ms: i64) -> Result<Item, StoreError> {
        let op = change.event();
        let stmt = change.update(
            Dialect::Sqlite,
            "queue_items",
            COLUMNS,
            now_ms,
            vec![],
            vec![],
        );
        let mut all: Vec<&dyn ToSql> = Vec::with_capacity(stmt.binds.len() + 1);
        all.push(&id);
        all.extend(stmt.binds.iter().map(|v| v as &dyn ToSql));
        let offer = change.offer_write(now_ms).map(|write| {
            offer_upsert(
                Dialect::Sqlite,
                "handoff_offers",
                "queue_items",
                "id = ?1",
                write,
                2,
            )
        });
        self.write(|tx, path| {
            let sql_err = |e| StoreError::from_sqlite(path, e);
            let updated = tx
                .query_row(&stmt.sql, all.as_slice(), Item::from_row)
                .optional();
            let updated = match (op, updated) {
                (Transition::Retry, Err(e)) => {
                    let key: Option<String> = tx
                        .query_row(
                            "SELECT dedupe_key FROM queue_items WHERE id = ?1",
                            [id],
                            |r| r.get(0),
                        )
                        .optional()
                        .map_err(sql_err)?;
                    return Err(duplicate_or(tx, path, key.as_deref().unwrap_or(""), e));
                }
                (_, r) => r.map_err(sql_err)?,
            };
            if let Some(item) = updated {
                if let Some((sql, binds)) = &offer {
                    let mut offer_all: Vec<&dyn ToSql> = vec![&id];
                    offer_all.extend(binds.iter().map(|v| v as &dyn ToSql));
                    tx.execute(sql, offer_all.as_slice()).map_err(sql_err)?;
                }
                return Ok(item);
            }
            let from: Option<State> = tx
                .query_row("SELECT state FROM queue_items WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql_err)?;
            Err(match from {
                Some(from) => StoreError::IllegalTransition { id, from, op },
                None => StoreError::NotFound { id },
            })
        })
    }

    /// [`Change::Replay`].
    pub fn mark_replaying(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.apply(id, &Change::Replay, now_ms)
    }

    /// [`Change::Done`].
    pub fn mark_done(
        &mut self,
        id: i64,
        result: &ItemResult,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.clone();
        self.apply(id, &Change::Done { result }, now_ms)
    }

    /// [`Change::Fail`] without a result.
    pub fn mark_failed(&mut self, id: i64, reason: &str, now_ms: i64) -> Result<Item, StoreError> {
        let reason = reason.to_owned();
        self.apply(
            id,
            &Change::Fail {
                reason,
                result: None,
            },
            now_ms,
        )
    }

    /// [`Change::Reschedule`]: call it from `replaying` only when the attempt certainly did
    /// not reach the upstream; otherwise use [`Store::mark_in_doubt`].
    pub fn reschedule(
        &mut self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let change = Change::Reschedule {
            at: next_attempt_at,
            error: error.to_owned(),
        };
        self.apply(id, &change, now_ms)
    }

    /// [`Change::InDoubt`].
    pub fn mark_in_doubt(
        &mut self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let change = Change::InDoubt {
            at: next_attempt_at,
            error: error.to_owned(),
        };
        self.apply(id, &change, now_ms)
    }

    /// [`Change::Cancel`].
    pub fn cancel(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.apply(id, &Change::Cancel, now_ms)
    }

    /// [`Change::Retry`].
    pub fn retry(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.apply(id, &Change::Retry, now_ms)
    }

    /// [`Change::HandOff`]: exactly one caller wins; a second confirmation gets
    /// [`StoreError::IllegalTransition`] (the command must not run twice). The confirmation
    /// is recorded on the offer row in the same transaction.
    pub fn hand_off(
        &mut self,
        id: i64,
        confirmation: &Confirmation,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let confirmation = confirmation.clone();
        self.apply(id, &Change::HandOff { confirmation }, now_ms)
    }

    /// Records the local agent's outcome on the offer row of a `handed_off` item (`running`
    /// becomes false; the item's state does not change, its `updated_at` does, in the same
    /// transaction). `NotFound` unless the item is handed off.
    pub fn record_hand_off_result(
        &mut self,
        id: i64,
        finish: &Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        let write = finish.offer_write(now_ms);
        self.write(|tx, path| {
            let sql_err = |e| StoreError::from_sqlite(path, e);
            let moved = tx
                .execute(
                    "UPDATE queue_items SET updated_at = ?2 WHERE id = ?1 AND state = 'handed_off'",
                    params![id, now_ms],
                )
                .map_err(sql_err)?;
            if moved == 0 {
                return Err(StoreError::NotFound { id });
            }
            let upsert = offer_upsert(
                Dialect::Sqlite,
                "handoff_offers",
                "queue_items",
                "id = ?1",
                write,
                2,
            );
            let mut all: Vec<&dyn ToSql> = vec![&id];
            all.extend(upsert.1.iter().map(|v| v as &dyn ToSql));
            tx.execute(&upsert.0, all.as_slice()).map_err(sql_err)?;
            tx.query_row(
                &format!("SELECT {OFFER_COLUMNS} FROM handoff_offers WHERE item_id = ?1"),
                [id],
                HandOffRecord::from_row,
            )
            .map_err(sql_err)
        })
    }

    /// [`Change::Requeue`].
    pub fn requeue(&mut self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        let why = why.to_owned();
        self.apply(id, &Change::Requeue { why }, now_ms)
    }

    /// [`Change::Withdraw`].
    pub fn withdraw(&mut self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        let why = why.to_owned();
        self.apply(id, &Change::Withdraw { why }, now_ms)
    }

    /// Offered items whose offer ran out (their offer row's `expires_at <= now_ms`), oldest
    /// first. The caller requeues or withdraws each.
    pub fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        let cols = COLUMNS
            .split(", ")
            .map(|c| format!("i.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {cols} FROM queue_items i JOIN handoff_offers o ON o.item_id = i.id
                 WHERE i.state = 'offered' AND o.expires_at <= ?1 ORDER BY i.created_at, i.id"
            ))
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([now_ms], Item::from_row)
            .map_err(|e| self.sql_err(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql_err(e))
    }

    /// Every queued or in-doubt item created more than `max_age_ms` before `now_ms` →
    /// expired. Returns them, oldest first.
    pub fn expire_older_than(
        &mut self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        let cutoff = now_ms.saturating_sub(max_age_ms);
        self.write_many(
            &format!(
                "UPDATE queue_items SET state = {}, updated_at = ?2
                 WHERE {} AND created_at < ?1 RETURNING {COLUMNS}",
                Transition::Expire.state_sql(),
                Transition::Expire.guard_sql()
            ),
            params![cutoff, now_ms],
        )
    }

    /// At start-up: every `replaying` item (Weir stopped mid-send) → in_doubt, due now.
    /// Returns them, oldest first.
    pub fn recover_after_crash(&mut self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.write_many(
            &format!(
                "UPDATE queue_items SET state = {}, needs_lookup = 1,
                     next_attempt_at = ?1, updated_at = ?1,
                     last_error = 'Weir stopped while this create was being sent'
                 WHERE {} RETURNING {COLUMNS}",
                Transition::Recover.state_sql(),
                Transition::Recover.guard_sql()
            ),
            params![now_ms],
        )
    }

    /// Deletes ended items (done, failed, cancelled, expired) last changed before
    /// `updated_before_ms`, so the file does not grow forever. Returns the deleted items.
    pub fn purge_ended_before(&mut self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError> {
        // The deleted rows themselves, from the same statement: the caller deletes exactly
        // their credentials.
        self.write_many(
            &format!(
                "DELETE FROM queue_items WHERE state NOT IN ({LIVE_STATES})
                 AND updated_at < ?1 RETURNING {COLUMNS}"
            ),
            [updated_before_ms],
        )
    }

    fn write_many(
        &mut self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = self.write(|tx, path| {
            let mut stmt = tx
                .prepare(sql)
                .map_err(|e| StoreError::from_sqlite(path, e))?;
            let rows = stmt
                .query_map(params, Item::from_row)
                .map_err(|e| StoreError::from_sqlite(path, e))?;
            rows.collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::from_sqlite(path, e))
        })?;
        items.sort_by_key(|i| (i.created_at, i.id));
        Ok(items)
    }
}

/// A UNIQUE violation can only come from the live-dedupe index: name the item holding the key.
fn duplicate_or(
    tx: &Transaction<'_>,
    path: &std::path::Path,
    dedupe_key: &str,
    err: rusqlite::Error,
) -> StoreError {
    let unique = matches!(
        &err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    );
    if !unique {
        return StoreError::from_sqlite(path, err);
    }
    let existing = tx
        .query_row(
            &format!(
                "SELECT id FROM queue_items WHERE dedupe_key = ?1 AND state IN ({LIVE_STATES})"
            ),
            [dedupe_key],
            |r| r.get(0),
        )
        .optional();
    match existing {
        Ok(Some(existing_id)) => StoreError::Duplicate { existing_id },
        Ok(None) => StoreError::from_sqlite(path, err),
        Err(e) => StoreError::from_sqlite(path, e),
    }
}
