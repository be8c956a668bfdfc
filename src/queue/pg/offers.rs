//! Hand-off offers in PostgreSQL: `weir_handoff_offers`, one row per offered item, pointing
//! at it, with the same meaning as SQLite's `handoff_offers` (`weir_store::offer`). Each write
//! is one statement whose data-modifying CTEs change the item and its offer row together, so
//! they commit (or not) as one; the shared connection never holds an open transaction.
//! The engine makes offers on a laptop only (`handoff::HandoffError::Gateway`); the shared
//! queue stores them the same way so both backends keep one schema and one state machine.

use super::rows::{bind, NewRow, COLUMNS};
use super::PgQueue;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use weir_store::offer::{offer_columns, offer_upsert, OfferWrite, OFFER_COLUMNS};
use weir_store::{
    Dialect, Finish, HandOffRecord, Item, ListFilter, NewItem, State, StoreError, Value,
};

/// The offers table in the shared database.
pub(super) const OFFERS: &str = "weir_handoff_offers";

/// `COLUMNS` of the item, as `i.<column>`, for a join with its offer row.
fn item_columns() -> String {
    COLUMNS
        .split(", ")
        .map(|c| format!("i.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The offer row's columns named `o_<column>` (a join with the item, whose names they share).
fn prefixed_offer_columns() -> String {
    offer_columns("o")
        .split(", ")
        .map(|c| format!("{c} AS o_{}", &c[2..]))
        .collect::<Vec<_>>()
        .join(", ")
}

impl PgQueue {
    /// An `offered` item and its offer row, in one statement; `Duplicate` names the live item
    /// holding the dedupe key.
    pub(super) async fn insert_offer(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let row = NewRow::new(self, item, State::Offered, now_ms, expires_at_ms)?;
        // The offer row expires when the item would first be due, and is made with it.
        let sql = format!(
            "WITH ins AS ({}),
             off AS (
               INSERT INTO {OFFERS} (item_id, offer, expires_at, created_at, updated_at)
               SELECT id, ${}, next_attempt_at, created_at, created_at FROM ins)
             SELECT * FROM ins",
            NewRow::insert_sql(),
            NewRow::BINDS + 1
        );
        let offer = offer.to_string();
        let mut params = row.params().to_vec();
        params.push(&offer);
        match self.conn.query_opt(&sql, &params).await {
            Ok(Some(r)) => self.item(&r),
            Ok(None) => Err(self.conn.unreachable("the insert returned no row")),
            Err(StoreError::Duplicate { .. }) => self.live_holder(row.dedupe_key()).await,
            Err(e) => Err(e),
        }
    }

    /// The item's update (`sql`, rendered from the transition table, binds `$1..`) with the
    /// write of `sets` on its offer row, as one statement: the row is written only when the
    /// update moved the item. Returns the statement and the offer's binds (numbered after
    /// `binds_so_far`).
    pub(super) fn with_offer_write(
        sql: &str,
        binds_so_far: usize,
        write: OfferWrite,
    ) -> (String, Vec<Value>) {
        let (upsert, binds) = offer_upsert(
            Dialect::Postgres,
            OFFERS,
            "upd",
            "true",
            write,
            binds_so_far + 1,
        );
        (
            format!("WITH upd AS ({sql}), off AS ({upsert}) SELECT * FROM upd"),
            binds,
        )
    }

    /// The local agent's outcome on a `handed_off` item's offer row (and the item's
    /// `updated_at`), in one statement.
    pub(super) async fn record_finish(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        let write = finish.offer_write(now_ms);
        let (upsert, binds) = offer_upsert(Dialect::Postgres, OFFERS, "item", "true", write, 3);
        let sql = format!(
            "WITH item AS (
               UPDATE weir_queue_items SET updated_at = $2
               WHERE id = $1 AND state = 'handed_off' RETURNING id, next_attempt_at)
             {upsert} RETURNING {OFFER_COLUMNS}"
        );
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&id, &now_ms];
        all.extend(binds.iter().map(bind));
        match self.conn.query_opt(&sql, &all).await? {
            Some(row) => self.record(&row, ""),
            None => Err(StoreError::NotFound { id }),
        }
    }

    pub(super) async fn record_of(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        let sql = format!("SELECT {OFFER_COLUMNS} FROM {OFFERS} WHERE item_id = $1");
        self.conn
            .query_opt(&sql, &[&id])
            .await?
            .map(|r| self.record(&r, ""))
            .transpose()
    }

    pub(super) async fn offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        let wanted = super::rows::states(if filter.states.is_empty() {
            &weir_store::State::ALL
        } else {
            &filter.states
        });
        let sql = format!(
            "SELECT {}, {} FROM weir_queue_items i JOIN {OFFERS} o ON o.item_id = i.id
             WHERE i.state = ANY($1) ORDER BY i.id DESC LIMIT $2",
            item_columns(),
            prefixed_offer_columns()
        );
        let limit = i64::from(filter.limit);
        let rows = self.conn.query(&sql, &[&wanted, &limit]).await?;
        rows.iter()
            .map(|r| Ok((self.item(r)?, self.record(r, "o_")?)))
            .collect()
    }

    /// Offered items whose offer row's `expires_at` has come, oldest first.
    pub(super) async fn expired(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "SELECT {} FROM weir_queue_items i JOIN {OFFERS} o ON o.item_id = i.id
             WHERE i.state = 'offered' AND o.expires_at <= $1
             ORDER BY i.created_at, i.id",
            item_columns()
        );
        let rows = self.conn.query(&sql, &[&now_ms]).await?;
        self.items(rows)
    }

    /// A row's offer columns (named `{prefix}item_id`, …) as a record.
    pub(super) fn record(&self, row: &Row, prefix: &str) -> Result<HandOffRecord, StoreError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt {
            path: self.conn.db.clone().into(),
            detail: format!("unexpected stored hand-off {what}: {e}"),
        };
        let col = |name: &str| format!("{prefix}{name}");
        let get = |e: tokio_postgres::Error| bad("value", &e);
        let json = |name: &str| -> Result<Option<serde_json::Value>, StoreError> {
            let text: Option<String> = row.try_get(col(name).as_str()).map_err(get)?;
            // Leniently, as SQLite reads it: a text that is not JSON is kept as a string.
            Ok(text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t))))
        };
        Ok(HandOffRecord {
            item_id: row.try_get(col("item_id").as_str()).map_err(get)?,
            offer: json("offer")?.unwrap_or(serde_json::Value::Null),
            expires_at: row.try_get(col("expires_at").as_str()).map_err(get)?,
            running: row.try_get(col("running").as_str()).map_err(get)?,
            program: row.try_get(col("program").as_str()).map_err(get)?,
            confirmed_at: row.try_get(col("confirmed_at").as_str()).map_err(get)?,
            outcome: json("outcome")?,
            finished_at: row.try_get(col("finished_at").as_str()).map_err(get)?,
            created_at: row.try_get(col("created_at").as_str()).map_err(get)?,
            updated_at: row.try_get(col("updated_at").as_str()).map_err(get)?,
        })
    }
}
