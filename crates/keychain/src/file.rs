//! [`FileStore`]: secrets as owner-only files, for machines with no OS keychain (an SSH box, a
//! dev container, WSL, a CI runner). One file per account (0600) in one directory per service
//! (0700), each written to a temporary file, flushed to disk and renamed over the old one, so a
//! crash leaves the old secret or the new one, never half of either.
//!
//! This is the convention of `gh auth login --insecure-storage`, git's `credential-store` and
//! `~/.mitmproxy`: anyone who can read the directory as this user (or as root) can read the
//! secrets. The files are never encrypted: a key to decrypt them would have to sit beside them.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{KeychainError, Secret};

/// Prefix of the temporary files a write renames into place (skipped by [`FileStore::accounts`]).
const TMP_PREFIX: &str = ".tmp-";

/// One service's entries as files under `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Entries live in `dir` (created 0700 on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStore { dir: dir.into() }
    }

    /// The directory holding the entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `secret` for `account`, replacing any previous value atomically.
    pub fn set(&self, account: &str, secret: &str) -> Result<(), KeychainError> {
        let path = self.path(account)?;
        self.ensure_dir()?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let tmp = self.dir.join(format!(
            "{TMP_PREFIX}{account}-{}-{nanos}",
            std::process::id()
        ));
        let written = (|| {
            let mut f = owner_only_file(&tmp)?;
            f.write_all(secret.as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            sync_dir(&self.dir)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("write", &path, &e));
        }
        tracing::debug!(dir = %self.dir.display(), account, "secret file stored");
        Ok(())
    }

    /// The secret stored for `account`, or `None` if there is none.
    pub fn get_secret(&self, account: &str) -> Result<Option<Secret>, KeychainError> {
        let path = self.path(account)?;
        match fs::read(&path) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(|s| Some(Secret::new(s)))
                .map_err(|e| KeychainError::File {
                    detail: format!(
                        "{} is not UTF-8 text ({} bytes)",
                        path.display(),
                        e.as_bytes().len()
                    ),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read", &path, &e)),
        }
    }

    /// Removes the entry for `account`; removing one that does not exist succeeds.
    pub fn delete(&self, account: &str) -> Result<(), KeychainError> {
        let path = self.path(account)?;
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| io_error("delete", &path, &e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("delete", &path, &e)),
        }
    }

    /// Every account stored here, sorted (none when the directory does not exist).
    pub fn accounts(&self) -> Result<Vec<String>, KeychainError> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("list", &self.dir, &e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| io_error("list", &self.dir, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if valid_account(&name) && entry.file_type().is_ok_and(|t| t.is_file()) {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Removes the directory when it holds nothing (after every entry moved elsewhere).
    pub fn remove_if_empty(&self) -> Result<(), KeychainError> {
        match fs::remove_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove", &self.dir, &e)),
        }
    }

    /// Creates the directory (and its parent) owner-only, and tightens it if it is looser.
    pub fn ensure_dir(&self) -> Result<(), KeychainError> {
        fs::create_dir_all(&self.dir).map_err(|e| io_error("create", &self.dir, &e))?;
        owner_only_dir(&self.dir).map_err(|e| io_error("protect", &self.dir, &e))?;
        if let Some(parent) = self.dir.parent() {
            owner_only_dir(parent).map_err(|e| io_error("protect", parent, &e))?;
        }
        Ok(())
    }

    fn path(&self, account: &str) -> Result<PathBuf, KeychainError> {
        if !valid_account(account) {
            return Err(KeychainError::File {
                detail: format!("`{account}` cannot be a file name in the secret store"),
            });
        }
        Ok(self.dir.join(account))
    }
}

/// Account names are file names: ASCII letters, digits, `-`, `_`, `.`, not starting with `.`
/// (so no path, no hidden or temporary file).
fn valid_account(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn io_error(action: &str, path: &Path, e: &std::io::Error) -> KeychainError {
    KeychainError::file_io(action, path, e)
}

#[cfg(unix)]
fn owner_only_file(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn owner_only_file(path: &Path) -> std::io::Result<fs::File> {
    // Windows: the file inherits the ACL of the user's profile directory it sits in.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(unix)]
fn owner_only_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn owner_only_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Makes a rename or removal in `dir` durable (a directory cannot be opened for sync on Windows).
#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full disk (ENOSPC, what a write to a full tmpfs gave) gets the fix that frees space,
    /// not the one about the folder's owner and modes.
    #[cfg(unix)]
    #[test]
    fn a_full_disk_is_told_to_free_space() {
        let full = std::io::Error::from_raw_os_error(28);
        let e = io_error("write", Path::new("/d/secrets/weir/queue-1"), &full);
        assert_eq!(e.code(), "secret_file_no_space");
        assert!(e.fix().contains("is full"), "{}", e.fix());
        assert!(e.to_string().contains("No space left on device"), "{e}");
        let denied = std::io::Error::from_raw_os_error(13);
        let e = io_error("write", Path::new("/d/secrets/weir/queue-1"), &denied);
        assert_eq!(e.code(), "secret_file_error");
    }

    #[test]
    fn round_trip_lists_and_deletes() {
        let tmp = tempfile::tempdir().unwrap();
        let s = FileStore::new(tmp.path().join("secrets").join("weir"));
        assert_eq!(s.get_secret("a").unwrap(), None);
        assert!(s.accounts().unwrap().is_empty());
        s.set("control-secret", "one").unwrap();
        s.set("control-secret", "two").unwrap();
        s.set("queue-0123", "tok").unwrap();
        assert_eq!(
            s.get_secret("control-secret").unwrap().unwrap().expose(),
            "two"
        );
        assert_eq!(s.accounts().unwrap(), ["control-secret", "queue-0123"]);
        s.delete("queue-0123").unwrap();
        s.delete("queue-0123").unwrap();
        assert_eq!(s.accounts().unwrap(), ["control-secret"]);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(s.dir()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn files_and_directories_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().join("secrets");
        fs::create_dir(&parent).unwrap();
        fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).unwrap();
        let s = FileStore::new(parent.join("weir"));
        s.set("identity-key", "k").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&parent), 0o700);
        assert_eq!(mode(s.dir()), 0o700);
        assert_eq!(mode(&s.dir().join("identity-key")), 0o600);
    }

    #[test]
    fn names_that_are_not_plain_file_names_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let s = FileStore::new(tmp.path());
        for bad in ["", "../x", "a/b", ".hidden", ".tmp-x"] {
            let e = s.set(bad, "v").unwrap_err();
            assert_eq!(e.code(), "secret_file_error", "{bad}");
        }
    }
}
