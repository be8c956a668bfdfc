//! The credential → account table on disk: `<data dir>/accounts.sqlite3` (0600), so a restart
//! (or an in-doubt lookup after one) still knows whose a credential hash was. Only the keyed
//! credential hash ([`crate::identity::Identity`]) is stored, never the credential.
//!
//! rusqlite is blocking: every call here runs under `spawn_blocking` (see `super::Accounts`);
//! the connection sits behind a std `Mutex`, held only for one statement.
//!
//! The file is made by the first mapping saved, not at start: a Weir that never resolves an
//! account (sharing off, no credential seen yet) leaves no database behind. Until then reads
//! answer as an empty table would.

use super::record::{AccountRecord, TokenKind};
use crate::identity::Identity;
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Mappings not refreshed for this long are dropped when the file is opened.
const KEEP_MS: i64 = 30 * 24 * 3600 * 1000;

#[derive(Debug, thiserror::Error)]
pub enum AccountStoreError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Sql {
        path: PathBuf,
        source: rusqlite::Error,
    },
}

pub(crate) struct AccountStore {
    /// `None` until the file exists (see the module doc).
    conn: Mutex<Option<Connection>>,
    path: PathBuf,
}

impl AccountStore {
    /// Opens the table if its file exists; otherwise the first [`AccountStore::put`] makes it.
    pub fn open(dir: &Path) -> Result<AccountStore, AccountStoreError> {
        let path = dir.join("accounts.sqlite3");
        let conn = match path.exists() {
            true => Some(Self::connect(&path)?),
            false => None,
        };
        Ok(AccountStore {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// Opens (creating, 0600) the file and its table, dropping mappings older than [`KEEP_MS`].
    fn connect(path: &Path) -> Result<Connection, AccountStoreError> {
        let path = path.to_path_buf();
        create_private(&path).map_err(|source| AccountStoreError::Open {
            path: path.clone(),
            source,
        })?;
        let sql = |source| AccountStoreError::Sql {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(sql)?;
        // No WAL: one small writer, and no -wal/-shm files with their own modes.
        conn.execute_batch(
            "PRAGMA journal_mode = DELETE;
             CREATE TABLE IF NOT EXISTS credential_account (
                 credential_hash TEXT PRIMARY KEY,
                 account_id INTEGER NOT NULL,
                 login TEXT NOT NULL,
                 token_kind TEXT NOT NULL,
                 scopes TEXT NOT NULL,
                 resolved_at INTEGER NOT NULL
             ) STRICT;",
        )
        .map_err(sql)?;
        // Added for `share = "app"`; a table from before it gains the column (rows without
        // an app share under `app` with nothing until resolved again).
        let has_client_id = conn
            .prepare("SELECT client_id FROM credential_account LIMIT 0")
            .is_ok();
        if !has_client_id {
            conn.execute_batch(
                "ALTER TABLE credential_account ADD COLUMN client_id TEXT NOT NULL DEFAULT ''",
            )
            .map_err(sql)?;
        }
        conn.execute(
            "DELETE FROM credential_account WHERE resolved_at < ?1",
            params![crate::time_fmt::now_ms() - KEEP_MS],
        )
        .map_err(sql)?;
        Ok(conn)
    }

    fn sql(&self, source: rusqlite::Error) -> AccountStoreError {
        AccountStoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        // A panic while holding the lock cannot leave a half-done statement behind.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the file exists yet (the first mapping saved makes it).
    #[cfg(test)]
    pub fn exists(&self) -> bool {
        self.conn().is_some()
    }

    pub fn load_all(&self) -> Result<Vec<(Identity, AccountRecord)>, AccountStoreError> {
        let guard = self.conn();
        let Some(conn) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let mut st = conn
            .prepare("SELECT credential_hash, account_id, login, token_kind, scopes, resolved_at, client_id FROM credential_account")
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    AccountRecord {
                        account_id: r.get::<_, i64>(1)? as u64,
                        login: r.get(2)?,
                        kind: TokenKind::parse(&r.get::<_, String>(3)?),
                        scopes: r
                            .get::<_, String>(4)?
                            .split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect(),
                        resolved_at_ms: r.get(5)?,
                        client_id: Some(r.get::<_, String>(6)?).filter(|c| !c.is_empty()),
                    },
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (hash, rec) = row.map_err(|e| self.sql(e))?;
            if let Some(id) = Identity::from_hex(&hash) {
                out.push((id, rec));
            }
        }
        Ok(out)
    }

    pub fn put(&self, id: &Identity, rec: &AccountRecord) -> Result<(), AccountStoreError> {
        let mut guard = self.conn();
        let conn = match &mut *guard {
            Some(conn) => conn,
            none => none.insert(Self::connect(&self.path)?),
        };
        conn.execute(
                "INSERT INTO credential_account
                     (credential_hash, account_id, login, token_kind, scopes, resolved_at, client_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (credential_hash) DO UPDATE SET account_id = ?2, login = ?3,
                 token_kind = ?4, scopes = ?5, resolved_at = ?6, client_id = ?7",
                params![
                    id.hex(),
                    rec.account_id as i64,
                    rec.login,
                    rec.kind.as_str(),
                    rec.scopes.join(","),
                    rec.resolved_at_ms,
                    rec.client_id.as_deref().unwrap_or("")
                ],
            )
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    pub fn delete(&self, id: &Identity) -> Result<(), AccountStoreError> {
        let guard = self.conn();
        // No file: nothing to delete.
        let Some(conn) = guard.as_ref() else {
            return Ok(());
        };
        conn.execute(
            "DELETE FROM credential_account WHERE credential_hash = ?1",
            params![id.hex()],
        )
        .map(|_| ())
        .map_err(|e| self.sql(e))
    }
}

/// Creates the file readable and writable by the user only, and tightens an existing one.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)?;
    crate::paths::restrict(path, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_survive_a_reopen_and_can_be_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let id = Identity::from_hex(&"ab".repeat(32)).unwrap();
        let rec = AccountRecord {
            account_id: 42,
            login: "octo".into(),
            kind: TokenKind::Oauth,
            scopes: vec!["repo".into(), "workflow".into()],
            client_id: None,
            resolved_at_ms: crate::time_fmt::now_ms(),
        };
        let s = AccountStore::open(dir.path()).unwrap();
        // Nothing on disk until the first mapping: reads answer empty, a delete is a no-op.
        assert!(s.load_all().unwrap().is_empty());
        s.delete(&id).unwrap();
        assert!(!s.exists());
        assert!(!dir.path().join("accounts.sqlite3").exists());
        s.put(&id, &rec).unwrap();
        assert!(s.exists());
        drop(s);
        let s = AccountStore::open(dir.path()).unwrap();
        assert_eq!(s.load_all().unwrap(), vec![(id, rec)]);
        s.delete(&id).unwrap();
        assert!(s.load_all().unwrap().is_empty());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let m = std::fs::metadata(dir.path().join("accounts.sqlite3")).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o600);
        }
    }
}
