//! The watcher: one check ([`StatusWatcher::poll_once`]) and the background task that
//! repeats it on the schedule ([`StatusWatcher::spawn`] → [`StatusHandle`]).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{broadcast, oneshot, watch, Notify};
use tokio::task::JoinHandle;

use crate::config::StatusConfig;
use crate::diff::{diff, StatusEvent};
use crate::endpoint::{Endpoint, Freshness, PollError};
use crate::fetch::Fetch;
use crate::model::{GithubStatus, Reachability};
use crate::project::project;
use crate::schedule::next_delay;
use crate::wire;

/// Events kept for a slow subscriber before it starts missing some (`Lagged`).
const EVENT_CAPACITY: usize = 64;

/// What one check did, for tests and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollReport {
    pub events: Vec<StatusEvent>,
    /// How each document was obtained; `None` for a document not obtained.
    pub summary: Option<Freshness>,
    pub unresolved: Option<Freshness>,
    /// The error text when the check failed.
    pub error: Option<String>,
}

/// Owns the watcher's state; drive it with [`poll_once`](Self::poll_once) or hand it to a
/// task with [`start`](Self::start).
pub struct StatusWatcher {
    config: StatusConfig,
    fetch: Arc<dyn Fetch>,
    summary: Endpoint<wire::Summary>,
    unresolved: Endpoint<wire::Unresolved>,
    state: watch::Sender<GithubStatus>,
    events: broadcast::Sender<StatusEvent>,
    failures: u32,
}

impl StatusWatcher {
    pub fn new(config: StatusConfig, fetch: Arc<dyn Fetch>) -> Self {
        let (state, _) = watch::channel(GithubStatus::initial(config.base_url.clone()));
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        Self {
            summary: Endpoint::new(config.summary_url()),
            unresolved: Endpoint::new(config.unresolved_url()),
            config,
            fetch,
            state,
            events,
            failures: 0,
        }
    }

    /// Builds a watcher and starts its task; the first check runs at once.
    pub fn spawn(config: StatusConfig, fetch: Arc<dyn Fetch>) -> StatusHandle {
        Self::new(config, fetch).start()
    }

    pub fn snapshot(&self) -> GithubStatus {
        self.state.borrow().clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<StatusEvent> {
        self.events.subscribe()
    }

    /// Checks in a row that have failed (0 after a success); drives the backoff.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Fetches both documents once (the second only if the first got an HTTP answer), updates
    /// the snapshot and broadcasts the changes.
    pub async fn poll_once(&mut self) -> PollReport {
        let fetch = Arc::clone(&self.fetch);
        let timeout = self.config.request_timeout;
        // One after the other, each under its own timeout: online the second reuses the
        // first's connection (one name lookup a check); when the first got no HTTP answer
        // (offline, the page unreachable) the check fails whatever the second would say, so it
        // is not sent. Both at once, an offline check was two lookups on two blocking threads.
        let (summary, unresolved, docs) = match self.summary.get(fetch.as_ref(), timeout).await {
            Err(e) if e.got_no_answer() => (None, None, Err(e)),
            summary => {
                let unresolved = self.unresolved.get(fetch.as_ref(), timeout).await;
                let fresh = (
                    summary.as_ref().ok().map(|(_, f)| *f),
                    unresolved.as_ref().ok().map(|(_, f)| *f),
                );
                let docs = match (summary, unresolved) {
                    (Ok((summary, _)), Ok((unresolved, _))) => Ok((summary, unresolved)),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
                (fresh.0, fresh.1, docs)
            }
        };
        let now = SystemTime::now();
        let old = self.snapshot();
        let mut report = PollReport {
            events: Vec::new(),
            summary,
            unresolved,
            error: None,
        };

        let new = match docs {
            Ok((summary, unresolved)) => {
                self.failures = 0;
                let view = project(&summary, &unresolved, &self.config.components);
                GithubStatus {
                    reachability: Reachability::Ok,
                    stale: false,
                    checked_at: Some(now),
                    last_ok_at: Some(now),
                    error: None,
                    indicator: Some(view.indicator),
                    description: Some(view.description),
                    page_url: view
                        .page_url
                        .unwrap_or_else(|| self.config.base_url.clone()),
                    components: view.components,
                    incidents: view.incidents,
                }
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                let text = error_text(&e);
                tracing::debug!(error = %text, failures = self.failures, "status check failed");
                report.error = Some(text.clone());
                old.failed(text, now)
            }
        };

        report.events = diff(&old, &new);
        self.state.send_replace(new);
        for event in &report.events {
            // Nobody listening is fine: the snapshot still holds the state.
            if self.events.send(event.clone()).is_err() {
                break;
            }
        }
        report
    }

    /// Moves the watcher into a task that checks now, then on the schedule.
    pub fn start(self) -> StatusHandle {
        let state = self.state.subscribe();
        let events = self.events.clone();
        let refresh = Arc::new(Notify::new());
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(run(self, Arc::clone(&refresh), stop_rx));
        StatusHandle {
            state,
            events,
            refresh,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }
}

/// The error and its causes on one line, for the tray's tooltip.
fn error_text(e: &PollError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        // Display impls often already embed their source; do not say it twice.
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

async fn run(mut watcher: StatusWatcher, refresh: Arc<Notify>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            biased;
            // A send or a dropped handle both mean stop.
            _ = &mut stop => return,
            _ = watcher.poll_once() => {}
        }
        let delay = next_delay(&watcher.config, watcher.failures);
        tokio::select! {
            biased;
            _ = &mut stop => return,
            _ = refresh.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// The running watcher. Dropping it stops the task too.
pub struct StatusHandle {
    state: watch::Receiver<GithubStatus>,
    events: broadcast::Sender<StatusEvent>,
    refresh: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl StatusHandle {
    /// The current state, for the dashboard's JSON.
    pub fn snapshot(&self) -> GithubStatus {
        self.state.borrow().clone()
    }

    /// A receiver that wakes on every check (each one replaces the snapshot).
    pub fn watch(&self) -> watch::Receiver<GithubStatus> {
        self.state.clone()
    }

    /// Change events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<StatusEvent> {
        self.events.subscribe()
    }

    /// Asks for a check now instead of at the next scheduled time (the tray's "refresh").
    pub fn refresh(&self) {
        self.refresh.notify_one();
    }

    /// Stops the task and waits for it to end; an in-flight check is abandoned.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            if stop.send(()).is_err() {
                tracing::debug!("status watcher task had already ended");
            }
        }
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "status watcher task ended abnormally");
            }
        }
    }
}
