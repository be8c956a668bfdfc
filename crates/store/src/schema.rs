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
    Migration {
        version: 4,
        name: "hand-off offers in their own table",
        sql: MIGRATION_4,
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

/// Hand-off offers get their own table (issue 21): one row per offered item, pointing at it,
/// with typed columns for what earlier versions kept in the item's `result` JSON (`handoff`,
/// `running`, `program`, `confirmed_at`, `outcome`, `finished_at`). Those keys are moved:
/// every item parked as `offered` / `handed_off`, and every other item whose result holds a
/// `handoff` offer (a withdrawn offer kept it), gets its row, and the keys leave its result
/// (a result left empty becomes NULL, as a fresh offer's is). The offer's expiry was the
/// item's `next_attempt_at`. A result that is not valid JSON is left as it was (the item
/// reads as before; its offer row is `{}`), so one odd row never stops the file opening.
///
/// `ON DELETE CASCADE`: purging an item drops its record (`PRAGMA foreign_keys` is turned on
/// after migrating; a table rebuild like migration 2's must run with it off, as it does).
const MIGRATION_4: &str = "
CREATE TABLE handoff_offers (
    item_id      INTEGER NOT NULL UNIQUE REFERENCES queue_items (id) ON DELETE CASCADE,
    offer        TEXT    NOT NULL,           -- JSON: the engine's offer (rule, checkout, ...)
    expires_at   INTEGER NOT NULL,           -- unix ms: an unanswered offer runs out
    running      INTEGER NOT NULL DEFAULT 0, -- the local agent was started and has not ended
    program      TEXT,
    confirmed_at TEXT,                       -- RFC 3339, as the engine wrote it
    outcome      TEXT,                       -- JSON: exit code, output tail, error
    finished_at  TEXT,                       -- RFC 3339
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
-- Expiry: the offers that ran out.
CREATE INDEX handoff_offers_expiry ON handoff_offers (expires_at);
INSERT INTO handoff_offers (item_id, offer, expires_at, running, program, confirmed_at,
        outcome, finished_at, created_at, updated_at)
    SELECT id,
        CASE WHEN json_valid(result) AND json_type(result, '$.handoff') NOT IN ('null')
             THEN result -> '$.handoff' ELSE '{}' END,
        next_attempt_at,
        CASE WHEN json_valid(result) AND json_type(result, '$.running') = 'true'
             THEN 1 ELSE 0 END,
        CASE WHEN json_valid(result) AND json_type(result, '$.program') = 'text'
             THEN result ->> '$.program' END,
        CASE WHEN json_valid(result) AND json_type(result, '$.confirmed_at') = 'text'
             THEN result ->> '$.confirmed_at' END,
        CASE WHEN json_valid(result) AND json_type(result, '$.outcome') NOT IN ('null')
             THEN result -> '$.outcome' END,
        CASE WHEN json_valid(result) AND json_type(result, '$.finished_at') = 'text'
             THEN result ->> '$.finished_at' END,
        created_at, updated_at
    FROM queue_items
    WHERE state IN ('offered', 'handed_off')
       OR (json_valid(result) AND json_type(result, '$.handoff') IS NOT NULL);
-- Only what was moved leaves the result: a key of an unexpected type stays (and reads into
-- `ItemResult::other`), so nothing is lost (a path to no key is a no-op for json_remove).
UPDATE queue_items
    SET result = NULLIF(json_remove(result, '$.handoff', '$.outcome',
        CASE WHEN json_type(result, '$.running') IN ('true', 'false') THEN '$.running' ELSE '$.__none__' END,
        CASE WHEN json_type(result, '$.program') = 'text' THEN '$.program' ELSE '$.__none__' END,
        CASE WHEN json_type(result, '$.confirmed_at') = 'text' THEN '$.confirmed_at' ELSE '$.__none__' END,
        CASE WHEN json_type(result, '$.finished_at') = 'text' THEN '$.finished_at' ELSE '$.__none__' END),
        '{}')
    WHERE id IN (SELECT item_id FROM handoff_offers) AND json_valid(result);
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

    const M5: Migration = Migration {
        version: 5,
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
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 4);
        // Running migration 1 again would fail ("table queue_items already exists").
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 0);

        let with_five = [
            MIGRATIONS[0],
            MIGRATIONS[1],
            MIGRATIONS[2],
            MIGRATIONS[3],
            M5,
        ];
        assert_eq!(migrate(&mut conn, &path, &with_five, false).unwrap(), 1);
        assert_eq!(user_version(&conn, &path).unwrap(), 5);
        conn.prepare("SELECT note FROM queue_items").unwrap();
        assert_eq!(migrate(&mut conn, &path, &with_five, false).unwrap(), 0);

        // An older build meeting the newer file refuses it instead of writing to it.
        let err = migrate(&mut conn, &path, MIGRATIONS, false).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 5,
                    supported: 4,
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
            version: 5,
            name: "broken",
            sql: "ALTER TABLE queue_items ADD COLUMN note TEXT; SELECT * FROM no_such_table;",
        };
        let list = [
            MIGRATIONS[0],
            MIGRATIONS[1],
            MIGRATIONS[2],
            MIGRATIONS[3],
            bad,
        ];
        assert!(migrate(&mut conn, &path, &list, false).is_err());
        assert_eq!(user_version(&conn, &path).unwrap(), 4);
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
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 3);
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
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 4);
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

#[cfg(test)]
mod offer_tests {
    use super::*;

    fn ids_of(conn: &Connection, sql: &str) -> Vec<i64> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Rows written the schema-3 way (the hand-off's record in `result`) are moved into
    /// `handoff_offers` and their results keep only what is not the hand-off's.
    #[test]
    fn the_hand_off_keys_of_old_results_move_to_their_own_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path, &MIGRATIONS[..3], false).unwrap();
        let rows = [
            // offered, as insert_offered wrote it
            (
                "offered",
                r#"{"handoff":{"rule":"r1","expires_at":9000}}"#,
                9_000,
            ),
            // handed off and finished
            (
                "handed_off",
                r#"{"handoff":{"rule":"r2"},"running":false,"program":"aider","confirmed_at":"2026-01-01T00:00:00Z","outcome":{"exit_code":0},"finished_at":"2026-01-01T00:01:00Z","later":1}"#,
                8_000,
            ),
            // withdrawn: cancelled, the offer kept in its result
            ("cancelled", r#"{"handoff":{"rule":"r3"}}"#, 7_000),
            // a plain done create: untouched
            ("done", r#"{"status":201,"job_id":"j"}"#, 6_000),
            // offered, but its result is not JSON: left as it was, with an empty offer row
            ("offered", "not json", 5_000),
            // handed off with keys of an unexpected type: moved only where the type fits,
            // the rest kept in the result
            (
                "handed_off",
                r#"{"handoff":{"rule":"r6"},"program":7,"running":"yes"}"#,
                4_000,
            ),
        ];
        for (i, (state, result, next)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO queue_items (upstream, method, path_and_query, headers, body,
                     identity, dedupe_key, state, created_at, next_attempt_at, updated_at,
                     result)
                 VALUES ('u', 'POST', '/p', '[]', x'7b7d', 'i', ?1, ?2, 1, ?3, 2, ?4)",
                rusqlite::params![format!("k{i}"), state, next, result],
            )
            .unwrap();
        }
        assert_eq!(migrate(&mut conn, &path, MIGRATIONS, false).unwrap(), 1);
        assert_eq!(
            ids_of(&conn, "SELECT item_id FROM handoff_offers ORDER BY item_id"),
            [1, 2, 3, 5, 6]
        );
        type Row = (
            String,
            i64,
            bool,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let offer = |id: i64| -> Row {
            conn.query_row(
                "SELECT offer, expires_at, running, program, confirmed_at, outcome, finished_at
                 FROM handoff_offers WHERE item_id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )
            .unwrap()
        };
        let result = |id: i64| -> Option<String> {
            conn.query_row("SELECT result FROM queue_items WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(
            offer(1),
            (
                r#"{"rule":"r1","expires_at":9000}"#.into(),
                9_000,
                false,
                None,
                None,
                None,
                None
            )
        );
        assert_eq!(result(1), None, "only the offer was in it");
        assert_eq!(
            offer(2),
            (
                r#"{"rule":"r2"}"#.into(),
                8_000,
                false,
                Some("aider".into()),
                Some("2026-01-01T00:00:00Z".into()),
                Some(r#"{"exit_code":0}"#.into()),
                Some("2026-01-01T00:01:00Z".into())
            )
        );
        assert_eq!(
            result(2).as_deref(),
            Some(r#"{"later":1}"#),
            "other keys stay"
        );
        assert_eq!(offer(3).0, r#"{"rule":"r3"}"#);
        assert_eq!(result(3), None);
        assert_eq!(result(4).as_deref(), Some(r#"{"status":201,"job_id":"j"}"#));
        assert_eq!(offer(5).0, "{}");
        assert_eq!(result(5).as_deref(), Some("not json"));
        assert_eq!(
            offer(6),
            (
                r#"{"rule":"r6"}"#.into(),
                4_000,
                false,
                None,
                None,
                None,
                None
            )
        );
        assert_eq!(
            result(6).as_deref(),
            Some(r#"{"program":7,"running":"yes"}"#),
            "keys that were not moved stay"
        );
        // An offer row points at an item: none can be made for an item that is not there.
        conn.pragma_update(None, "foreign_keys", true).unwrap();
        let orphan = conn.execute(
            "INSERT INTO handoff_offers (item_id, offer, expires_at, created_at, updated_at)
             VALUES (99, '{}', 1, 1, 1)",
            [],
        );
        let constraint = |r: rusqlite::Result<usize>| {
            matches!(r, Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation)
        };
        assert!(constraint(orphan), "a foreign-key refusal");
        // One row per item.
        let twice = conn.execute(
            "INSERT INTO handoff_offers (item_id, offer, expires_at, created_at, updated_at)
             VALUES (4, '{}', 1, 1, 1), (4, '{}', 1, 1, 1)",
            [],
        );
        assert!(constraint(twice), "a uniqueness refusal");
    }
}
