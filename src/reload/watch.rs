//! Watches the config file with the OS's own change notifications (`notify`: inotify,
//! FSEvents, ReadDirectoryChangesW). The *directory* is watched, not the file: editors often
//! save by writing a new file and renaming it over the old one, which a watch on the old
//! file's inode would miss. Bursts of events (write, chmod, rename) are debounced into one
//! reload.

use super::Reloader;
use notify::{RecursiveMode, Watcher};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Quiet time after the last event before the file is read: long enough for an editor's
/// write-then-rename to finish.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);

/// Starts watching the reloader's config file until `stop` flips; `false` when there is
/// nothing to watch (no file location, or its directory does not exist or cannot be watched).
pub(crate) fn spawn(
    reloader: Arc<Reloader>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    tasks: &tokio_util::task::TaskTracker,
) -> bool {
    let Some(path) = reloader.config_file().cloned() else {
        return false;
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    let name = name.to_os_string();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(ev) = res else { return };
        if ev
            .paths
            .iter()
            .any(|p| p.file_name() == Some(name.as_os_str()))
        {
            // Full means a reload is already due: this event is covered by it.
            let _ = tx.try_send(());
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the config file; changes on disk apply on restart");
            return false;
        }
    };
    // Weir's own config directory may not exist yet on a fresh install (the settings API
    // creates the file on first save); made now so hand edits after that are seen too.
    if !dir.exists() {
        if let Err(e) = crate::paths::create_private_dir(dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot create the config directory");
        }
    }
    if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the config file's directory; changes on disk apply on restart");
        return false;
    }
    reloader.set_watching(true);
    tasks.spawn(async move {
        // Owned by the task: dropping it ends the OS watch.
        let _watcher = watcher;
        loop {
            tokio::select! {
                got = rx.recv() => if got.is_none() { return },
                _ = stop.changed() => return,
            }
            // Debounce: read once the burst is over.
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(DEBOUNCE) => break,
                    got = rx.recv() => if got.is_none() { return },
                    _ = stop.changed() => return,
                }
            }
            let r = reloader.clone();
            // File reads and validation block briefly: off the async workers.
            if let Err(e) = tokio::task::spawn_blocking(move || r.reload_file()).await {
                tracing::error!(error = %e, "config reload task failed");
            }
        }
    });
    true
}
