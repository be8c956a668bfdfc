//! Events the engine emits for the tray, notifications and the dashboard's live stream
//! (`/_weir/api/events`, server-sent events with `event: <type>`).

use serde::Serialize;
use std::time::SystemTime;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Pause toggled: while paused everything passes through untouched.
    Paused {
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        paused: bool,
    },
    /// A circuit breaker changed state (`closed`, `open`, `half_open`).
    Breaker {
        upstream: String,
        from: String,
        to: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        reason: String,
    },
    /// A queued create changed state (`queued`, `replaying`, `in_doubt`, `done`, `failed`,
    /// `cancelled`, `expired`).
    Queue {
        id: i64,
        upstream: String,
        state: String,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        detail: String,
    },
    /// A watched GitHub Status change: `incident_opened`, `incident_updated`,
    /// `incident_resolved`, `component_changed`, `reachability_changed`.
    Github {
        change: String,
        title: String,
        url: Option<String>,
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
    },
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::Paused { .. } => "paused",
            Event::Breaker { .. } => "breaker",
            Event::Queue { .. } => "queue",
            Event::Github { .. } => "github",
        }
    }
}
