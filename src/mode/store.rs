//! Where the chosen mode is kept between runs: `<data dir>/mode.json`, 0600, replaced
//! atomically ([`crate::paths::write_private`]). A file rather than a table in the queue's
//! SQLite: the mode must persist even when the queue cannot open (no keychain, a broken
//! database), and it is not the queue's data.

use super::{ChosenBy, Mode};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("mode.json")
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Saved {
    pub mode: Mode,
    pub by: ChosenBy,
    /// When it was chosen, unix milliseconds.
    pub chosen_at_ms: u64,
}

impl Saved {
    pub fn new(mode: Mode, by: ChosenBy, at: SystemTime) -> Saved {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Saved {
            mode,
            by,
            chosen_at_ms: ms,
        }
    }

    pub fn chosen_at(&self) -> SystemTime {
        UNIX_EPOCH
            .checked_add(Duration::from_millis(self.chosen_at_ms))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// The saved choice; `None` when there is none, or it cannot be read (logged).
pub(super) fn load(file: &Path) -> Option<Saved> {
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot read the saved mode; starting in automatic");
            return None;
        }
    };
    match serde_json::from_slice(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "the saved mode is not valid; starting in automatic");
            None
        }
    }
}

pub(super) fn save(file: &Path, saved: &Saved) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(saved).map_err(std::io::Error::other)?;
    crate::paths::write_private(file, &body)
}
