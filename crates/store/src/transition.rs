//! The state machine: every operation that changes an item, which states it may start from,
//! and its SQL. Each returns the updated [`Item`] so the caller can emit an event and, when
//! the item has ended (`State::is_end`), delete its keychain secret.
//!
//! ```text
//! insert ─► queued ──mark_replaying──► replaying ──mark_done──► done
//!             ▲  ▲                      │  │  │
//!             │  └──────reschedule──────┘  │  └──mark_failed──► failed ──retry──► queued/in_doubt
//!             │                            │
//!             │        recover_after_crash / mark_in_doubt
//!             │                            ▼
//!             └─(retry)───────────────  in_doubt ──mark_done (found upstream)──► done
//!                                          └──mark_replaying (not found upstream)──► replaying
//! cancel: queued | in_doubt | failed ─► cancelled      expire: queued | in_doubt ─► expired
//!
//! local-agent hand-off (#14):
//! insert_offered ─► offered ──hand_off (confirmed, once)──► handed_off
//!                      │ └──requeue (declined / offer expired)──► queued
//!                      └──withdraw (declined / expired, nothing to send)──► cancelled
//! ```

use std::fmt;

use rusqlite::{params, OptionalExtension, ToSql, Transaction};

use crate::item::{Item, NewItem, State, COLUMNS};
use crate::store::{state_list, Store};
use crate::StoreError;

/// A state-changing operation, as named in [`StoreError::IllegalTransition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    Replay,
    Done,
    Fail,
    Reschedule,
    InDoubt,
    Cancel,
    Retry,
    Expire,
    Recover,
    HandOff,
    Requeue,
    Withdraw,
}

impl Transition {
    /// The states an item may be in for this operation.
    pub fn allowed_from(self) -> &'static [State] {
        use State::*;
        match self {
            Transition::Replay => &[Queued, InDoubt],
            Transition::Done => &[Replaying, InDoubt],
            Transition::Fail => &[Queued, Replaying, InDoubt],
            Transition::Reschedule => &[Queued, Replaying, InDoubt],
            Transition::InDoubt => &[Replaying],
            Transition::Cancel => &[Queued, InDoubt, Failed],
            Transition::Retry => &[Failed, Expired, Cancelled],
            Transition::Expire => &[Queued, InDoubt],
            Transition::Recover => &[Replaying],
            Transition::HandOff | Transition::Requeue | Transition::Withdraw => &[Offered],
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transition::Replay => "start a replay",
            Transition::Done => "mark it done",
            Transition::Fail => "mark it failed",
            Transition::Reschedule => "reschedule it",
            Transition::InDoubt => "mark it in doubt",
            Transition::Cancel => "cancel it",
            Transition::Retry => "retry it",
            Transition::Expire => "expire it",
            Transition::Recover => "recover it",
            Transition::HandOff => "hand it to the local agent",
            Transition::Requeue => "put it back in the queue",
            Transition::Withdraw => "withdraw the offer",
        })
    }
}

const LIVE_STATES: &str = "'queued', 'replaying', 'in_doubt', 'offered'";

impl Store {
    /// Stores a new `queued` item, due at `now_ms`. Committed and fsynced when this returns.
    /// Fails with [`StoreError::Duplicate`] if a live item already has the same dedupe key.
    pub fn insert(&mut self, item: &NewItem, now_ms: i64) -> Result<Item, StoreError> {
        let state = if item.in_doubt { "in_doubt" } else { "queued" };
        self.insert_as(item, state, now_ms, None, now_ms)
    }

    /// Stores a new `offered` item: a create offered to the local agent, never replayed
    /// while offered. `expires_at_ms` is kept in `next_attempt_at` (unused while offered);
    /// `offer` (rule, checkout, …) in `result`. Holds its dedupe key like a queued item.
    pub fn insert_offered(
        &mut self,
        item: &NewItem,
        expires_at_ms: i64,
        offer: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let offer = offer.to_string();
        self.insert_as(item, "offered", expires_at_ms, Some(offer), now_ms)
    }

    fn insert_as(
        &mut self,
        item: &NewItem,
        state: &'static str,
        next_attempt_at: i64,
        result: Option<String>,
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
                         created_at, attempts, next_attempt_at, updated_at, needs_lookup, result,
                         provisional_job_id, provisional_session_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?11, 0, ?14, ?11, ?13,
                         ?15, ?16, ?17)
                     RETURNING {COLUMNS}"
                ),
                params![
                    item.upstream,
                    item.method,
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
                    result,
                    item.provisional.as_ref().map(|p| p.job_id.as_str()),
                    item.provisional.as_ref().map(|p| p.session_id.as_str()),
                ],
                Item::from_row,
            )
            .map_err(|e| duplicate_or(tx, path, &item.dedupe_key, e))
        })
    }

    /// queued | in_doubt → replaying; counts an attempt. From `in_doubt` only after the caller
    /// looked the create up upstream and did not find it (this clears `needs_lookup`).
    pub fn mark_replaying(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Replay,
            "state = 'replaying', attempts = attempts + 1, last_attempt_at = ?2,
             needs_lookup = 0, updated_at = ?2",
            &[&now_ms],
        )
    }

    /// replaying | in_doubt → done, recording what was created (job id, session id, PR).
    pub fn mark_done(
        &mut self,
        id: i64,
        result: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.transition(
            id,
            Transition::Done,
            "state = 'done', result = ?2, updated_at = ?3",
            &[&result, &now_ms],
        )
    }

    /// queued | replaying | in_doubt → failed (a definite, permanent error).
    pub fn mark_failed(&mut self, id: i64, reason: &str, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Fail,
            "state = 'failed', last_error = ?2, updated_at = ?3",
            &[&reason, &now_ms],
        )
    }

    /// [`Store::mark_failed`], also recording what the upstream answered (`result`: its status
    /// and error), so a provisional job can report the failure in the upstream's own shape.
    pub fn mark_failed_with(
        &mut self,
        id: i64,
        reason: &str,
        result: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.transition(
            id,
            Transition::Fail,
            "state = 'failed', last_error = ?2, result = ?3, updated_at = ?4",
            &[&reason, &result, &now_ms],
        )
    }

    /// Try again at `next_attempt_at`. From `replaying` the item goes back to `queued`: call
    /// this only when the attempt certainly did not reach the upstream (connection refused,
    /// breaker open, 5xx before processing); otherwise use [`Store::mark_in_doubt`]. A
    /// `queued` or `in_doubt` item keeps its state (a failed lookup stays in doubt).
    pub fn reschedule(
        &mut self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Reschedule,
            "state = CASE state WHEN 'replaying' THEN 'queued' ELSE state END,
             next_attempt_at = ?2, last_error = ?3, updated_at = ?4",
            &[&next_attempt_at, &error, &now_ms],
        )
    }

    /// replaying → in_doubt: the send may have reached the upstream (timeout after sending,
    /// connection reset mid-response). It is looked up before any new send.
    pub fn mark_in_doubt(
        &mut self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::InDoubt,
            "state = 'in_doubt', needs_lookup = 1, next_attempt_at = ?2, last_error = ?3,
             updated_at = ?4",
            &[&next_attempt_at, &error, &now_ms],
        )
    }

    /// queued | in_doubt | failed → cancelled.
    pub fn cancel(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Cancel,
            "state = 'cancelled', updated_at = ?2",
            &[&now_ms],
        )
    }

    /// failed | expired | cancelled → queued (or `in_doubt` if an earlier send may have
    /// reached the upstream), due now, with a fresh attempt count. Fails with
    /// [`StoreError::Duplicate`] if the same create was queued again meanwhile.
    pub fn retry(&mut self, id: i64, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Retry,
            "state = CASE WHEN needs_lookup THEN 'in_doubt' ELSE 'queued' END, attempts = 0,
             next_attempt_at = ?2, updated_at = ?2",
            &[&now_ms],
        )
    }

    /// offered → handed_off: the developer confirmed. Exactly one caller wins; a second
    /// confirmation gets [`StoreError::IllegalTransition`] (the command must not run twice).
    /// `result` records what was started (it replaces the offer's details).
    pub fn hand_off(
        &mut self,
        id: i64,
        result: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.transition(
            id,
            Transition::HandOff,
            "state = 'handed_off', result = ?2, last_attempt_at = ?3, updated_at = ?3",
            &[&result, &now_ms],
        )
    }

    /// Records the local agent's outcome on a `handed_off` item (its state does not change).
    pub fn record_hand_off_result(
        &mut self,
        id: i64,
        result: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let result = result.to_string();
        self.write(|tx, path| {
            tx.query_row(
                &format!(
                    "UPDATE queue_items SET result = ?2, updated_at = ?3
                     WHERE id = ?1 AND state = 'handed_off' RETURNING {COLUMNS}"
                ),
                params![id, result, now_ms],
                Item::from_row,
            )
            .optional()
            .map_err(|e| StoreError::from_sqlite(path, e))?
            .ok_or(StoreError::NotFound { id })
        })
    }

    /// offered → queued, due now: the developer declined, or the offer expired. `why` goes
    /// to `last_error` so the queue's listing says what happened.
    pub fn requeue(&mut self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Requeue,
            "state = 'queued', result = NULL, next_attempt_at = ?3, last_error = ?2,
             updated_at = ?3",
            &[&why, &now_ms],
        )
    }

    /// offered → cancelled: declined or expired, and there is no request to send (an offer
    /// made by hand). `why` goes to `last_error`.
    pub fn withdraw(&mut self, id: i64, why: &str, now_ms: i64) -> Result<Item, StoreError> {
        self.transition(
            id,
            Transition::Withdraw,
            "state = 'cancelled', last_error = ?2, updated_at = ?3",
            &[&why, &now_ms],
        )
    }

    /// Offered items whose offer ran out (`next_attempt_at <= now_ms`), oldest first. The
    /// caller requeues or withdraws each.
    pub fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM queue_items
                 WHERE state = 'offered' AND next_attempt_at <= ?1 ORDER BY created_at, id"
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
                "UPDATE queue_items SET state = 'expired', updated_at = ?2
                 WHERE state IN ({}) AND created_at < ?1 RETURNING {COLUMNS}",
                state_list(Transition::Expire.allowed_from())
            ),
            params![cutoff, now_ms],
        )
    }

    /// At start-up: every `replaying` item (Weir stopped mid-send) → in_doubt, due now.
    /// Returns them, oldest first.
    pub fn recover_after_crash(&mut self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.write_many(
            &format!(
                "UPDATE queue_items SET state = 'in_doubt', needs_lookup = 1,
                     next_attempt_at = ?1, updated_at = ?1,
                     last_error = 'Weir stopped while this create was being sent'
                 WHERE state IN ({}) RETURNING {COLUMNS}",
                state_list(Transition::Recover.allowed_from())
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

    /// One-item update: `set` may use ?2.. for `args` (?1 is the id). When no row matches,
    /// the same transaction tells "no such item" from "wrong state".
    fn transition(
        &mut self,
        id: i64,
        op: Transition,
        set: &str,
        args: &[&dyn ToSql],
    ) -> Result<Item, StoreError> {
        let sql = format!(
            "UPDATE queue_items SET {set} WHERE id = ?1 AND state IN ({}) RETURNING {COLUMNS}",
            state_list(op.allowed_from())
        );
        let mut all: Vec<&dyn ToSql> = Vec::with_capacity(args.len() + 1);
        all.push(&id);
        all.extend_from_slice(args);
        self.write(|tx, path| {
            let sql_err = |e| StoreError::from_sqlite(path, e);
            let updated = tx
                .query_row(&sql, all.as_slice(), Item::from_row)
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
