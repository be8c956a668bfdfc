//! [`StoreError`]: what went wrong with the queue database, classified from SQLite's extended
//! result codes into the few cases a person (or the engine) handles differently.

use std::path::{Path, PathBuf};

use rusqlite::ffi;

use crate::item::State;
use crate::machine::Transition;

/// A queue database failure. `Display` says what happened; [`StoreError::fix`] what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another connection or process holds the write lock and the busy timeout ran out.
    #[error("queue database {} is locked by another process: {detail}", .path.display())]
    Locked { path: PathBuf, detail: String },
    /// The file is not a SQLite database, or its pages are damaged.
    #[error("queue database {} is corrupt: {detail}", .path.display())]
    Corrupt { path: PathBuf, detail: String },
    /// The disk, or the size cap set with `StoreOptions::max_size_bytes`, is full.
    #[error("queue database {} is full: {detail}", .path.display())]
    Full { path: PathBuf, detail: String },
    /// The file or its directory cannot be written (or opened at all).
    #[error("queue database {} cannot be opened or written: {detail}", .path.display())]
    ReadOnly { path: PathBuf, detail: String },
    /// The OS reported an I/O error.
    #[error("I/O error on queue database {}: {detail}", .path.display())]
    Io { path: PathBuf, detail: String },
    /// The file was migrated by a newer Weir; this build must not write to it.
    #[error(
        "queue database {} has schema version {found}; this Weir knows up to {supported}",
        .path.display()
    )]
    SchemaTooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// No item has this id.
    #[error("queue item {id} does not exist")]
    NotFound { id: i64 },
    /// The item's state does not allow this operation (e.g. cancelling a `done` item).
    #[error("queue item {id} is {from}; cannot {op}")]
    IllegalTransition {
        id: i64,
        from: State,
        op: Transition,
    },
    /// A live (queued, replaying or in doubt) item already has this dedupe key.
    #[error("queue item {existing_id} with the same dedupe key is still pending")]
    Duplicate { existing_id: i64 },
    /// The `AsyncStore` thread is gone (it stopped, or an operation panicked).
    #[error("the queue database thread has stopped")]
    Closed,
    /// Anything else SQLite reported.
    #[error("queue database {} error: {detail}", .path.display())]
    Other { path: PathBuf, detail: String },
    /// A shared (PostgreSQL) queue database cannot be reached: down, restarting, or the network
    /// to it is broken. `db` names it without any password.
    #[error("queue database {db} is unreachable: {detail}")]
    Unreachable { db: String, detail: String },
    /// A shared (PostgreSQL) queue database accepts no writes (a standby, or
    /// `default_transaction_read_only`).
    #[error("queue database {db} is read-only: {detail}")]
    DatabaseReadOnly { db: String, detail: String },
}

impl StoreError {
    /// A stable machine-readable code (e.g. for an RFC 9457 problem `type`).
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Locked { .. } => "store_locked",
            StoreError::Corrupt { .. } => "store_corrupt",
            StoreError::Full { .. } => "store_full",
            StoreError::ReadOnly { .. } => "store_read_only",
            StoreError::Io { .. } => "store_io",
            StoreError::SchemaTooNew { .. } => "store_schema_too_new",
            StoreError::NotFound { .. } => "queue_item_not_found",
            StoreError::IllegalTransition { .. } => "queue_item_illegal_transition",
            StoreError::Duplicate { .. } => "queue_item_duplicate",
            StoreError::Closed => "store_closed",
            StoreError::Other { .. } => "store_error",
            StoreError::Unreachable { .. } => "store_unreachable",
            StoreError::DatabaseReadOnly { .. } => "store_read_only",
        }
    }

    /// What SQLite or the OS reported, without the summary `Display` adds.
    pub fn detail(&self) -> String {
        match self {
            StoreError::Locked { detail, .. }
            | StoreError::Corrupt { detail, .. }
            | StoreError::Full { detail, .. }
            | StoreError::ReadOnly { detail, .. }
            | StoreError::Io { detail, .. }
            | StoreError::Other { detail, .. }
            | StoreError::Unreachable { detail, .. }
            | StoreError::DatabaseReadOnly { detail, .. } => detail.clone(),
            other => other.to_string(),
        }
    }

    /// What a person can do about it.
    pub fn fix(&self) -> String {
        match self {
            StoreError::Locked { path, .. } => format!(
                "Another program has {} open for writing: stop the other Weir instance (only one \
                 may run per data directory) or the tool inspecting the file, then retry.",
                path.display()
            ),
            StoreError::Corrupt { path, .. } => format!(
                "Stop Weir and move {0} (and any {0}-wal / {0}-shm next to it) aside; Weir creates \
                 an empty queue on the next start. Queued creates in the old file are lost unless \
                 `sqlite3 {0} .recover` can rescue them.",
                path.display()
            ),
            StoreError::Full { path, .. } => format!(
                "Free disk space on the volume holding {}, or raise the queue size cap; then \
                 retry. Creates already queued are intact.",
                path.display()
            ),
            StoreError::ReadOnly { path, .. } => format!(
                "Make {} and its directory writable by the user running Weir (check permissions, \
                 ownership and whether the volume is mounted read-only), or point Weir's data \
                 directory somewhere writable.",
                path.display()
            ),
            StoreError::Io { path, .. } => format!(
                "Check the disk holding {} (dmesg, SMART, network mount status), then restart \
                 Weir.",
                path.display()
            ),
            StoreError::SchemaTooNew { .. } => {
                "Run the newer Weir that wrote this queue, or give this one its own data \
                 directory."
                    .to_owned()
            }
            StoreError::NotFound { .. } => "Refresh the queue list; the item id is stale.".into(),
            StoreError::IllegalTransition { .. } => {
                "Refresh the queue list: the item has moved on (e.g. it was already sent).".into()
            }
            StoreError::Duplicate { .. } => {
                "The same create is already queued; wait for it or cancel it first.".into()
            }
            StoreError::Closed => "Restart Weir; the queue worker has stopped.".into(),
            StoreError::Other { .. } => "Retry; if it persists, restart Weir and report the \
                                         detail."
                .into(),
            StoreError::Unreachable { db, .. } => format!(
                "Check that PostgreSQL at {db} is running and reachable from this replica; Weir \
                 reconnects by itself. Creates already queued are kept in the database."
            ),
            StoreError::DatabaseReadOnly { db, .. } => format!(
                "Point the gateway at the writable primary of {db} (not a standby), or turn off \
                 default_transaction_read_only. Creates already queued are kept in the database."
            ),
        }
    }

    /// Worth retrying the same operation later without anyone intervening.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Locked { .. }
                | StoreError::Unreachable { .. }
                | StoreError::DatabaseReadOnly { .. }
        )
    }

    /// Classifies a rusqlite error on the database at `path`.
    pub(crate) fn from_sqlite(path: &Path, err: rusqlite::Error) -> StoreError {
        let path = path.to_path_buf();
        match &err {
            rusqlite::Error::SqliteFailure(e, _) => {
                let detail = format!("{err} (SQLite code {})", e.extended_code);
                classify_code(e.extended_code, path, detail)
            }
            // A column holding something we never write (bad state text, non-JSON headers):
            // the file was altered or damaged behind our back.
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Corrupt {
                path,
                detail: format!("unexpected stored value: {err}"),
            },
            _ => StoreError::Other {
                path,
                detail: err.to_string(),
            },
        }
    }

    /// An I/O error on `path`, classified as the store's own errors are (permission → read-only).
    pub fn from_io(path: &Path, err: std::io::Error) -> StoreError {
        let path = path.to_path_buf();
        let detail = err.to_string();
        // Read-only file systems and ENOSPC have ErrorKinds only since Rust 1.83 (the
        // workspace supports 1.80), so they stay `Io` with the OS message as detail.
        match err.kind() {
            std::io::ErrorKind::PermissionDenied => StoreError::ReadOnly { path, detail },
            _ => StoreError::Io { path, detail },
        }
    }
}

/// Maps an extended result code by its primary code (the low byte); the extended part only
/// refines the message SQLite already gives.
fn classify_code(extended: i32, path: PathBuf, detail: String) -> StoreError {
    match extended & 0xff {
        ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => StoreError::Locked { path, detail },
        ffi::SQLITE_CORRUPT | ffi::SQLITE_NOTADB => StoreError::Corrupt { path, detail },
        ffi::SQLITE_FULL => StoreError::Full { path, detail },
        ffi::SQLITE_READONLY | ffi::SQLITE_CANTOPEN | ffi::SQLITE_PERM => {
            StoreError::ReadOnly { path, detail }
        }
        ffi::SQLITE_IOERR if extended == ffi::SQLITE_IOERR_CORRUPTFS => {
            StoreError::Corrupt { path, detail }
        }
        ffi::SQLITE_IOERR | ffi::SQLITE_NOLFS | ffi::SQLITE_PROTOCOL => {
            StoreError::Io { path, detail }
        }
        _ => StoreError::Other { path, detail },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_codes_map_by_primary_code() {
        let kind = |code| classify_code(code, PathBuf::from("q.db"), String::new()).code();
        assert_eq!(kind(ffi::SQLITE_BUSY_SNAPSHOT), "store_locked");
        assert_eq!(kind(ffi::SQLITE_LOCKED_SHAREDCACHE), "store_locked");
        assert_eq!(kind(ffi::SQLITE_CORRUPT_INDEX), "store_corrupt");
        assert_eq!(kind(ffi::SQLITE_NOTADB), "store_corrupt");
        assert_eq!(kind(ffi::SQLITE_FULL), "store_full");
        assert_eq!(kind(ffi::SQLITE_READONLY_DBMOVED), "store_read_only");
        assert_eq!(kind(ffi::SQLITE_CANTOPEN_ISDIR), "store_read_only");
        assert_eq!(kind(ffi::SQLITE_IOERR_FSYNC), "store_io");
        assert_eq!(kind(ffi::SQLITE_IOERR_CORRUPTFS), "store_corrupt");
        assert_eq!(kind(ffi::SQLITE_CONSTRAINT_CHECK), "store_error");
    }

    #[test]
    fn every_error_has_a_fix_naming_the_path_where_there_is_one() {
        let p = PathBuf::from("/data/weir/queue.db");
        for code in [
            ffi::SQLITE_BUSY,
            ffi::SQLITE_CORRUPT,
            ffi::SQLITE_FULL,
            ffi::SQLITE_READONLY,
        ] {
            let e = classify_code(code, p.clone(), "d".into());
            assert!(e.fix().contains("/data/weir/queue.db"), "{}", e.fix());
            assert!(e.to_string().contains("/data/weir/queue.db"), "{e}");
            assert_eq!(e.detail(), "d");
        }
    }
}
