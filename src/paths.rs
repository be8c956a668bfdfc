//! Where Weir keeps its config and data on each OS (the `directories` crate knows the rules:
//! XDG on Linux, ~/Library on macOS, %APPDATA% on Windows), and keeping the data dir private.
//! There is no fallback to a shared temporary directory: without a home directory the data dir
//! must be given (`--data-dir` or `data_dir` in the config file).

use std::path::{Path, PathBuf};

fn dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("dev", "weir", "weir")
}

/// `<config dir>/config.toml`, e.g. `~/.config/weir/config.toml` on Linux.
pub fn default_config_file() -> Option<PathBuf> {
    dirs().map(|d| d.config_dir().join("config.toml"))
}

/// e.g. `~/.local/share/weir` on Linux; `None` when the OS gives no home directory (then the
/// data dir must be set: `--data-dir` or `data_dir` in the config file).
pub fn default_data_dir() -> Option<PathBuf> {
    dirs().map(|d| d.data_dir().to_path_buf())
}

/// Creates `dir` (and its parents) and makes it the user's alone (0700 on Unix): it holds the
/// queue (request bodies) and the local CA certificate. A directory whose mode cannot be
/// changed (a read-only mount, another owner) is used as it is, with a warning.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Err(e) = restrict(dir, 0o700) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot make the data directory private (0700)");
    }
    Ok(())
}

/// Makes an existing file or directory readable by the user only (`mode` on Unix; nothing
/// elsewhere, where the user's profile directory is already private).
pub fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Replaces `file` with `bytes` atomically (written beside it to a new file of this write's
/// own, synced, renamed), readable by the user only (0600 on Unix): the small state files of
/// the data dir (`mode.json`, `network.json`) and the tray's launcher page.
///
/// The file beside is made with `create_new` (`O_EXCL`): never an existing file, so never one
/// a link planted at its name points to, never an inode someone opened before its bits were
/// tightened, and never another writer's half-written one (each write has its own name).
pub fn write_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let beside = |suffix: &str| {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    // The fixed name older versions wrote through: gone, whatever it is (a link included).
    let _ = std::fs::remove_file(beside(".tmp"));
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = beside(&format!(".{}-{n}.tmp", std::process::id()));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written = (|| {
        let mut f = opts.open(&tmp)?;
        // The process's umask can only take bits away; this makes sure of the 0600.
        restrict(&tmp, 0o600)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The data dir's lock file (`weir.lock`): held by the one engine that uses the dir.
pub const LOCK_FILE: &str = "weir.lock";

/// An exclusive lock on a data dir, released when dropped (or when the process ends, however
/// it ends: the OS drops it with the file handle, so a killed Weir leaves no stale lock).
#[derive(Debug)]
pub struct DirLock(#[allow(dead_code)] std::fs::File);

/// Why a data dir could not be locked.
#[derive(Debug)]
pub enum DirLockError {
    /// Another process holds it: its process id, when it wrote one.
    Held(Option<u32>),
    /// The dir cannot hold a lock file (read-only, not the user's): the caller goes on without
    /// the lock, as it goes on without the queue file there.
    Unlockable(std::io::Error),
    Io(std::io::Error),
}

/// Opens (making it owner-only if new) a file to take an OS lock on: never truncated, since
/// another holder's content (its process id) may be in it. The data dir's lock and the CA's
/// creation lock (`intercept::ca_store`).
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

/// Takes `dir`'s lock without waiting, and writes this process's id into the lock file (read
/// back for the message another Weir gives). Two engines on one data dir would each recover
/// the other's creates in flight as "in doubt" and replay the same queue.
pub fn lock_dir(dir: &Path) -> Result<DirLock, DirLockError> {
    use std::io::{ErrorKind, Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let (mut f, writable) = match open_lock_file(&path) {
        Ok(f) => (f, true),
        // A read-only dir may still hold the lock file of an earlier run: a read-only handle
        // locks it as well.
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            match std::fs::File::open(&path) {
                Ok(f) => (f, false),
                Err(_) => return Err(DirLockError::Unlockable(e)),
            }
        }
        Err(e) => return Err(DirLockError::Io(e)),
    };
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut held_by = String::new();
            let _ = f.read_to_string(&mut held_by);
            return Err(DirLockError::Held(held_by.trim().parse().ok()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(DirLockError::Io(e)),
    }
    if writable {
        let written = f
            .set_len(0)
            .and_then(|()| f.rewind())
            .and_then(|()| write!(f, "{}", std::process::id()));
        written.map_err(DirLockError::Io)?;
    }
    Ok(DirLock(f))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_loose_data_dir_is_tightened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    /// The tray's launcher page holds the control secret: it is the user's alone even where a
    /// loose `.tmp` was left behind, and a second write replaces it (one file, no `.tmp`).
    #[test]
    fn a_private_file_is_the_users_alone_and_replaced_whole() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("page.html");
        std::fs::write(
            t.path().join("page.html.tmp"),
            b"left over, longer than the rest",
        )
        .unwrap();
        std::fs::set_permissions(
            t.path().join("page.html.tmp"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        write_private(&f, b"secret").unwrap();
        write_private(&f, b"again").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"again");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    /// One holder at a time; the second is told who holds it; dropping the lock frees it.
    #[test]
    fn a_data_dir_is_locked_by_one_holder_at_a_time() {
        let t = tempfile::tempdir().unwrap();
        let first = lock_dir(t.path()).unwrap();
        match lock_dir(t.path()) {
            Err(DirLockError::Held(pid)) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("a second lock while the first is held: {other:?}"),
        }
        drop(first);
        let again = lock_dir(t.path()).unwrap();
        let mode = std::fs::metadata(t.path().join(LOCK_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        drop(again);
    }

    /// A link planted where the file beside used to be written is never followed: the file it
    /// points to keeps its bytes and bits, and the secret lands only in the file asked for.
    #[test]
    fn a_planted_link_beside_the_file_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"the victim's").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let f = t.path().join("page.html");
        std::os::unix::fs::symlink(&victim, t.path().join("page.html.tmp")).unwrap();
        write_private(&f, b"secret").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"the victim's");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert_eq!(std::fs::read(&f).unwrap(), b"secret");
        assert!(std::fs::symlink_metadata(&f).unwrap().file_type().is_file());
    }
}
