//! Where the metered override is kept between runs: `<data dir>/network.json`, 0600, replaced
//! atomically ([`crate::paths::write_private`]). Like `mode.json`, a file of its own: it must
//! survive a queue that cannot open, and following the OS again ("auto") is written as
//! `"forced": null` rather than by deleting the file, so the last choice and its author stay
//! visible.

use crate::view::ChosenBy;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("network.json")
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Saved {
    /// `true`/`false`: metered or not, whatever the OS says; `null`: follow the OS.
    pub forced: Option<bool>,
    pub by: ChosenBy,
    /// When it was chosen, unix milliseconds.
    pub chosen_at_ms: u64,
}

impl Saved {
    pub fn new(forced: Option<bool>, by: ChosenBy, at: SystemTime) -> Saved {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Saved {
            forced,
            by,
            chosen_at_ms: ms,
        }
    }
}

/// The saved override; `None` when there is none, or it cannot be read (logged: Weir then
/// follows the OS, which is the safe default).
pub(super) fn load(file: &Path) -> Option<Saved> {
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot read the metered override; following the OS");
            return None;
        }
    };
    match serde_json::from_slice(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "the metered override is not valid; following the OS");
            None
        }
    }
}

pub(super) fn save(file: &Path, saved: &Saved) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(saved).map_err(std::io::Error::other)?;
    crate::paths::write_private(file, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_file_means_follow_the_os() {
        let d = tempfile::tempdir().unwrap();
        let f = path(d.path());
        std::fs::write(&f, b"{\"forced\": \"sometimes\"}").unwrap();
        assert!(load(&f).is_none());
        save(
            &f,
            &Saved::new(Some(false), ChosenBy::Dashboard, UNIX_EPOCH),
        )
        .unwrap();
        let s = load(&f).unwrap();
        assert_eq!((s.forced, s.by), (Some(false), ChosenBy::Dashboard));
    }
}
