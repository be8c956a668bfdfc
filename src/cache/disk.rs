//! The cache's SQLite file (`cache.sqlite` in the data dir, 0600): one row per entry holding
//! the cache key (already a keyed hash of identity and request), the store and expiry times,
//! the record's size and the sealed record. Nothing else is in plaintext. Blocking: used by the
//! writer thread and once at start (off the async workers), never on the request path.
//!
//! Bounded in bytes: after every batch the oldest rows go until the records fit the budget.
//! The file is a cache: one that is damaged or of another layout is deleted and made anew.

use super::CacheKey;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// The file's name in the data dir.
pub const FILE_NAME: &str = "cache.sqlite";

/// Layout of the table (`PRAGMA user_version`); another value means "start afresh".
const LAYOUT: i64 = 1;

/// What a row costs besides its record (key, times, SQLite's own bookkeeping).
const ROW_OVERHEAD: u64 = 96;

/// Why the disk cache cannot be used; `Display` names the file and the cause.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("cannot open the cache file {path}: {detail}")]
    Open { path: PathBuf, detail: String },
    #[error("cannot write the cache file {path}: {detail}")]
    Write { path: PathBuf, detail: String },
}

/// One row to write.
pub struct Row {
    pub key: CacheKey,
    pub stored_at_ms: i64,
    pub expires_at_ms: i64,
    pub sealed: Vec<u8>,
}

pub struct Disk {
    conn: Connection,
    path: PathBuf,
    max_bytes: u64,
    bytes: u64,
    entries: u64,
}

impl Disk {
    /// Opens (creating, 0600) `dir/cache.sqlite`, bounded to `max_bytes` of records.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Disk, DiskError> {
        let path = dir.join(FILE_NAME);
        match Disk::open_at(&path, max_bytes) {
            Ok(d) => Ok(d),
            Err(first) if path.is_file() => {
                // A cache may be thrown away: a damaged file is replaced, not kept forever.
                tracing::warn!(error = %first, "the cache file is unusable; starting a new one");
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.as_os_str().to_owned();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
                Disk::open_at(&path, max_bytes)
            }
            Err(e) => Err(e),
        }
    }

    fn open_at(path: &Path, max_bytes: u64) -> Result<Disk, DiskError> {
        let err = |e: &dyn std::fmt::Display| DiskError::Open {
            path: path.to_path_buf(),
            detail: e.to_string(),
        };
        // Created 0600 before SQLite opens it: SQLite gives the -wal and -shm files the
        // database file's permissions.
        create_private(path).map_err(|e| err(&e))?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| err(&e))?;
        conn.busy_timeout(std::time::Duration::from_secs(2))
            .map_err(|e| err(&e))?;
        // Freed pages go back to the file system, so the file shrinks with the budget.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(|e| err(&e))?;
        let _: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| err(&e))?;
        // A cache may lose its last writes on power loss; it must not slow requests down.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| err(&e))?;
        conn.pragma_update(None, "journal_size_limit", 4 << 20)
            .map_err(|e| err(&e))?;
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            if let Err(e) = crate::paths::restrict(Path::new(&p), 0o600) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %path.display(), error = %e, "cannot make the cache file private (0600)");
                }
            }
        }
        let layout: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| err(&e))?;
        if layout != LAYOUT {
            conn.execute_batch(&format!(
                "DROP TABLE IF EXISTS entries;
                 CREATE TABLE entries (
                     key BLOB NOT NULL UNIQUE,
                     stored_at INTEGER NOT NULL,
                     expires_at INTEGER NOT NULL,
                     size INTEGER NOT NULL,
                     record BLOB NOT NULL);
                 CREATE INDEX entries_stored_at ON entries(stored_at);
                 PRAGMA user_version = {LAYOUT};"
            ))
            .map_err(|e| err(&e))?;
        }
        let mut d = Disk {
            conn,
            path: path.to_path_buf(),
            max_bytes,
            bytes: 0,
            entries: 0,
        };
        d.recount().map_err(|e| err(&e))?;
        Ok(d)
    }

    fn recount(&mut self) -> rusqlite::Result<()> {
        let (n, b): (i64, i64) = self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        self.entries = n.max(0) as u64;
        self.bytes = b.max(0) as u64;
        Ok(())
    }

    fn write_err(&self, e: impl std::fmt::Display) -> DiskError {
        DiskError::Write {
            path: self.path.clone(),
            detail: e.to_string(),
        }
    }

    /// The rows still servable at `now_ms`, oldest first (loaded in that order, the newest are
    /// the most recently used and so the last evicted from memory); rows past their last
    /// deadline are deleted.
    pub fn load(&mut self, now_ms: i64) -> Result<Vec<(CacheKey, Vec<u8>)>, DiskError> {
        self.conn
            .execute(
                "DELETE FROM entries WHERE expires_at <= ?1",
                params![now_ms],
            )
            .map_err(|e| self.write_err(e))?;
        self.recount().map_err(|e| self.write_err(e))?;
        let mut stmt = self
            .conn
            .prepare("SELECT key, record FROM entries ORDER BY stored_at ASC, rowid ASC")
            .map_err(|e| self.write_err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| self.write_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (k, rec) = row.map_err(|e| self.write_err(e))?;
            // A key of the wrong length is not ours: skipped (and never matched).
            if let Ok(k) = <[u8; 32]>::try_from(k.as_slice()) {
                out.push((CacheKey::from_bytes(k), rec));
            }
        }
        Ok(out)
    }

    /// Writes `rows` in one transaction (replacing any row of the same key), then evicts the
    /// oldest rows until the records fit the budget. A record larger than the whole budget is
    /// not written.
    pub fn put(&mut self, rows: &[Row]) -> Result<(), DiskError> {
        let tx = self.conn.transaction().map_err(|e| DiskError::Write {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO entries (key, stored_at, expires_at, size, record)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(key) DO UPDATE SET stored_at = excluded.stored_at,
                       expires_at = excluded.expires_at, size = excluded.size,
                       record = excluded.record",
                )
                .map_err(|e| DiskError::Write {
                    path: self.path.clone(),
                    detail: e.to_string(),
                })?;
            for r in rows {
                let size = r.sealed.len() as u64 + ROW_OVERHEAD;
                if size > self.max_bytes {
                    continue;
                }
                stmt.execute(params![
                    r.key.as_bytes().as_slice(),
                    r.stored_at_ms,
                    r.expires_at_ms,
                    size as i64,
                    r.sealed
                ])
                .map_err(|e| DiskError::Write {
                    path: self.path.clone(),
                    detail: e.to_string(),
                })?;
            }
        }
        tx.commit().map_err(|e| self.write_err(e))?;
        self.recount().map_err(|e| self.write_err(e))?;
        self.evict()
    }

    /// Deletes the oldest rows until the records fit the budget.
    fn evict(&mut self) -> Result<(), DiskError> {
        let mut evicted = false;
        while self.bytes > self.max_bytes {
            let oldest: Option<(i64, i64)> = self
                .conn
                .query_row(
                    "SELECT rowid, size FROM entries ORDER BY stored_at ASC, rowid ASC LIMIT 1",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| self.write_err(e))?;
            let Some((rowid, size)) = oldest else { break };
            self.conn
                .execute("DELETE FROM entries WHERE rowid = ?1", params![rowid])
                .map_err(|e| self.write_err(e))?;
            self.bytes = self.bytes.saturating_sub(size.max(0) as u64);
            self.entries = self.entries.saturating_sub(1);
            evicted = true;
        }
        if evicted {
            self.shrink();
        }
        Ok(())
    }

    /// Deletes rows whose records did not open (tampered or from another key).
    pub fn delete(&mut self, keys: &[CacheKey]) -> Result<(), DiskError> {
        for k in keys {
            self.conn
                .execute(
                    "DELETE FROM entries WHERE key = ?1",
                    params![k.as_bytes().as_slice()],
                )
                .map_err(|e| self.write_err(e))?;
        }
        self.recount().map_err(|e| self.write_err(e))
    }

    /// Deletes every row and gives the space back.
    pub fn clear(&mut self) -> Result<(), DiskError> {
        self.conn
            .execute("DELETE FROM entries", [])
            .map_err(|e| self.write_err(e))?;
        self.bytes = 0;
        self.entries = 0;
        self.shrink();
        Ok(())
    }

    /// Returns freed pages to the file system and folds the WAL back (best effort: a cache
    /// that stays a little larger for a while is harmless).
    fn shrink(&self) {
        let vacuum = |c: &Connection| -> rusqlite::Result<()> {
            // Both pragmas answer rows; stepping through them is what does the work.
            for sql in [
                "PRAGMA incremental_vacuum",
                "PRAGMA wal_checkpoint(TRUNCATE)",
            ] {
                let mut stmt = c.prepare(sql)?;
                let mut rows = stmt.query([])?;
                while rows.next()?.is_some() {}
            }
            Ok(())
        };
        if let Err(e) = vacuum(&self.conn) {
            tracing::debug!(error = %e, "could not shrink the cache file");
        }
    }

    /// Bytes of records held (what the budget counts).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Test hook: caps the file at `pages` pages, so writes fail as on a full disk.
    #[cfg(test)]
    pub fn cap_pages(&self, pages: u64) {
        let _ = self.conn.pragma_update(None, "max_page_count", pages);
    }
}

/// Creates the file, readable and writable by the user only, unless it exists.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u8, stored_at_ms: i64, size: usize) -> Row {
        Row {
            key: CacheKey::from_bytes([i; 32]),
            stored_at_ms,
            expires_at_ms: i64::MAX,
            sealed: vec![i; size],
        }
    }

    #[test]
    fn the_oldest_rows_go_when_over_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Disk::open(dir.path(), 10_000).unwrap();
        for i in 0..10u8 {
            d.put(&[row(i, i as i64, 2_000)]).unwrap();
            assert!(d.bytes() <= 10_000, "{}", d.bytes());
        }
        let kept: Vec<u8> = d
            .load(0)
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_bytes()[0])
            .collect();
        // Four rows of 2,096 bytes fit 10,000; the newest four stay, oldest first.
        assert_eq!(kept, vec![6, 7, 8, 9]);
        // Reopened, the count is the same.
        drop(d);
        let d = Disk::open(dir.path(), 10_000).unwrap();
        assert_eq!(d.entries(), 4);
    }

    #[test]
    fn expired_rows_are_dropped_on_load_and_clear_empties() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Disk::open(dir.path(), 1 << 20).unwrap();
        let mut r = row(1, 0, 10);
        r.expires_at_ms = 100;
        d.put(&[r, row(2, 0, 10)]).unwrap();
        assert_eq!(d.load(200).unwrap().len(), 1);
        assert_eq!(d.entries(), 1);
        d.clear().unwrap();
        assert_eq!((d.entries(), d.bytes()), (0, 0));
        assert!(d.load(0).unwrap().is_empty());
    }

    #[test]
    fn a_damaged_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 8192]).unwrap();
        let mut d = Disk::open(dir.path(), 1 << 20).unwrap();
        d.put(&[row(1, 0, 10)]).unwrap();
        assert_eq!(d.entries(), 1);
    }

    #[test]
    fn a_full_file_fails_with_a_write_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Disk::open(dir.path(), 64 << 20).unwrap();
        d.cap_pages(8);
        let e = d.put(&[row(1, 0, 200_000)]).unwrap_err();
        assert!(matches!(e, DiskError::Write { .. }), "{e}");
        assert!(e.to_string().contains("full"), "{e}");
    }
}
