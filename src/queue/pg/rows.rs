//! Rows of the shared queue: the columns a query returns, a row as an [`Item`], a new item's
//! row ([`NewRow`], the one insert of the queued and the offered insert), and the binds of a
//! statement rendered from the transition table.

use super::PgQueue;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use weir_store::{Item, NewItem, State, StateCounts, StoreError, UpstreamId, Value};

pub(super) const COLUMNS: &str = "id, upstream, method, path_and_query, headers, body, identity, \
     credential_ref, dedupe_key, repo, problem_statement, state, created_at, attempts, \
     next_attempt_at, last_attempt_at, last_error, result, updated_at, needs_lookup, \
     provisional_job_id, provisional_session_id";

/// A new item's row: the `INSERT` the queued insert and the offered insert share (its column
/// list and its binds `$1..$16`). They differ only in the state, when the item is first due,
/// and what their statement does with the inserted row.
pub(super) struct NewRow {
    item: NewItem,
    upstream: String,
    method: String,
    headers: String,
    state: &'static str,
    now_ms: i64,
    next_attempt_at: i64,
    job_id: Option<String>,
    session_id: Option<String>,
}

impl NewRow {
    /// How many binds [`NewRow::insert_sql`] takes: a statement's own binds follow them.
    pub(super) const BINDS: usize = 16;

    /// `item` as a row in `state`, created (and updated) at `now_ms`, first due at
    /// `next_attempt_at`. `needs_lookup` is `item.in_doubt` in every state: an earlier send may
    /// have reached the upstream (SQLite records it the same way).
    pub(super) fn new(
        q: &PgQueue,
        item: NewItem,
        state: State,
        now_ms: i64,
        next_attempt_at: i64,
    ) -> Result<NewRow, StoreError> {
        let headers = serde_json::to_string(&item.headers).map_err(|e| StoreError::Other {
            path: q.conn.db.clone().into(),
            detail: format!("headers not serialisable: {e}"),
        })?;
        let job_id = item.provisional.as_ref().map(|p| p.job_id.clone());
        let session_id = item.provisional.as_ref().map(|p| p.session_id.clone());
        Ok(NewRow {
            upstream: item.upstream.as_str().to_owned(),
            method: item.method.as_str().to_owned(),
            item,
            headers,
            state: state.as_str(),
            now_ms,
            next_attempt_at,
            job_id,
            session_id,
        })
    }

    /// `INSERT INTO weir_queue_items (…) VALUES ($1, …, $16) RETURNING {COLUMNS}`, for a CTE.
    pub(super) fn insert_sql() -> String {
        format!(
            "INSERT INTO weir_queue_items (upstream, method, path_and_query, headers, body,
               identity, credential_ref, dedupe_key, repo, problem_statement, state,
               created_at, attempts, next_attempt_at, updated_at, needs_lookup,
               provisional_job_id, provisional_session_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 0, $13, $12, $14,
               $15, $16)
             RETURNING {COLUMNS}"
        )
    }

    /// The binds of [`NewRow::insert_sql`], in order.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); NewRow::BINDS] {
        let i = &self.item;
        [
            &self.upstream,
            &self.method,
            &i.path_and_query,
            &self.headers,
            &i.body,
            &i.identity,
            &i.credential_ref,
            &i.dedupe_key,
            &i.repo,
            &i.problem_statement,
            &self.state,
            &self.now_ms,
            &self.next_attempt_at,
            &i.in_doubt,
            &self.job_id,
            &self.session_id,
        ]
    }

    pub(super) fn dedupe_key(&self) -> &str {
        &self.item.dedupe_key
    }
}

pub(super) fn states(list: &[State]) -> Vec<&'static str> {
    list.iter().map(|s| s.as_str()).collect()
}

impl PgQueue {
    pub(super) fn item(&self, row: &Row) -> Result<Item, StoreError> {
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
            upstream: UpstreamId::new(row.try_get::<_, String>("upstream").map_err(get)?),
            method: weir_store::parse_method(&row.try_get::<_, String>("method").map_err(get)?)
                .map_err(|e| bad("method", &e))?,
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

    pub(super) fn items(&self, rows: Vec<Row>) -> Result<Vec<Item>, StoreError> {
        let mut items = rows
            .iter()
            .map(|r| self.item(r))
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by_key(|i| (i.created_at, i.id));
        Ok(items)
    }
}

/// A bind of a rendered statement. `Null` and `Sql` are written into the SQL, never bound.
pub(super) fn bind(v: &Value) -> &(dyn ToSql + Sync) {
    static NONE: Option<String> = None;
    match v {
        Value::Int(i) => i,
        Value::Text(t) => t,
        Value::Bool(b) => b,
        Value::Null | Value::Sql(_) => &NONE,
    }
}

pub(super) fn set_count(c: &mut StateCounts, s: State, n: u64) {
    match s {
        State::Queued => c.queued = n,
        State::Replaying => c.replaying = n,
        State::InDoubt => c.in_doubt = n,
        State::Done => c.done = n,
        State::Failed => c.failed = n,
        State::Cancelled => c.cancelled = n,
        State::Expired => c.expired = n,
        State::Offered => c.offered = n,
        State::HandedOff => c.handed_off = n,
    }
}
