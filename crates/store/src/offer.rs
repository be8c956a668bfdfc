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

impl Change {
    /// The columns this change writes to the item's offer row, in the same transaction as the
    /// item's own update; `None` when it writes none (only a confirmation does: a requeued or
    /// withdrawn offer's row stays as the record of what was offered).
    pub fn offer_sets(&self, now_ms: i64) -> Option<Vec<(&'static str, Value)>> {
        match self {
            Change::HandOff { confirmation } => Some(vec![
                ("running", Value::Bool(true)),
                (
                    "program",
                    confirmation
                        .program
                        .clone()
                        .map_or(Value::Null, Value::Text),
                ),
                (
                    "confirmed_at",
                    Value::Text(confirmation.confirmed_at.clone()),
                ),
                ("updated_at", Value::Int(now_ms)),
            ]),
            _ => None,
        }
    }
}

/// `INSERT INTO {table} (item_id, offer, expires_at, created_at, <sets>) SELECT {source}.id,
/// '{}', {source}.next_attempt_at, <now>, <values> FROM {source} WHERE {cond} ON CONFLICT
/// (item_id) DO UPDATE SET <sets from excluded>`: writes `sets` on the item's offer row,
/// making the row if an item was parked without one (a file written before the table, where
/// the migration found nothing to move). Its binds are numbered from `first`; `created_at`
/// reuses the `updated_at` bind.
///
/// SQLite: `source` is the queue table and `cond` `id = ?1`; PostgreSQL: `source` is the CTE
/// holding the updated item and `cond` `true` (SQLite needs a WHERE before ON CONFLICT, and
/// PostgreSQL takes it too).
pub fn offer_upsert(
    dialect: Dialect,
    table: &str,
    source: &str,
    cond: &str,
    sets: Vec<(&'static str, Value)>,
    first: usize,
) -> (String, Vec<Value>) {
    let mut binds = Vec::new();
    let mut cols = Vec::new();
    let mut vals = Vec::new();
    let mut created = "NULL".to_string();
    for (col, v) in sets {
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
        if col == "updated_at" {
            created = expr.clone();
        }
        cols.push(col);
        vals.push(expr);
    }
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
        let sets = change.offer_sets(7).unwrap();
        let (lite, lite_binds) = offer_upsert(
            Dialect::Sqlite,
            "handoff_offers",
            "queue_items",
            "id = ?1",
            sets.clone(),
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
        let (pg, pg_binds) = offer_upsert(Dialect::Postgres, "t", "upd", "true", sets, 9);
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
        assert_eq!(Change::Cancel.offer_sets(1), None);
        assert_eq!(offer_columns("o").split(", ").count(), 10);
    }
}
