//! [`Store`]: opening the queue database (WAL, `synchronous=FULL`, busy timeout, migrations,
//! integrity check) and the read-only queries. State changes are in `transition.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::item::{Item, ListFilter, State, StateCounts, Usage, COLUMNS};
use crate::machine::state_list;
use crate::offer::{offer_columns, HandOffRecord, OFFER_COLUMNS};
use crate::schema::{self, MIGRATIONS};
use crate::transition::LIVE_STATES;
use crate::StoreError;

/// How to open the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long a write waits for another connection's lock before failing with
    /// [`StoreError::Locked`].
    pub busy_timeout: Duration,
    /// Open with `SQLITE_OPEN_READ_ONLY`: every write fails with [`StoreError::ReadOnly`]. For
    /// inspecting a queue (e.g. `weir queue list` while Weir runs) without any chance of
    /// changing it.
    pub read_only: bool,
    /// Cap on the file size; past it inserts fail with [`StoreError::Full`] and the engine can
    /// refuse new creates instead of filling the disk. `None`: limited only by the disk.
    pub max_size_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            max_size_bytes: None,
        }
    }
}

/// What expiry and purge can act on next, from the queue's oldest rows (unix ms): the
/// earliest `created_at` of the items that can expire (`queued`, `in_doubt`) and the
/// earliest `updated_at` of the ended ones (purged after a while). `None`: no such row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Oldest {
    pub waiting_created_at: Option<i64>,
    pub ended_updated_at: Option<i64>,
}

impl Oldest {
    /// The first instant at which `expire_older_than(max_age_ms, now)` or
    /// `purge_ended_before(now - keep_ended_ms)` can find something (both compare strictly,
    /// hence the `+ 1`); `None` when nothing can ever expire or be purged as things stand.
    pub fn next_due(&self, max_age_ms: i64, keep_ended_ms: i64) -> Option<i64> {
        let expire = self
            .waiting_created_at
            .map(|t| t.saturating_add(max_age_ms).saturating_add(1));
        let purge = self
            .ended_updated_at
            .map(|t| t.saturating_add(keep_ended_ms).saturating_add(1));
        match (expire, purge) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The durable create queue: one SQLite connection. Blocking; from async code use
/// [`crate::AsyncStore`].
#[derive(Debug)]
pub struct Store {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the queue at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path, &StoreOptions::default())
    }

    /// Opens the queue at `path`. Creates the parent directory unless read-only. Fails with a
    /// typed error (never panics) when the file is not a database, is damaged, is locked, or
    /// cannot be written.
    pub fn open_with(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let sql_err = |e| StoreError::from_sqlite(&path, e);
        let flags = if options.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| StoreError::from_io(&path, e))?;
            }
            // Created 0600 before SQLite opens it: SQLite gives the -wal and -shm files the
            // database file's permissions.
            if !path.exists() {
                create_private(&path).map_err(|e| StoreError::from_io(&path, e))?;
            }
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(sql_err)?;
        conn.busy_timeout(options.busy_timeout).map_err(sql_err)?;

        if !options.read_only {
            // WAL: readers (the dashboard) never block the writer. The first statement that
            // reads the header is also where a non-database file is detected (SQLITE_NOTADB).
            let mode: String = conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
                .map_err(sql_err)?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(db = %path.display(), mode, "queue database not in WAL mode");
            }
        }
        // FULL: every commit is fsynced before it returns, so a create we answered for is
        // on disk even if the machine loses power right after.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql_err)?;
        if !options.read_only {
            // Files left readable by an older version are tightened too; a file whose mode
            // cannot be changed (read-only mount, another owner) is used as it is.
            if let Err(e) = restrict_files(&path) {
                tracing::warn!(db = %path.display(), error = %e, "cannot make the queue files private (0600)");
            }
        }
        check_integrity(&conn, &path)?;
        schema::migrate(&mut conn, &path, MIGRATIONS, options.read_only)?;
        // After migrating (a table rebuild must run without it): an offer row is dropped with
        // its item (`ON DELETE CASCADE`) and can never point at none.
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(sql_err)?;
        if let Some(max) = options.max_size_bytes {
            let page_size: u64 = conn
                .pragma_query_value(None, "page_size", |r| r.get(0))
                .map_err(sql_err)?;
            let pages = max.div_ceil(page_size.max(1));
            conn.pragma_update(None, "max_page_count", pages)
                .map_err(sql_err)?;
        }
        Ok(Store { conn, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's `PRAGMA user_version` (equal to [`crate::SCHEMA_VERSION`] once open).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        schema::user_version(&self.conn, &self.path)
    }

    /// The item with this id, if any.
    pub fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM queue_items WHERE id = ?1"),
                [id],
                Item::from_row,
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// Items in the filter's states, newest first, at most `filter.limit`.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Item>, StoreError> {
        let where_clause = if filter.states.is_empty() {
            String::new()
        } else {
            format!("WHERE state IN ({})", state_list(&filter.states))
        };
        let sql =
            format!("SELECT {COLUMNS} FROM queue_items {where_clause} ORDER BY id DESC LIMIT ?1");
        self.query_items(&sql, params![filter.limit])
    }

    /// How many items are in each state.
    pub fn counts(&self) -> Result<StateCounts, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM queue_items GROUP BY state")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, State>(0)?, r.get::<_, u64>(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let mut counts = StateCounts::default();
        for row in rows {
            let (state, n) = row.map_err(|e| self.sql_err(e))?;
            *counts.slot_mut(state) = n;
        }
        Ok(counts)
    }

    /// What the live items take (`queued`, `replaying`, `in_doubt`, `offered`), in total and
    /// for `identity`.
    pub fn live_usage(&self, identity: &str) -> Result<Usage, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*),
                        COALESCE(SUM(LENGTH(body) + LENGTH(CAST(headers AS BLOB))), 0),
                        COALESCE(SUM(identity = ?1), 0),
                        COALESCE(SUM(CASE WHEN identity = ?1
                            THEN LENGTH(body) + LENGTH(CAST(headers AS BLOB)) ELSE 0 END), 0)
                 FROM queue_items
                 WHERE state IN ('queued', 'replaying', 'in_doubt', 'offered')",
                params![identity],
                |r| {
                    Ok(Usage {
                        items: r.get::<_, i64>(0)?.max(0) as u64,
                        bytes: r.get::<_, i64>(1)?.max(0) as u64,
                        identity_items: r.get::<_, i64>(2)?.max(0) as u64,
                        identity_bytes: r.get::<_, i64>(3)?.max(0) as u64,
                    })
                },
            )
            .map_err(|e| self.sql_err(e))
    }

    /// The oldest `queued` or `in_doubt` item of `upstream` whose `next_attempt_at` has come.
    /// An `in_doubt` one must be looked up upstream before it is sent again.
    pub fn next_due(&self, upstream: &str, now_ms: i64) -> Result<Option<Item>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM queue_items
                     WHERE upstream = ?1 AND state IN ('queued', 'in_doubt')
                       AND next_attempt_at <= ?2
                     ORDER BY created_at, id LIMIT 1"
                ),
                params![upstream, now_ms],
                Item::from_row,
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// When the next `queued` or `in_doubt` item of `upstream` becomes due (its earliest
    /// `next_attempt_at`), if it has any: an idle replay worker sleeps until then.
    pub fn next_attempt_at(&self, upstream: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT MIN(next_attempt_at) FROM queue_items
                 WHERE upstream = ?1 AND state IN ('queued', 'in_doubt')",
                [upstream],
                |r| r.get(0),
            )
            .map_err(|e| self.sql_err(e))
    }

    /// What the next expiry and purge can act on: the oldest waiting item's `created_at`
    /// and the oldest ended item's `updated_at` (see [`Oldest`]).
    pub fn oldest(&self) -> Result<Oldest, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT (SELECT MIN(created_at) FROM queue_items
                              WHERE state IN ('queued', 'in_doubt')),
                            (SELECT MIN(updated_at) FROM queue_items
                              WHERE state NOT IN ({LIVE_STATES}))"
                ),
                [],
                |r| {
                    Ok(Oldest {
                        waiting_created_at: r.get(0)?,
                        ended_updated_at: r.get(1)?,
                    })
                },
            )
            .map_err(|e| self.sql_err(e))
    }

    /// The item holding `dedupe_key`: the live one if there is one, else the newest.
    pub fn find_by_dedupe_key(&self, dedupe_key: &str) -> Result<Option<Item>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM queue_items WHERE dedupe_key = ?1
                     ORDER BY state IN ('queued', 'replaying', 'in_doubt', 'offered') DESC, id DESC
                     LIMIT 1"
                ),
                [dedupe_key],
                Item::from_row,
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// The item that was answered with this provisional job or session id, in any state.
    pub fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM queue_items
                     WHERE provisional_job_id = ?1 OR provisional_session_id = ?1 LIMIT 1"
                ),
                [id],
                Item::from_row,
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// The hand-off record of item `id` (its `handoff_offers` row), if it was ever offered.
    pub fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {OFFER_COLUMNS} FROM handoff_offers WHERE item_id = ?1"),
                [id],
                HandOffRecord::from_row,
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// Items in the filter's states that have an offer row, with it, newest first, at most
    /// `filter.limit`.
    pub fn list_offers(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        let item_cols = COLUMNS
            .split(", ")
            .map(|c| format!("i.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let where_clause = if filter.states.is_empty() {
            String::new()
        } else {
            format!("WHERE i.state IN ({})", state_list(&filter.states))
        };
        // The offer's columns come first, renamed, so the item's own names read as `Item`s.
        let offer_cols = offer_columns("o")
            .split(", ")
            .map(|c| format!("{c} AS o_{}", &c[2..]))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {item_cols}, {offer_cols} FROM queue_items i
             JOIN handoff_offers o ON o.item_id = i.id {where_clause}
             ORDER BY i.id DESC LIMIT ?1"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map(params![filter.limit], |r| {
                Ok((Item::from_row(r)?, HandOffRecord::from_prefixed_row(r)?))
            })
            .map_err(|e| self.sql_err(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql_err(e))
    }

    pub(crate) fn query_items(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Item>, StoreError> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map(params, Item::from_row)
            .map_err(|e| self.sql_err(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql_err(e))
    }

    /// Runs `f` in an IMMEDIATE transaction (the write lock is taken up front, so a busy
    /// database fails here after the busy timeout rather than half-way) and commits; any
    /// error rolls back.
    pub(crate) fn write<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &Path) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StoreError::from_sqlite(&path, e))?;
        let out = f(&tx, &path)?;
        tx.commit().map_err(|e| StoreError::from_sqlite(&path, e))?;
        Ok(out)
    }

    pub(crate) fn sql_err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::from_sqlite(&self.path, e)
    }
}

/// Creates the database file, readable and writable by the user only, unless it exists.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    match o.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// The database, its WAL and its shared-memory file: 0600 (Unix).
fn restrict_files(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    for suffix in ["", "-wal", "-shm"] {
        use std::os::unix::fs::PermissionsExt;
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// `quick_check` reads every page (cheap for a queue-sized file) so damage is reported at
/// start-up, with a fix, instead of in the middle of a replay.
fn check_integrity(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let verdict: String = conn
        .pragma_query_value(None, "quick_check", |r| r.get(0))
        .map_err(|e| StoreError::from_sqlite(path, e))?;
    if verdict == "ok" {
        Ok(())
    } else {
        Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("integrity check: {verdict}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_settings_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            busy_timeout: Duration::from_millis(1234),
            ..StoreOptions::default()
        };
        let store = Store::open_with(dir.path().join("q.db"), &options).unwrap();
        let get = |name: &str| -> i64 {
            store
                .conn
                .pragma_query_value(None, name, |r| r.get(0))
                .unwrap()
        };
        assert_eq!(get("synchronous"), 2, "FULL");
        assert_eq!(get("busy_timeout"), 1234);
        let mode: String = store
            .conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
}
