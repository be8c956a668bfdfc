//! A queue file written by an earlier Weir (schema version 1, the first release's table, with
//! a row in its form) opens, is migrated, and reads back as typed items: the method an
//! `http::Method`, the upstream an `UpstreamId`, the headers and result as stored.

use rusqlite::Connection;
use weir_store::{State, Store, StoreError, SCHEMA_VERSION};

/// The first release's table, as it is in files in the field (a fixture: never edited).
const V1: &str = "
CREATE TABLE queue_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT, upstream TEXT NOT NULL, method TEXT NOT NULL,
    path_and_query TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL,
    identity TEXT NOT NULL, credential_ref TEXT, dedupe_key TEXT NOT NULL, repo TEXT,
    problem_statement TEXT,
    state TEXT NOT NULL CHECK (state IN
        ('queued', 'replaying', 'in_doubt', 'done', 'failed', 'cancelled', 'expired')),
    created_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL, last_attempt_at INTEGER, last_error TEXT, result TEXT,
    updated_at INTEGER NOT NULL, needs_lookup INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queue_items_due ON queue_items (upstream, state, next_attempt_at, created_at);
CREATE INDEX queue_items_state ON queue_items (state, created_at);
CREATE UNIQUE INDEX queue_items_live_dedupe ON queue_items (dedupe_key)
    WHERE state IN ('queued', 'replaying', 'in_doubt');
CREATE INDEX queue_items_dedupe ON queue_items (dedupe_key, id);
PRAGMA user_version = 1;
";

fn v1_file(dir: &tempfile::TempDir, method: &str) -> std::path::PathBuf {
    let path = dir.path().join("queue.sqlite3");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(V1).unwrap();
    conn.execute(
        "INSERT INTO queue_items (upstream, method, path_and_query, headers, body, identity,
             credential_ref, dedupe_key, repo, problem_statement, state, created_at, attempts,
             next_attempt_at, updated_at, needs_lookup, result)
         VALUES ('copilot', ?1, '/agents/swe/v1/jobs/o/r',
             '[[\"content-type\",\"application/json\"]]', x'7b7d', 'ab', 'weir-queue-k', 'k',
             'o/r', 'fix it', 'failed', 10, 2, 20, 30, 1, '{\"status\":422}')",
        [method],
    )
    .unwrap();
    path
}

#[test]
fn a_first_release_file_is_migrated_and_reads_as_typed_items() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_file(&dir, "POST");
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let it = store.get(1).unwrap().unwrap();
    assert_eq!(it.method, http::Method::POST);
    assert_eq!(it.upstream.as_str(), "copilot");
    assert_eq!(
        it.headers,
        [("content-type".to_string(), "application/json".to_string())]
    );
    assert_eq!(
        (it.state, it.attempts, it.needs_lookup),
        (State::Failed, 2, true)
    );
    assert_eq!(it.result.and_then(|r| r.status), Some(422));
    assert_eq!(it.provisional, None);
    // The old row moves through today's table: a retry of a create that may have arrived
    // goes back to in doubt.
    assert_eq!(store.retry(1, 40).unwrap().state, State::InDoubt);
}

#[test]
fn a_stored_method_that_is_not_one_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_file(&dir, "NOT A METHOD");
    let store = Store::open(&path).unwrap();
    let err = store.get(1).unwrap_err();
    assert!(err.to_string().contains("NOT A METHOD"), "{err} ({err:?})");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}
