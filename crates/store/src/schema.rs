//! The database schema as an ordered list of migrations, tracked with `PRAGMA user_version`.
//!
//! To change the schema, append `Migration { version: N + 1, .. }` to [`MIGRATIONS`] (for
//! example `ALTER TABLE queue_items ADD COLUMN ...`). Never edit or reorder a migration that
//! has shipped: files in the field have already run it.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::StoreError;

/// One schema step: run `sql`, then set `user_version` to `version`, in one transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "queue table",
        sql: MIGRATION_1,
    },
    Migration {
        version: 2,
        name: "local-agent hand-off states",
        sql: MIGRATION_2,
    },
    Migration {
        version: 3,
        name: "provisional job and session ids",
        sql: MIGRATION_3,
    },
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

const MIGRATION_1: &str = "
CREATE TABLE queue_items (
    -- AUTOINCREMENT: an id is never reused, so an id in a log or event names one create forever.
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    upstream          TEXT    NOT NULL,
    method            TEXT    NOT NULL,
    path_and_query    TEXT    NOT NULL,
    headers           TEXT    NOT NULL,  -- JSON [[name, value], ...], non-secret headers only
    body              BLOB    NOT NULL,
    identity          TEXT    NOT NULL,
    credential_ref    TEXT,              -- keychain account; the secret is never stored here
    dedupe_key        TEXT    NOT NULL,
    repo              TEXT,
    problem_statement TEXT,
    state             TEXT    NOT NULL CHECK (state IN
        ('queued', 'replaying', 'in_doubt', 'done', 'failed', 'cancelled', 'expired')),
    created_at        INTEGER NOT NULL,  -- unix ms
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    last_attempt_at   INTEGER,
    last_error        TEXT,
    result            TEXT,              -- JSON
    updated_at        INTEGER NOT NULL,
    needs_lookup      INTEGER NOT NULL DEFAULT 0
);
-- The replay worker's question: the oldest due item of one upstream.
CREATE INDEX queue_items_due ON queue_items (upstream, state, next_attempt_at, created_at);
-- Expiry and listings by state.
CREATE INDEX queue_items_state ON queue_items (state, created_at);
-- The guard against doubled creates: one live item per dedupe key.
CREATE UNIQUE INDEX queue_items_live_dedupe ON queue_items (dedupe_key)
    WHERE state IN ('queued', 'replaying', 'in_doubt');
CREATE INDEX queue_items_dedupe ON queue_items (dedupe_key, id);
";

/// Adds the hand-off states (`offered`, `handed_off`, #14). SQLite cannot change a CHECK
/// constraint in place, so the table is rebuilt (rows, ids and the AUTOINCREMENT counter
/// kept) and its indexes made again; an `offered` item holds its dedupe key like a queued one.
const MIGRATION_2: &str = "
CREATE TABLE queue_items_v2 (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    upstream          TEXT    NOT NULL,
    method            TEXT    NOT NULL,
    path_and_query    TEXT    NOT NULL,
    headers           TEXT    NOT NULL,
    body              BLOB    NOT NULL,
    identity          TEXT    NOT NULL,
    credential_ref    TEXT,
    dedupe_key        TEXT    NOT NULL,
    repo              TEXT,
    problem_statement TEXT,
    state             TEXT    NOT NULL CHECK (state IN
        ('queued', 'replaying', 'in_doubt', 'done', 'failed', 'cancelled', 'expired',
         'offered', 'handed_off')),
    created_at        INTEGER NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    last_attempt_at   INTEGER,
    last_error        TEXT,
    result            TEXT,
    updated_at        INTEGER NOT NULL,
    needs_lookup      INTEGER NOT NULL DEFAULT 0
);
INSERT INTO queue_items_v2 SELECT * FROM queue_items;
-- Ids are never reused: carry the counter over even when the newest rows were purged (the
-- copy above made its own, lower, counter row: replace it).
DELETE FROM sqlite_sequence WHERE name = 'queue_items_v2';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'queue_items_v2', seq FROM sqlite_sequence WHERE name = 'queue_items';
DROP TABLE queue_items;
ALTER TABLE queue_items_v2 RENAME TO queue_items;
CREATE INDEX queue_items_due ON queue_items (upstream, state, next_attempt_at, created_at);
CREATE INDEX queue_items_state ON queue_items (state, created_at);
CREATE UNIQUE INDEX queue_items_live_dedupe ON queue_items (dedupe_key)
    WHERE state IN ('queued', 'replaying', 'in_doubt', 'offered');
CREATE INDEX queue_items_dedupe ON queue_items (dedupe_key, id);
";

/// The provisional job and session ids a queued create was answered with (issue 20): the
/// client follows them until, and after, the real ones exist. Unique: a provisional id names
/// one create.
const MIGRATION_3: &str = "
ALTER TABLE queue_items ADD COLUMN provisional_job_id TEXT;
ALTER TABLE queue_items ADD COLUMN provisional_session_id TEXT;
CREATE UNIQUE INDEX queue_items_provisional_job ON queue_items (provisional_job_id)
    WHERE provisional_job_id IS NOT NULL;
CREATE UNIQUE INDEX queue_items_provisional_session ON queue_items (provisional_session_id)
    WHERE provisional_session_id IS NOT NULL;
";

pub(crate) fn user_version(conn: &Connection, path: &Path) -> Result<u32, StoreError> {
    conn.pragma_query_value(None, "user_version", |row| row.get::<_, u32>(0))
        .map_err(|e| StoreError::from_sqlite(path, e))
}

/// Brings the file up to the last of `migrations`; returns how many ran. Each runs in its own
/// IMMEDIATE transaction that re-reads the version first, so two processes opening the same
/// new file at once cannot both run a step.
pub(crate) fn migrate(
    conn: &mut Connection,
    path: &Path,
    migrations: &[Migration],
    read_only: bool,
) -> Result<usize, StoreError> {
    let sql_err = |e| StoreError::from_sqlite(path, e);
    let target = migrations.last().map_or(0, |m| m.version);
    let current = user_version(conn, path)?;
    if current > target {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found: current,
            supported: target,
        });
    }
    if current < target && read_only {
        return Err(StoreError::ReadOnly {
            path: path.to_path_buf(),
            detail: format!(
                "schema version {current} needs upgrading to {target}, but the file was opened \
                 read-only"
            ),
        });
    }
    let mut ran = 0;
    for m in migrations.iter().filter(|m| m.version > current) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        if user_version(&tx, path)? >= m.version {
            continue; // another process got here first
        }
        tx.execute_batch(m.sql).map_err(sql_err)?;
        // user_version lives in the file header, so it commits (or not) with the step.
        tx.pragma_update(None, "user_version", m.version)
            .map_err(sql_err)?;
        tx.commit().map_err(sql_err)?;
        tracing::info!(version = m.version, name = m.name, db = %path.display(), "queue schema migrated");
        ran += 1;
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M4: Migration = Migration {
        version: 4,
        name: "test column",
        sql: "ALTER TABLE queue_items ADD COLUMN note TEXT;",
    };

    fn open(dir: &tempfile::TempDir) -> (Connection, std::path::PathBuf) {
        let path = dir.path().join("q.db");
        (Connection::open(&path).unwrap(), path)
    }

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.name);
        }
    }

    #[test]
    fn each_migration_runs_once_and_a_second_one_is_picked_up() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, path) = open(&dir);
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 3);
        // Running migration 1 again would fail ("table queue_items already exists").
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 0);

        let with_four = [MIGRATIONS[0], MIGRATIONS[1], MIGRATIONS[2], M4];
        assert_eq!(migrate(&mut conn, &path, &with_four, false).unwrap(), 1);
        assert_eq!(user_version(&conn, &path).unwrap(), 4);
        conn.prepare("SELECT note FROM queue_items").unwrap();
        assert_eq!(migrate(&mut conn, &path, &with_four, false).unwrap(), 0);

        // An older build meeting the newer file refuses it instead of writing to it.
        let err = migrate(&mut conn, &path, MIGRATIONS, false).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 4,
                    supported: 3,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_failing_migration_leaves_the_version_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, path) = open(&dir);
        let bad = Migration {
            version: 4,
            name: "broken",
            sql: "ALTER TABLE queue_items ADD COLUMN note TEXT; SELECT * FROM no_such_table;",
        };
        let list = [MIGRATIONS[0], MIGRATIONS[1], MIGRATIONS[2], bad];
        assert!(migrate(&mut conn, &path, &list, false).is_err());
        assert_eq!(user_version(&conn, &path).unwrap(), 3);
        // The half-applied step was rolled back: the column is not there.
        assert!(conn.prepare("SELECT note FROM queue_items").is_err());
    }

    #[test]
    fn the_hand_off_rebuild_keeps_rows_ids_and_the_id_counter() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, path) = open(&dir);
        migrate(&mut conn, &path, &MIGRATIONS[..1], false).unwrap();
        for id in [1, 2, 3] {
            conn.execute(
                "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                     identity, dedupe_key, state, created_at, next_attempt_at, updated_at)
                 VALUES ('u', 'POST', '/p', '[]', x'7b7d', 'i', ?1, 'queued', 1, 1, 1)",
                [format!("k{id}")],
            )
            .unwrap();
        }
        // The newest row was purged: its id must still never come back.
        conn.execute("DELETE FROM queue_items WHERE id = 3", [])
            .unwrap();
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 2);
        let ids: Vec<i64> = conn
            .prepare("SELECT id FROM queue_items ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(ids, [1, 2]);
        conn.execute(
            "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                 identity, dedupe_key, state, created_at, next_attempt_at, updated_at)
             VALUES ('u', 'POST', '/p', '[]', x'7b7d', 'i', 'k4', 'offered', 1, 1, 1)",
            [],
        )
        .unwrap();
        let newest: i64 = conn
            .query_row("SELECT MAX(id) FROM queue_items", [], |r| r.get(0))
            .unwrap();
        assert_eq!(newest, 4);
        // An offered item holds its dedupe key.
        let dup = conn.execute(
            "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                 identity, dedupe_key, state, created_at, next_attempt_at, updated_at)
             VALUES ('u', 'POST', '/p', '[]', x'7b7d', 'i', 'k4', 'queued', 1, 1, 1)",
            [],
        );
        assert!(dup.is_err());
    }
}

#[cfg(test)]
mod provisional_tests {
    use super::*;

    #[test]
    fn provisional_ids_are_added_from_empty_and_are_unique() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 3);
        let insert = |key: &str, job: &str| {
            conn.execute(
                "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                     identity, dedupe_key, state, created_at, next_attempt_at, updated_at,
                     provisional_job_id, provisional_session_id)
                 VALUES ('u', 'POST', '/p', '[]', x'7b7d', 'i', ?1, 'done', 1, 1, 1, ?2, ?1)",
                [key, job],
            )
        };
        insert("k1", "j1").unwrap();
        // Another create may never reuse a provisional id, whatever its state.
        assert!(insert("k2", "j1").is_err());
        insert("k2", "j2").unwrap();
    }
}
