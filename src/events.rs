//! Events the engine emits for the tray, notifications and the dashboard's live stream.

use serde::Serialize;
use std::time::SystemTime;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Paused {
        #[serde(with = "crate::time_fmt")]
        at: SystemTime,
        paused: bool,
    },
}
