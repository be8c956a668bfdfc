//! `weir secrets migrate --to keychain|file`: moves every entry of one install between the OS
//! keychain and the file store, or none. Every entry is read, written to the destination and
//! read back there before anything is deleted from the source; on any failure what was written
//! is taken back out and the source is left as it was.
//!
//! The file store's directory is what says the secrets are files ([`mod@super::choose`]), so it
//! appears with the first entry moved to files and is removed after the last entry moved out.
//! A keychain cannot be listed: the entries looked for are every fixed [`Account`] and the
//! replay credentials the queue database names.

use super::names::{Account, Namespace, QUEUE_ACCOUNT_PREFIX};
use std::path::{Path, PathBuf};
use weir_keychain::{Keychain, KeychainError};

/// Where the entries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Keychain,
    File,
}

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The accounts moved, sorted.
    pub accounts: Vec<String>,
    /// The file store's directory (moved from or to).
    pub dir: PathBuf,
}

/// Why nothing was moved (or, for [`MigrateError::Cleanup`], why the source kept copies).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("the secrets are already {where_}")]
    AlreadyThere { where_: String },
    #[error("cannot read `{account}` from the {from}: {source}. Nothing was moved. {fix}", fix = .source.fix())]
    Read {
        account: String,
        from: &'static str,
        source: KeychainError,
    },
    #[error("cannot write `{account}` to the {to}: {source}. Nothing was moved (the entries written were taken back out). {fix}", fix = .source.fix())]
    Write {
        account: String,
        to: &'static str,
        source: KeychainError,
    },
    #[error(
        "`{account}` read back from the {to} differs from what was written. Nothing was moved."
    )]
    Verify { account: String, to: &'static str },
    #[error("the {to} already holds `{account}` with another value. Nothing was moved; remove it there first if it is stale.")]
    Conflict { account: String, to: &'static str },
    #[error(
        "cannot read the queue's credential references in {path}: {detail}. Nothing was moved."
    )]
    Queue { path: PathBuf, detail: String },
    #[error("every entry is in the {to} now, but removing them from the {from} failed: {detail}. Remove what is left there by hand.")]
    Cleanup {
        to: &'static str,
        from: &'static str,
        detail: String,
    },
    #[error("this install has no data directory")]
    NoDataDir,
}

fn name(k: &Keychain) -> &'static str {
    if k.file_store().is_some() {
        "file store"
    } else {
        "OS keychain"
    }
}

/// Moves every entry of the install at `data_dir` to `to`. Blocks (keychain, files, SQLite).
/// Weir should not be running (it would keep writing to the old store).
pub fn migrate(data_dir: &Path, to: Target) -> Result<Moved, MigrateError> {
    let ns = Namespace::for_data_dir(data_dir);
    let files = ns.file_keychain().ok_or(MigrateError::NoDataDir)?;
    let dir = ns.files_dir().ok_or(MigrateError::NoDataDir)?.to_path_buf();
    let os = ns.os_keychain();
    let in_files = dir.is_dir();
    let (from, dest) = match (to, in_files) {
        (Target::File, false) => (os, files),
        (Target::Keychain, true) => (files, os),
        (Target::File, true) => {
            return Err(MigrateError::AlreadyThere {
                where_: format!("files in {}", dir.display()),
            })
        }
        (Target::Keychain, false) => {
            return Err(MigrateError::AlreadyThere {
                where_: "in the OS keychain".into(),
            })
        }
    };
    let mut accounts = candidates(data_dir, &from)?;
    accounts.sort();
    accounts.dedup();
    let accounts = move_all(&accounts, &from, &dest)?;
    // The marker last: only now do readers look in the new place.
    if let Some(f) = from.file_store() {
        f.remove_if_empty().map_err(|e| MigrateError::Cleanup {
            to: name(&dest),
            from: name(&from),
            detail: e.to_string(),
        })?;
    }
    Ok(Moved { accounts, dir })
}

/// The accounts to look for in `from`: everything in a file store; for the keychain, which
/// cannot be listed, the fixed accounts and the queue's credential references.
fn candidates(data_dir: &Path, from: &Keychain) -> Result<Vec<String>, MigrateError> {
    if let Some(f) = from.file_store() {
        return f.accounts().map_err(|source| MigrateError::Read {
            account: "(the list)".into(),
            from: "file store",
            source,
        });
    }
    let mut out: Vec<String> = Account::ALL
        .iter()
        .map(|a| a.as_str().to_string())
        .collect();
    out.extend(queue_refs(&data_dir.join("queue.sqlite3"))?);
    Ok(out)
}

/// The replay credentials' accounts named by the queue database (none without one).
fn queue_refs(path: &Path) -> Result<Vec<String>, MigrateError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let err = |e: rusqlite::Error| MigrateError::Queue {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(err)?;
    let mut st = db
        .prepare("SELECT DISTINCT credential_ref FROM queue_items WHERE credential_ref IS NOT NULL")
        .map_err(err)?;
    let refs = st
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    Ok(refs
        .into_iter()
        .filter(|r| r.starts_with(QUEUE_ACCOUNT_PREFIX))
        .collect())
}

/// Copies every present entry of `accounts` from `from` to `dest`, checks each read back, then
/// deletes them from `from`. Returns the accounts moved. All or nothing up to the deletes.
pub fn move_all(
    accounts: &[String],
    from: &Keychain,
    dest: &Keychain,
) -> Result<Vec<String>, MigrateError> {
    // 1. Read everything first: a source that cannot be read moves nothing.
    let mut found = Vec::new();
    for a in accounts {
        match from.get_secret(a) {
            Ok(Some(v)) => found.push((a.clone(), v)),
            Ok(None) => {}
            Err(source) => {
                return Err(MigrateError::Read {
                    account: a.clone(),
                    from: name(from),
                    source,
                })
            }
        }
    }
    // 2. A destination entry with another value is someone's: never overwrite it.
    for (a, v) in &found {
        match dest.get_secret(a) {
            Ok(Some(d)) if d != *v => {
                return Err(MigrateError::Conflict {
                    account: a.clone(),
                    to: name(dest),
                })
            }
            // Unreadable or absent: the write below says whether it can go there.
            Ok(_) | Err(_) => {}
        }
    }
    // 3. Write and read back; any failure takes back what was written.
    let mut written: Vec<&str> = Vec::new();
    let undo = |written: &[&str]| {
        for a in written {
            let _ = dest.delete(a);
        }
        if let Some(f) = dest.file_store() {
            let _ = f.remove_if_empty();
        }
    };
    for (a, v) in &found {
        if let Err(source) = dest.set(a, v.expose()) {
            undo(&written);
            return Err(MigrateError::Write {
                account: a.clone(),
                to: name(dest),
                source,
            });
        }
        written.push(a);
        match dest.get_secret(a) {
            Ok(Some(back)) if back == *v => {}
            _ => {
                undo(&written);
                return Err(MigrateError::Verify {
                    account: a.clone(),
                    to: name(dest),
                });
            }
        }
    }
    // 4. Only now empty the source.
    let mut failed = Vec::new();
    for (a, _) in &found {
        if let Err(e) = from.delete(a) {
            failed.push(format!("{a}: {e}"));
        }
    }
    if !failed.is_empty() {
        return Err(MigrateError::Cleanup {
            to: name(dest),
            from: name(from),
            detail: failed.join("; "),
        });
    }
    Ok(found.into_iter().map(|(a, _)| a).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_moves_and_the_source_is_emptied() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Keychain::in_files("weir", &tmp.path().join("a"));
        let b = Keychain::in_files("weir", &tmp.path().join("b"));
        a.set("control-secret", "s").unwrap();
        a.set("queue-0011", "t").unwrap();
        let names: Vec<String> = ["control-secret", "queue-0011", "absent"]
            .map(String::from)
            .to_vec();
        let moved = move_all(&names, &a, &b).unwrap();
        assert_eq!(moved, ["control-secret", "queue-0011"]);
        assert_eq!(b.get("queue-0011").unwrap().as_deref(), Some("t"));
        assert!(a.file_store().unwrap().accounts().unwrap().is_empty());
    }

    #[test]
    fn a_write_failing_half_way_takes_back_what_was_written() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Keychain::in_files("weir", &tmp.path().join("a"));
        let bdir = tmp.path().join("b");
        // A directory where the second entry's file would go: its rename fails, even as root.
        std::fs::create_dir_all(bdir.join("identity-key")).unwrap();
        let b = Keychain::in_files("weir", &bdir);
        a.set("control-secret", "s").unwrap();
        a.set("identity-key", "k").unwrap();
        let names = ["control-secret".to_string(), "identity-key".to_string()];
        let e = move_all(&names, &a, &b).unwrap_err();
        assert!(matches!(e, MigrateError::Write { .. }), "{e}");
        assert_eq!(b.get("control-secret").unwrap(), None);
        assert_eq!(a.file_store().unwrap().accounts().unwrap().len(), 2);
        assert_eq!(a.get("control-secret").unwrap().as_deref(), Some("s"));
    }

    #[test]
    fn a_conflicting_destination_moves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Keychain::in_files("weir", &tmp.path().join("a"));
        let b = Keychain::in_files("weir", &tmp.path().join("b"));
        a.set("control-secret", "s").unwrap();
        a.set("identity-key", "k").unwrap();
        b.set("identity-key", "other").unwrap();
        let names = ["control-secret".to_string(), "identity-key".to_string()];
        let e = move_all(&names, &a, &b).unwrap_err();
        assert!(matches!(e, MigrateError::Conflict { .. }), "{e}");
        assert_eq!(a.file_store().unwrap().accounts().unwrap().len(), 2);
        assert_eq!(b.get("control-secret").unwrap(), None);
    }

    #[test]
    fn a_file_install_moves_to_files_only_once() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        super::super::choose(&data, super::super::StoreChoice::File).unwrap();
        let e = migrate(&data, Target::File).unwrap_err();
        assert!(matches!(e, MigrateError::AlreadyThere { .. }), "{e}");
    }
}
