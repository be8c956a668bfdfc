//! [`EngineHandle`]: the one API over a running engine that the CLI, the tray and tests use
//! (typed status, events, mode, cache, restart, shutdown).

use super::{EngineError, EngineOptions};
use crate::config::Settings;
use crate::control::Control;
use crate::events::Event;
use crate::mode::{ChosenBy, Mode, ModeStatus};
use crate::status::StatusSnapshot;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

/// A running engine. Cheap to clone; [`EngineHandle::shutdown`] stops it.
#[derive(Clone)]
pub struct EngineHandle {
    pub(super) control: Arc<Control>,
    /// What this engine was started with (a restart starts from them).
    pub(super) options: Arc<EngineOptions>,
    pub(super) local_addr: SocketAddr,
    /// The gateway's admin listener, in gateway mode.
    pub(super) admin_addr: Option<SocketAddr>,
    pub(super) stop: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
    pub(super) task: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
    /// The data dir's lock ([`crate::paths::lock_dir`]): let go at the end of
    /// [`EngineHandle::shutdown`], once nothing of this engine writes the dir any more.
    pub(super) data_dir_lock: Arc<std::sync::Mutex<Option<crate::paths::DirLock>>>,
}

impl EngineHandle {
    /// The request path's state, for the crate's own tests (`pipeline::record`'s).
    #[cfg(test)]
    pub(crate) fn proxy(&self) -> &crate::pipeline::Proxy {
        &self.control.proxy
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The gateway's admin listener (gateway mode only).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> &str {
        &self.control.proxy.base_url
    }

    pub fn dashboard_url(&self) -> String {
        format!("{}/_weir/", self.base_url())
    }

    /// The whole status document, queue counts included (read from SQLite off the async
    /// workers), exactly as `/_weir/api/status` serves it.
    pub async fn status(&self) -> StatusSnapshot {
        crate::control::snapshot_full(&self.control).await
    }

    /// The status document without the queue counts and the keychain check (`queue.counts`
    /// is `null`): no SQLite or keychain read, so it is cheap enough to poll, and it never
    /// leaves the async runtime (tests on paused time rely on that).
    pub fn status_now(&self) -> StatusSnapshot {
        crate::control::snapshot(&self.control)
    }

    /// The sessions companion's part of the status, without the queue's database read (the
    /// tray's sessions line and submenu can read it as often as they like).
    pub fn sessions(&self) -> crate::status::SessionsStatus {
        self.control.sessions.status()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.control.proxy.bus.subscribe()
    }

    /// Local-agent hand-off offers (#14): make one ([`crate::handoff::Handoffs::offer`]; the
    /// policy phase does this for creates whose action is `local`), list, confirm, decline.
    /// The tray confirms and declines through it.
    pub fn handoffs(&self) -> &crate::handoff::Handoffs {
        &self.control.proxy.handoffs
    }

    /// The network as fallback policy sees it (metered or not): `.status()` is the tray's
    /// "Network:" line (changes are announced as [`Event::Network`]); the tray's toggle calls
    /// [`EngineHandle::set_network_metered`] (kept across restarts; `force` is in memory only).
    pub fn network(&self) -> Arc<crate::network::Network> {
        self.control.proxy.network.clone()
    }

    /// The mode (automatic, offline, cache only, pass-through), who chose it and why.
    pub fn mode(&self) -> ModeStatus {
        self.control.proxy.modes.status()
    }

    /// Chooses a mode: applied at once, kept across restarts, announced as
    /// [`Event::ModeChanged`].
    pub fn set_mode(&self, mode: Mode, by: ChosenBy) -> ModeStatus {
        self.control.proxy.modes.choose(mode, by)
    }

    /// The metered override: `Some(true)`/`Some(false)` force it, `None` follows the OS again;
    /// kept across restarts (the tray's toggle passes [`ChosenBy::Tray`]).
    pub fn set_network_metered(
        &self,
        metered: Option<bool>,
        by: ChosenBy,
    ) -> crate::network::NetworkStatus {
        self.control.proxy.network.choose(metered, by)
    }

    /// Whether the mode is pass-through (its old name was "pause").
    pub fn is_paused(&self) -> bool {
        self.control.proxy.is_paused()
    }

    /// The tray's old pause switch: `true` chooses pass-through, `false` goes from
    /// pass-through back to automatic. New code calls [`EngineHandle::set_mode`].
    pub fn set_paused(&self, paused: bool) {
        self.control.proxy.set_paused(paused, ChosenBy::Tray);
    }

    /// This install's id, as `/_weir/api/health` answers it.
    pub fn install_id(&self) -> &str {
        &self.control.install_id
    }

    /// The secret mutating control calls need (`X-Weir-Secret`).
    pub fn control_secret(&self) -> &str {
        &self.control.secret
    }

    /// The dashboard URL with the control secret in its fragment (never sent to a server;
    /// the page keeps it in session storage).
    pub fn dashboard_url_with_secret(&self) -> String {
        format!("{}#secret={}", self.dashboard_url(), self.control.secret)
    }

    /// The TLS interceptor, when CONNECTs to managed https upstreams are TLS-terminated.
    pub fn interceptor(&self) -> Option<&crate::intercept::Interceptor> {
        self.control.proxy.intercept.as_deref()
    }

    /// The GitHub Status watcher's current view, when it runs.
    pub fn github_status(&self) -> Option<weir_status::GithubStatus> {
        self.control.github_snapshot()
    }

    /// Asks the GitHub Status watcher to check now (the tray's refresh).
    pub fn refresh_github_status(&self) {
        if let Some(w) = self
            .control
            .github
            .lock()
            .ok()
            .as_ref()
            .and_then(|g| g.as_ref())
        {
            w.refresh();
        }
    }

    /// The tools still pointed at this Weir (proxy variables of this process's environment,
    /// VS Code, git, the desktop's PAC URL), for the tray's warning on quit. Blocking (it
    /// reads files and runs `git`/`gsettings`): call it from `spawn_blocking`.
    pub fn pointed_tools(&self) -> Vec<crate::client_setup::PointedTool> {
        let mut settings = (*self.settings()).clone();
        // The address clients were given is the one actually bound (`:0` in a config means
        // "any free port").
        settings.listen = self.local_addr;
        let install = crate::client_setup::Install::new(settings, self.options.data_dir.clone());
        crate::client_setup::pointed_at_weir(
            &install,
            &crate::client_setup::Sources::for_this_user(),
        )
    }

    /// The settings in force now (they change while running: `crate::reload`).
    pub fn settings(&self) -> Arc<Settings> {
        self.control.proxy.settings()
    }

    /// What a restart would start with: the config file as it is now, keeping this engine's
    /// listening address and data dir unless the file changed them (so a `--listen` or
    /// `--data-dir` given at launch still holds), its control secret and its local CA.
    pub fn restart_options(&self) -> Result<EngineOptions, EngineError> {
        let mut opts = (*self.options).clone();
        let pending = self.control.reload.status().restart_required;
        if let Some(file) = opts.config_file.as_ref().filter(|f| f.exists()) {
            opts.settings = crate::config::load_file(file)?;
        } else {
            opts.settings = (*self.settings()).clone();
        }
        if !pending.contains(&crate::config::RestartKey::Listen) {
            opts.settings.listen = self.local_addr;
        }
        if pending.contains(&crate::config::RestartKey::DataDir) {
            if let Some(d) = opts.settings.data_dir.clone() {
                opts.data_dir = d;
            }
        }
        opts.control_secret = Some(self.control.secret.clone());
        Ok(opts)
    }

    /// **Restart engine** (the tray's menu item when `status.settings.restart_required` is
    /// not empty): reads [`EngineHandle::restart_options`] first, so a bad config file leaves
    /// this engine running ([`EngineError::Config`]); then stops this engine (drained) and
    /// starts a new one, paused if this one was. Use the returned handle from then on (and
    /// subscribe to its events again). If the new one cannot start, this one is already
    /// stopped: show the error and offer to start again.
    pub async fn restart(&self) -> Result<EngineHandle, EngineError> {
        let mut opts = self.restart_options()?;
        if opts.local_ca.is_some() {
            // The CA's name constraints follow the managed hosts, which may have changed.
            let (s, d) = (opts.settings.clone(), opts.data_dir.clone());
            if let Ok(ca) = tokio::task::spawn_blocking(move || {
                crate::intercept::ca_store::load_local_ca(&s, &d)
            })
            .await
            {
                opts.local_ca = ca;
            }
        }
        let paused = self.is_paused();
        self.shutdown().await;
        let new = super::start(opts).await?;
        new.set_paused(paused);
        Ok(new)
    }

    /// Empties the cache in memory and on disk (the tray's "Clear cache"); the number of
    /// entries that were in memory.
    pub async fn clear_cache(&self) -> Result<u64, crate::ClearError> {
        let cache = &self.control.proxy.cache;
        let before = cache.entry_count();
        cache.clear().await.map(|()| before)
    }

    /// Waits until every cache entry handed to the disk writer so far is on disk (tests and
    /// benchmarks; `shutdown` does this by itself).
    pub async fn flush_cache(&self) {
        self.control.proxy.cache.flush(false).await;
    }

    /// Stops accepting, drains in-flight requests (bounded by `limits.drain_timeout`), returns
    /// when done. Calling it twice is harmless.
    pub async fn shutdown(&self) {
        self.control.proxy.bus.stop();
        let watcher = self.control.github.lock().ok().and_then(|mut g| g.take());
        if let Some(w) = watcher {
            w.stop().await;
        }
        if let Some(tx) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
        // Entries stored by the last requests reach the disk before the engine is gone.
        self.control.proxy.cache.flush(true).await;
        crate::upstream::baselines::save(&self.control.proxy.upstreams, &self.options.data_dir);
        // Every task this engine spawned has been told to stop (`bus.stop`); wait for them,
        // but no longer than the drain allows (a local agent's command may still run).
        let tasks = self.control.proxy.bus.tasks();
        tasks.close();
        let drain = self.settings().limits.drain_timeout;
        if tokio::time::timeout(drain, tasks.wait()).await.is_err() {
            tracing::warn!(
                left = tasks.len(),
                "some background tasks did not stop within the drain timeout"
            );
        }
        // The dir is free for the next engine (a restart in this process, or another Weir).
        if let Ok(mut lock) = self.data_dir_lock.lock() {
            lock.take();
        }
    }

    /// How many of this engine's tracked tasks are still running (0 after
    /// [`EngineHandle::shutdown`] unless the drain timeout cut it short).
    pub fn running_tasks(&self) -> usize {
        self.control.proxy.bus.tasks().len()
    }
}
