//! Waiting for a file to appear (the system bus's socket), woken by the OS's change
//! notifications (`notify`: inotify) instead of a timer: a machine without a system bus (a
//! container, WSL, an SSH remote) is not woken once a minute to look again (#32 item 4, "idle
//! means asleep"), and a bus that starts later is seen at once.

use notify::{RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// Returns once `path` exists. Watches the deepest directory on its way that exists now, one
/// directory and not a tree; each change there looks again, and a directory on the way that
/// appears is watched in its turn. `Err` when the OS cannot watch (no inotify, its limits
/// reached): the caller falls back to its timer.
pub(super) async fn exists(path: &Path) -> notify::Result<()> {
    // One stored permit: a burst of events is one look, and none is lost.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        let _ = tx.try_send(());
    })?;
    loop {
        let Some(dir) = deepest_dir(path) else {
            return Err(notify::Error::generic("no directory on its way exists"));
        };
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        // Looked at after the watch is set: a file made in between is not missed.
        if path.exists() {
            return Ok(());
        }
        if rx.recv().await.is_none() {
            return Err(notify::Error::generic("the OS watch ended"));
        }
        // Watched afresh at each change: the directory may have been removed (its watch ends
        // with it) or a deeper one made.
        let _ = watcher.unwatch(&dir);
    }
}

/// The deepest directory above `path` that exists (symlinks followed, as the OS watch does).
fn deepest_dir(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|a| !a.as_os_str().is_empty() && a.is_dir())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Woken by the file's creation (two directories deep, neither there at first), not by a
    /// timer: nothing returns while the path is missing.
    #[tokio::test]
    async fn returns_when_the_file_appears_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/dbus/system_bus_socket");
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { exists(&path).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "the file is not there yet");
        std::fs::create_dir(dir.path().join("run")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !waiting.is_finished(),
            "only its directory's parent is there"
        );
        std::fs::create_dir(dir.path().join("run/dbus")).unwrap();
        std::fs::write(&path, b"").unwrap();
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("seen when it appeared")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_file_already_there_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket");
        std::fs::write(&path, b"").unwrap();
        exists(&path).await.unwrap();
    }

    #[test]
    fn the_deepest_existing_directory_is_watched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c");
        assert_eq!(deepest_dir(&path).as_deref(), Some(dir.path()));
        std::fs::create_dir(dir.path().join("a")).unwrap();
        assert_eq!(deepest_dir(&path), Some(dir.path().join("a")));
    }
}
