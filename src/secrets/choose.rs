//! Which store one install's secrets live in: `[secrets] store = "auto" | "keychain" | "file"`.
//!
//! The answer is kept on disk, not in memory: the file store's directory
//! (`<data dir>/secrets/<service>`) exists exactly when the secrets are files, so the engine, the
//! CLI, the tray and the CA store all find them in the same place ([`Namespace::keychain`]).
//! - `auto` (default): files when that directory exists (a machine that had no keychain keeps
//!   its CA, control secret and cache key even if one appears later: `weir secrets migrate`
//!   moves them); else the OS keychain when it answers; else (no keychain at all: no session
//!   bus, no Secret Service) the directory is made and the secrets are files. A keychain that
//!   is there but locked or refusing is still the keychain: its entries must not be forked.
//! - `keychain`: the OS keychain or nothing; Weir refuses to start without one.
//! - `file`: files, whether or not a keychain answers.

use super::{Namespace, KEYCHAIN_TIMEOUT};
use std::path::{Path, PathBuf};
use weir_keychain::KeychainError;

/// `[secrets] store`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreChoice {
    #[default]
    Auto,
    Keychain,
    File,
}

impl StoreChoice {
    /// Parses the config value.
    pub fn parse(s: &str) -> Option<StoreChoice> {
        match s {
            "auto" => Some(StoreChoice::Auto),
            "keychain" => Some(StoreChoice::Keychain),
            "file" => Some(StoreChoice::File),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StoreChoice::Auto => "auto",
            StoreChoice::Keychain => "keychain",
            StoreChoice::File => "file",
        }
    }
}

/// Where this run's secrets are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The OS keychain (it answered, or it is there but locked: the engine says so).
    Keychain,
    /// Owner-only files in this directory; `why` says how it came to be chosen.
    Files { dir: PathBuf, why: FilesBecause },
}

/// Why the secrets are files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesBecause {
    /// `store = "file"`.
    Configured,
    /// `auto` found no OS keychain on this machine.
    NoKeychain,
    /// `auto` found the file store already in use (made on an earlier run or by a migration).
    AlreadyThere,
}

/// Why the configured store cannot be used; Weir does not start.
#[derive(Debug, thiserror::Error)]
pub enum ChooseError {
    #[error("[secrets] store = \"keychain\", but {0}. Fix: {fix} Or set `store = \"auto\"` under [secrets] in the config file to keep secrets in owner-only files when there is no keychain.", fix = .0.fix())]
    NoKeychain(KeychainError),
    #[error("[secrets] store = \"keychain\", but this install's secrets are files in {dir}. Fix: move them with `weir secrets migrate --to keychain`, or set `store = \"auto\"` under [secrets]")]
    FilesInUse { dir: PathBuf },
    #[error("{0}")]
    Files(KeychainError),
    #[error("this install has no data directory to keep secret files in")]
    NoDataDir,
}

impl ChooseError {
    /// What to do, for the errors whose text does not already say it.
    pub fn fix(&self) -> Option<&'static str> {
        match self {
            ChooseError::Files(e) => Some(e.fix()),
            ChooseError::NoDataDir => {
                Some("Give one with --data-dir or `data_dir` in the config file.")
            }
            ChooseError::NoKeychain(_) | ChooseError::FilesInUse { .. } => None,
        }
    }
}

/// Whether the file store could be made at `dir`: the nearest part of it that exists is a
/// directory that is not read-only. (`weir doctor` asks without making anything.)
pub fn files_possible(dir: &Path) -> bool {
    let mut p = dir;
    loop {
        if let Ok(m) = std::fs::metadata(p) {
            return m.is_dir() && !m.permissions().readonly();
        }
        match p.parent() {
            Some(q) => p = q,
            None => return false,
        }
    }
}

/// Decides (and for files, prepares) where the secrets of the install at `data_dir` live.
/// Blocks (a keychain probe over D-Bus, bounded by [`KEYCHAIN_TIMEOUT`]): call it before the
/// async runtime starts or from `spawn_blocking`.
pub fn choose(data_dir: &Path, choice: StoreChoice) -> Result<Place, ChooseError> {
    let ns = Namespace::for_data_dir(data_dir);
    let files = ns
        .file_keychain()
        .ok_or(ChooseError::NoDataDir)?
        .file_store()
        .cloned()
        .ok_or(ChooseError::NoDataDir)?;
    let in_use = files.dir().is_dir();
    let use_files = |why| {
        // The data dir first, owner-only as `weir serve` makes it: the file store only makes
        // its own two levels private, and a command run before the first start (`weir token
        // set`, `weir env`) left the data dir at the umask's 0755.
        crate::paths::create_private_dir(data_dir).map_err(|e| {
            ChooseError::Files(weir_keychain::KeychainError::file_io(
                "create", data_dir, &e,
            ))
        })?;
        files.ensure_dir().map_err(ChooseError::Files)?;
        Ok(Place::Files {
            dir: files.dir().to_path_buf(),
            why,
        })
    };
    match choice {
        StoreChoice::File => use_files(FilesBecause::Configured),
        StoreChoice::Auto if in_use => use_files(FilesBecause::AlreadyThere),
        StoreChoice::Keychain if in_use => {
            if files.accounts().map_err(ChooseError::Files)?.is_empty() {
                // An empty directory left behind holds nothing to lose.
                files.remove_if_empty().map_err(ChooseError::Files)?;
            } else {
                return Err(ChooseError::FilesInUse {
                    dir: files.dir().to_path_buf(),
                });
            }
            probe(&ns).map_err(ChooseError::NoKeychain)?;
            Ok(Place::Keychain)
        }
        StoreChoice::Keychain => {
            probe(&ns).map_err(ChooseError::NoKeychain)?;
            Ok(Place::Keychain)
        }
        StoreChoice::Auto => match probe(&ns) {
            Err(KeychainError::NoService { detail }) => {
                tracing::debug!(%detail, "no OS keychain; secrets go to files");
                use_files(FilesBecause::NoKeychain)
            }
            // Locked, refused or flaky: the keychain is there and may hold this install's
            // entries; the engine reports it and keeps asking it.
            _ => Ok(Place::Keychain),
        },
    }
}

/// The handle a command that stores secrets writes through: the store `weir serve` would use
/// under `choice` (chosen, and for files made, now), so a secret stored before the first start
/// lands where the engine will look. Blocks like [`choose()`].
pub fn store_for(
    data_dir: &Path,
    choice: StoreChoice,
) -> Result<weir_keychain::Keychain, ChooseError> {
    choose(data_dir, choice)?;
    Ok(Namespace::for_data_dir(data_dir).keychain())
}

/// Where `store` keeps what is written to it, in words for a command's output: the OS
/// keychain and its service, or the file store's directory (a person who reads "keychain" on
/// a box without one would think the secret is encrypted at rest).
pub fn stored_where(store: &weir_keychain::Keychain) -> String {
    match store.file_store() {
        Some(f) => format!(
            "an owner-only file in {} (no OS keychain here)",
            f.dir().display()
        ),
        None => format!("the OS keychain (service `{}`)", store.service()),
    }
}

/// The OS keychain's probe, given up after [`KEYCHAIN_TIMEOUT`] (a locked keyring may wait for
/// a person to unlock it).
fn probe(ns: &Namespace) -> Result<(), KeychainError> {
    let k = ns.os_keychain();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(k.probe());
    });
    rx.recv_timeout(KEYCHAIN_TIMEOUT).unwrap_or_else(|_| {
        Err(KeychainError::Locked {
            detail: format!(
                "the keychain did not answer within {}s",
                KEYCHAIN_TIMEOUT.as_secs()
            ),
        })
    })
}

/// What it means that the secrets are files, said the same way at start, by `weir doctor` and
/// in the Set up view.
pub fn files_meaning(dir: &Path) -> String {
    format!(
        "Weir's secrets (control secret, CA key, cache key, stored token, queued creates' credentials) are kept in owner-only files in {}, not in an OS keychain. Anyone who can read your home directory as you (or as root) can read them, as with `gh --insecure-storage`, git's credential-store or ~/.mitmproxy. To move them into a keychain once one runs: `weir secrets migrate --to keychain`.",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_words_parse() {
        for c in [StoreChoice::Auto, StoreChoice::Keychain, StoreChoice::File] {
            assert_eq!(StoreChoice::parse(c.as_str()), Some(c));
        }
        assert_eq!(StoreChoice::parse("memory"), None);
    }

    #[test]
    fn file_makes_the_directory_and_readers_then_find_files() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let place = choose(&data, StoreChoice::File).unwrap();
        let Place::Files { dir, why } = place else {
            panic!("{place:?}")
        };
        assert_eq!(why, FilesBecause::Configured);
        assert!(dir.is_dir() && dir.starts_with(data.join("secrets")));
        // The data dir it made is owner-only, as `weir serve` makes it (it was the umask's).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
        }
        let k = Namespace::for_data_dir(&data).keychain();
        assert_eq!(k.file_store().map(|f| f.dir()), Some(dir.as_path()));
        // Once there, `auto` keeps using the files.
        assert!(matches!(
            choose(&data, StoreChoice::Auto).unwrap(),
            Place::Files {
                why: FilesBecause::AlreadyThere,
                ..
            }
        ));
    }

    #[test]
    fn keychain_refuses_while_secrets_are_files() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        choose(&data, StoreChoice::File).unwrap();
        let k = Namespace::for_data_dir(&data).keychain();
        k.set("control-secret", "s").unwrap();
        let e = choose(&data, StoreChoice::Keychain).unwrap_err();
        assert!(matches!(e, ChooseError::FilesInUse { .. }), "{e}");
        assert!(e.to_string().contains("weir secrets migrate --to keychain"));
    }
}
