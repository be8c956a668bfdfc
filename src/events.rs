//! Events the engine emits for the tray, notifications and the dashboard's live stream
//! (`/_weir/api/events`, server-sent events with `event: <type>`).

use serde::Serialize;
use std::time::SystemTime;
use tokio::sync::{broadcast, watch};

pub use crate::view::SettingsSource;
use crate::view::{MeteredSource, ModeKind, SessionSummary, SettingsError};
pub use weir_resilience::BreakerReason;
pub use weir_resilience::State as BreakerState;
pub use weir_store::State as QueueState;

/// What changed on GitHub Status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GithubChange {
    IncidentOpened,
    IncidentUpdated,
    IncidentResolved,
    ComponentChanged,
    ReachabilityChanged,
}

impl GithubChange {
    /// An incident opened, changed or ended (component and reachability changes are not).
    pub fn is_incident(self) -> bool {
        matches!(
            self,
            GithubChange::IncidentOpened
                | GithubChange::IncidentUpdated
                | GithubChange::IncidentResolved
        )
    }
}

/// What changed in team signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TeamChange {
    Connected,
    Disconnected,
    /// K teammates report an upstream failing: this Weir became cautious or opened.
    Acting,
    /// Fewer than K do now: caution cleared.
    Released,
    /// Local calls succeed: this Weir ignores the teammates' reports.
    Overruled,
}

/// A model fallback episode began (the first request re-sent with the fallback model) or
/// ended (the model answered again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFallbackChange {
    Started,
    Ended,
}

/// What happened to an agent session between two polls of the sessions companion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionChange {
    /// Ended with nothing to review (completed without a pull request, or cancelled).
    Finished,
    /// Failed or timed out.
    Failed,
    /// The agent is done and its pull request waits for review, or it waits for you.
    NeedsReview,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The mode changed (chosen by the user, or automatic went offline or back): `to` is
    /// what Weir does now, `reason` says why in one sentence.
    ModeChanged {
        from: ModeKind,
        to: ModeKind,
        reason: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
    /// Whether the network counts as metered changed (the OS's report, or the override):
    /// `to` is the answer policy uses now, `source` where it comes from, `reason` one line.
    Network {
        from: bool,
        to: bool,
        source: MeteredSource,
        reason: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
    /// Pass-through mode entered or left (the old name of pass-through was "pause"; sent
    /// after the [`Event::ModeChanged`] that carries the same change).
    Paused {
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        paused: bool,
    },
    /// A circuit breaker changed state.
    Breaker {
        upstream: String,
        from: BreakerState,
        to: BreakerState,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        /// The kind of transition (match the variant, never the words); serialised as the
        /// sentence it displays.
        reason: BreakerReason,
    },
    /// A queued create changed state.
    Queue {
        id: i64,
        upstream: String,
        state: QueueState,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        detail: String,
    },
    /// Team signals: the NATS link changed, or teammates' reports started or stopped moving
    /// this Weir's breaker for an upstream.
    Team {
        change: TeamChange,
        upstream: Option<String>,
        peers_failing: usize,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        message: String,
    },
    /// A watched GitHub Status change.
    Github {
        change: GithubChange,
        title: String,
        url: Option<String>,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
    /// New settings are in force (on the next request). `restart_required` names the changed
    /// settings that keep their old value until the engine restarts.
    SettingsApplied {
        source: SettingsSource,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        restart_required: Vec<crate::config::RestartKey>,
    },
    /// A changed config file was refused; the settings in force are unchanged.
    SettingsRejected {
        source: SettingsSource,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        error: SettingsError,
    },
    /// An agent session of the stored token's account finished, failed or needs review
    /// (seen as a state change between two polls; never for the sessions of the first poll).
    /// The live event stream (`/_weir/api/events`, no secret) carries only `change`, `id` and
    /// `at`: the title and repository are private and come from `/_weir/api/sessions`.
    Session {
        change: SessionChange,
        session: SessionSummary,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
    /// A create was offered to the local agent, or its offer was answered or ended (#14).
    /// The live event stream (no secret) carries only `change`, `id` and `at`: the
    /// repository and problem statement are private (`/_weir/api/handoffs` has them).
    Handoff {
        change: HandoffChange,
        /// The offer's id (the create's queue item id).
        id: i64,
        repo: String,
        rule: String,
        /// The problem statement's first characters.
        excerpt: String,
        /// One sentence: what happened (exit status, where the create went).
        detail: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
    /// Model fallback (`[[model_fallback]]`): once when an episode starts, once when it ends;
    /// `message` is the notification text. Never about agent sessions.
    ModelFallback {
        change: ModelFallbackChange,
        upstream: String,
        from: String,
        to: String,
        /// Fallbacks in the episode (1 when it starts).
        fallbacks: u64,
        reason: String,
        message: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
}

/// What happened to a local-agent hand-off offer (#14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffChange {
    /// A create was offered to the local agent: show a notification with **Confirm**.
    Offered,
    /// The developer confirmed; the command started (once).
    Started,
    /// The command ended (`detail` has the exit status).
    Finished,
    /// The developer declined: the create went back to the queue (or, for an offer made by
    /// hand, was withdrawn).
    Declined,
    /// Nobody answered within `local_agent.offer_ttl`: back to the queue, as for declined.
    Expired,
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::ModeChanged { .. } => "mode_changed",
            Event::Network { .. } => "network",
            Event::SettingsApplied { .. } => "settings_applied",
            Event::SettingsRejected { .. } => "settings_rejected",
            Event::Paused { .. } => "paused",
            Event::Breaker { .. } => "breaker",
            Event::Queue { .. } => "queue",
            Event::Github { .. } => "github",
            Event::Team { .. } => "team",
            Event::Session { .. } => "session",
            Event::Handoff { .. } => "handoff",
            Event::ModelFallback { .. } => "model_fallback",
        }
    }
}

/// Forwards a component's own event stream (breaker, status watcher) into the engine's, mapped
/// by `map`, until the engine stops or the source closes. A lagging source just skips ahead.
pub(crate) fn forward<T, F>(mut source: broadcast::Receiver<T>, bus: &Bus, map: F)
where
    T: Clone + Send + 'static,
    F: Fn(T) -> Event + Send + 'static,
{
    let bus = bus.clone();
    let mut stop = bus.stopping();
    bus.clone().spawn(async move {
        loop {
            let ev = tokio::select! {
                ev = source.recv() => ev,
                _ = stop.changed() => return,
            };
            match ev {
                Ok(e) => bus.emit(map(e)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// The engine's event stream, its stop signal and its task tracker, shared by every part that
/// emits events or runs a long-lived task.
#[derive(Clone)]
pub(crate) struct Bus {
    events: broadcast::Sender<Event>,
    stopping: watch::Sender<bool>,
    /// Every background task of this engine ([`Bus::spawn`]): shutdown waits for all of them.
    tasks: tokio_util::task::TaskTracker,
}

impl Bus {
    pub fn new() -> Bus {
        Bus {
            events: broadcast::channel(256).0,
            stopping: watch::channel(false).0,
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Spawns one of this engine's tasks, tracked: [`Bus::stop`] asks it to end and the
    /// engine's shutdown waits for it (bounded by `limits.drain_timeout`).
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// The tracker itself, for shutdown (close, wait) and for counting what still runs.
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    pub fn emit(&self, e: Event) {
        // No receivers is normal (headless, nobody watching).
        let _ = self.events.send(e);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Flips to `true` when shutdown starts, so long-lived tasks and streams end.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        let mut rx = self.stopping.subscribe();
        // A task first polled after the stop subscribes late: its `changed()` must still
        // fire, or it would wait for a second stop that never comes (and hold up shutdown).
        if *rx.borrow() {
            rx.mark_changed();
        }
        rx
    }

    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }
}
