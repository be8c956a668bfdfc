//! Hand-off offers (#14) in their own table, `handoff_offers` (PostgreSQL:
//! `weir_handoff_offers`): one row per create offered to the developer's local agent, pointing
//! at its queue item (`item_id`). The item keeps the life-cycle (`offered` and `handed_off`
//! are the states it is parked in, see [`crate::machine`]); the row keeps the hand-off's
//! record: the offer, the confirmation and the local agent's outcome ([`HandOffRecord`]).
//!
//! Each write to a row is made in the transaction of the item's own write (the insert, the
//! confirmation's transition, the outcome), so an item and its record never disagree. The
//! SQL for both backends is rendered here from the same column list; SQLite runs the two
//! statements in one transaction, PostgreSQL one statement with data-modifying CTEs.

use serde::Serialize;

use crate::machine::{Change, Dialect, Value};

/// An offered item's hand-off record, as stored in its `handoff_offers` row. Times in
/// `created_at` / `updated_at` / `expires_at` are the caller's unix ms; `confirmed_at` and
/// `finished_at` are the RFC 3339 texts the engine wrote (they were kept as text before this
/// table existed, and are shown as they are).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandOffRecord {
    /// The queue item the offer points at.
    pub item_id: i64,
    /// The offer itself (rule, checkout, base branch, requesting tool, …): the engine's type
    /// (`weir::handoff`), opaque here; `{}` for an item parked before it was recorded.
    pub offer: serde_json::Value,
    /// When an unanswered offer runs out (unix ms).
    pub expires_at: i64,
    /// The local agent was started and has not ended yet.
    pub running: bool,
    /// The local agent's program (the command's first word), once confirmed.
    pub program: Option<String>,
    pub confirmed_at: Option<String>,
    /// What the local agent's run ended with (exit code, output tail, error): the engine's
    /// JSON, opaque here.
    pub outcome: Option<serde_json::Value>,
    pub finished_at: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What a confirmation records (with [`Change::HandOff`]): the command is about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    pub program: Option<String>,
    /// RFC 3339.
    pub confirmed_at: String,
}

/// What the end of the local agent's run records
/// ([`crate::Store::record_hand_off_result`]): `running` becomes false.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub outcome: Option<serde_json::Value>,
    /// RFC 3339; `None` when the end was not seen (Weir stopped while it ran).
    pub finished_at: Option<String>,
}

/// The columns [`HandOffRecord`] is read from, to paste after SELECT or RETURNING (prefixed
/// with `o.` where a join needs it: see [`offer_columns`]).
pub const OFFER_COLUMNS: &str = "item_id, offer, expires_at, running, program, confirmed_at, \
     outcome, finished_at, created_at, updated_at";

/// [`OFFER_COLUMNS`], each prefixed with `alias.`.
pub fn offer_columns(alias: &str) -> String {
    OFFER_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The stored text of an opaque JSON value (`Value` serialises without fail).
pub(crate) fn json_text(v: &serde_json::Value) -> String {
    v.to_string()
}

/// A column of an offer row that a write sets. `updated_at` is not one: every write sets it
/// ([`OfferWrite::updated_at_ms`]), and a write that makes the row takes `created_at` from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferColumn {
    Running,
    Program,
    ConfirmedAt,
    Outcome,
    FinishedAt,
}

impl OfferColumn {
    pub fn as_str(self) -> &'static str {
        match self {
            OfferColumn::Running => "running",
            OfferColumn::Program => "program",
            OfferColumn::ConfirmedAt => "confirmed_at",
            OfferColumn::Outcome => "outcome",
            OfferColumn::FinishedAt => "finished_at",
        }
    }
}

/// What one write puts on an item's offer row ([`offer_upsert`]): `sets`, and always the
/// row's `updated_at` (and its `created_at` when the write makes the row), so a write can
/// never leave either unset.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferWrite {
    pub sets: Vec<(OfferColumn, Value)>,
    /// Unix ms.
    pub updated_at_ms: i64,
}

impl Change {
    /// What this change writes to the item's offer row, in the same transaction as the
    /// item's own update; `None` when it writes none (only a confirmation does: a requeued or
    /// withdrawn offer's row stays as the record of what was offered).
    pub fn offer_write(&self, now_ms: i64) -> Option<OfferWrite> {
        match self {
            Change::HandOff { confirmation } => Some(OfferWrite {
                sets: vec![
                    (OfferColumn::Running, Value::Bool(true)),
                    (
                        OfferColumn::Program,
                        confirmation
                            .program
                            .clone()
                            .map_or(Value::Null, Value::Text),
                    ),
                    (
                        OfferColumn::ConfirmedAt,
                        Value::Text(confirmation.confirmed_at.clone()),
                    ),
                ],
                updated_at_ms: now_ms,
            }),
            _ => None,
        }
    }
}

impl Finish {
    /// What the end of the run writes to the offer row: not running, the outcome (its JSON
    /// text) and when it ended.
    pub fn offer_write(&self, now_ms: i64) -> OfferWrite {
        OfferWrite {
            sets: vec![
                (OfferColumn::Running, Value::Bool(false)),
                (
                    OfferColumn::Outcome,
                    self.outcome
                        .as_ref()
                        .map_or(Value::Null, |o| Value::Text(json_text(o))),
                ),
                (
                    OfferColumn::FinishedAt,
                    self.finished_at.clone().map_or(Value::Null, Value::Text),
                ),
            ],
            updated_at_ms: now_ms,
        }
    }
}

/// `INSERT INTO {table} (item_id, offer, expires_at, created_at, <sets>, updated_at) SELECT
/// {source}.id, '{}', {source}.next_attempt_at, <updated_at>, <values>, <updated_at> FROM
/// {source} WHERE {cond} ON CONFLICT (item_id) DO UPDATE SET <sets from excluded>`: writes
/// `write` on the item's offer row, making the row if an item was parked without one (a file
/// written before the table, where the migration found nothing to move). Its binds are
/// numbered from `first`, `updated_at` last; `created_at` reuses the `updated_at` bind.
///
/// SQLite: `source` is the queue table and `cond` `id = ?1`; PostgreSQL: `source` is the CTE
/// holding the updated item and `cond` `true` (SQLite needs a WHERE before ON CONFLICT, and
/// PostgreSQL takes it too).
pub fn offer_upsert(
    dialect: Dialect,
    table: &str,
    source: &str,
    cond: &str,
    write: OfferWrite,
    first: usize,
) -> (String, Vec<Value>) {
    let mut binds = Vec::new();
    let mut cols = Vec::new();
    let mut vals = Vec::new();
    let sets = write.sets.into_iter().map(|(c, v)| (c.as_str(), v));
    for (col, v) in sets.chain([("updated_at", Value::Int(write.updated_at_ms))]) {
        let expr = match v {
            Value::Sql(e) => e,
            Value::Null => "NULL".into(),
            v => {
                // PostgreSQL types a bind in a SELECT list from nothing: say it.
                let cast = match (dialect, &v) {
                    (Dialect::Sqlite, _) => "",
                    (Dialect::Postgres, Value::Int(_)) => "::bigint",
                    (Dialect::Postgres, Value::Bool(_)) => "::boolean",
                    (Dialect::Postgres, _) => "::text",
                };
                binds.push(v);
                format!("{}{cast}", dialect.param(first + binds.len() - 1))
            }
        };
        cols.push(col);
        vals.push(expr);
    }
    // The last value is `updated_at`'s bind.
    let created = vals.last().cloned().unwrap_or_default();
    let updates: Vec<String> = cols.iter().map(|c| format!("{c} = excluded.{c}")).collect();
    let sql = format!(
        "INSERT INTO {table} (item_id, offer, expires_at, created_at, {}) \
         SELECT {source}.id, '{{}}', {source}.next_attempt_at, {created}, {} FROM {source} \
         WHERE {cond} ON CONFLICT (item_id) DO UPDATE SET {}",
        cols.join(", "),
        vals.join(", "),
        updates.join(", "),
    );
    (sql, binds)
}

impl HandOffRecord {
    pub(crate) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<HandOffRecord> {
        HandOffRecord::read(row, "")
    }

    /// A row whose offer columns are named `o_item_id`, `o_offer`, … (a join with the item).
    pub(crate) fn from_prefixed_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<HandOffRecord> {
        HandOffRecord::read(row, "o_")
    }

    fn read(row: &rusqlite::Row<'_>, prefix: &str) -> rusqlite::Result<HandOffRecord> {
        let col = |name: &str| format!("{prefix}{name}");
        let json = |name: &str| -> rusqlite::Result<Option<serde_json::Value>> {
            let name = col(name);
            let name = name.as_str();
            let Some(text) = row.get::<_, Option<String>>(name)? else {
                return Ok(None);
            };
            // Leniently, like `ItemResult`: a text that is not JSON (a hand-edited row) is
            // kept as a JSON string, so one odd row never makes every offer unreadable.
            Ok(Some(
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
            ))
        };
        Ok(HandOffRecord {
            item_id: row.get(col("item_id").as_str())?,
            offer: json("offer")?.unwrap_or(serde_json::Value::Null),
            expires_at: row.get(col("expires_at").as_str())?,
            running: row.get(col("running").as_str())?,
            program: row.get(col("program").as_str())?,
            confirmed_at: row.get(col("confirmed_at").as_str())?,
            outcome: json("outcome")?,
            finished_at: row.get(col("finished_at").as_str())?,
            created_at: row.get(col("created_at").as_str())?,
            updated_at: row.get(col("updated_at").as_str())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirmation_upsert_differs_between_backends_only_in_its_source_and_parameters() {
        let change = Change::HandOff {
            confirmation: Confirmation {
                program: Some("aider".into()),
                confirmed_at: "t".into(),
            },
        };
        let write = change.offer_write(7).unwrap();
        let (lite, lite_binds) = offer_upsert(
            Dialect::Sqlite,
            "handoff_offers",
            "queue_items",
            "id = ?1",
            write.clone(),
            2,
        );
        assert_eq!(
            lite,
            "INSERT INTO handoff_offers (item_id, offer, expires_at, created_at, running, \
             program, confirmed_at, updated_at) SELECT queue_items.id, '{}', \
             queue_items.next_attempt_at, ?5, ?2, ?3, ?4, ?5 FROM queue_items WHERE id = ?1 \
             ON CONFLICT (item_id) DO UPDATE SET running = excluded.running, program = \
             excluded.program, confirmed_at = excluded.confirmed_at, updated_at = \
             excluded.updated_at"
        );
        let (pg, pg_binds) = offer_upsert(Dialect::Postgres, "t", "upd", "true", write, 9);
        assert!(
            pg.contains(
                "SELECT upd.id, '{}', upd.next_attempt_at, $12::bigint, $9::boolean, \
                 $10::text, $11::text, $12::bigint FROM upd WHERE true ON CONFLICT"
            ),
            "{pg}"
        );
        assert_eq!(lite_binds, pg_binds);
        assert_eq!(
            lite_binds,
            [
                Value::Bool(true),
                Value::Text("aider".into()),
                Value::Text("t".into()),
                Value::Int(7)
            ]
        );
        // Nothing else writes the offer row.
        assert_eq!(Change::Cancel.offer_write(1), None);
        assert_eq!(offer_columns("o").split(", ").count(), 10);
    }

    /// Every write sets `updated_at`, and one that makes the row sets `created_at` from the
    /// same bind: a write with nothing else to set still does (it once wrote `created_at =
    /// NULL` when a caller's sets lacked `updated_at`).
    #[test]
    fn every_offer_write_dates_the_row() {
        let finish = Finish {
            outcome: Some(serde_json::json!({"exit_code": 0})),
            finished_at: None,
        };
        let (sql, binds) = offer_upsert(
            Dialect::Sqlite,
            "handoff_offers",
            "queue_items",
            "id = ?1",
            finish.offer_write(9),
            2,
        );
        assert_eq!(
            sql,
            "INSERT INTO handoff_offers (item_id, offer, expires_at, created_at, running, \
             outcome, finished_at, updated_at) SELECT queue_items.id, '{}', \
             queue_items.next_attempt_at, ?4, ?2, ?3, NULL, ?4 FROM queue_items WHERE id = ?1 \
             ON CONFLICT (item_id) DO UPDATE SET running = excluded.running, outcome = \
             excluded.outcome, finished_at = excluded.finished_at, updated_at = \
             excluded.updated_at"
        );
        assert_eq!(
            binds,
            [
                Value::Bool(false),
                Value::Text(r#"{"exit_code":0}"#.into()),
                Value::Int(9)
            ]
        );
        let bare = OfferWrite {
            sets: vec![],
            updated_at_ms: 3,
        };
        let (sql, binds) = offer_upsert(Dialect::Postgres, "t", "upd", "true", bare, 1);
        assert!(
            sql.contains(
                "(item_id, offer, expires_at, created_at, updated_at) SELECT upd.id, \
                 '{}', upd.next_attempt_at, $1::bigint, $1::bigint FROM upd"
            ),
            "{sql}"
        );
        assert_eq!(binds, [Value::Int(3)]);
    }
}
