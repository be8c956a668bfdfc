//! Weir's mode: what it does with requests to managed upstreams.
//!
//! - **automatic** (the default): the full request path (cache, coalescing, retries, breaker,
//!   queue). Its sub-state **offline** is entered by itself when every managed upstream is
//!   unreachable at the network level, and left by itself on a successful probe
//!   (`offline`); meanwhile Weir acts as in cache only.
//! - **cache only**: answers from the cache (any entry it still holds, stale ones marked),
//!   queues creates (202), and sends nothing upstream: no fetches, no revalidations, no
//!   replays. The one exception is a `token`-class GET with no usable cached token: a cached
//!   answer is no use to a tool that cannot get a token to ask with, so that fetch goes out.
//! - **pass-through** (formerly "pause"): everything passes untouched.
//!
//! The user's choice persists in `<data dir>/mode.json` (`store`); offline never does (it is
//! found again, or not, after a restart).

mod offline;
mod store;

pub(crate) use offline::spawn_detector;

use crate::events::{Bus, Event};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::watch;

/// The mode a user chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Automatic,
    CacheOnly,
    PassThrough,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Automatic, Mode::CacheOnly, Mode::PassThrough];

    /// `automatic`, `cache-only`, `pass-through` (the CLI's spelling; `_` is accepted too).
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "automatic" | "auto" => Some(Mode::Automatic),
            "cache-only" => Some(Mode::CacheOnly),
            "pass-through" | "passthrough" => Some(Mode::PassThrough),
            _ => None,
        }
    }

    /// The CLI's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Automatic => "automatic",
            Mode::CacheOnly => "cache-only",
            Mode::PassThrough => "pass-through",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::view::{ChosenBy, ModeKind};

impl From<Mode> for ModeKind {
    fn from(m: Mode) -> ModeKind {
        match m {
            Mode::Automatic => ModeKind::Automatic,
            Mode::CacheOnly => ModeKind::CacheOnly,
            Mode::PassThrough => ModeKind::PassThrough,
        }
    }
}

/// How a mode's reason names who chose it.
fn chosen_phrase(by: ChosenBy) -> &'static str {
    match by {
        ChosenBy::Default => "the default",
        ChosenBy::Dashboard => "chosen in the dashboard",
        ChosenBy::Cli => "chosen with `weir mode`",
        ChosenBy::Tray => "chosen in the tray",
        ChosenBy::Api => "chosen through the control API",
    }
}

/// `mode` in the status document: what Weir does and why.
#[derive(Debug, Clone, Serialize)]
pub struct ModeStatus {
    /// What Weir does now.
    pub mode: ModeKind,
    /// What the user chose (`automatic` while offline).
    pub chosen: Mode,
    pub chosen_by: ChosenBy,
    /// One sentence: why Weir is in this mode.
    pub reason: String,
    /// When the current mode (`mode`) began.
    pub since: String,
    /// Set while automatic is offline.
    pub offline: Option<OfflineStatus>,
    /// Why the choice could not be saved for the next start, if it could not.
    pub persist_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OfflineStatus {
    pub since: String,
    /// What the upstreams answered when Weir went offline.
    pub cause: String,
    /// Probes sent since (all failed, or Weir would not be offline).
    pub probes: u64,
}

/// What the request path and the replayer do, read on every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    Normal,
    /// No upstream calls (except a token fetch with no usable cached token): cache only, or
    /// offline.
    Hold(Hold),
    PassThrough,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    CacheOnly,
    Offline,
    /// A `[[policy]]` rule says `list = "cache"` for this one request (e.g. on a metered
    /// network); never a mode of its own.
    Policy,
}

impl Hold {
    /// `Cache-Status` detail and problem kind for this hold.
    pub fn detail(self) -> &'static str {
        match self {
            Hold::CacheOnly => "cache_only",
            Hold::Offline => "offline",
            Hold::Policy => "policy",
        }
    }
}

struct Offline {
    since: SystemTime,
    cause: String,
    probes: u64,
}

struct Inner {
    chosen: Mode,
    by: ChosenBy,
    chosen_at: SystemTime,
    /// The choice was read from `mode.json` at start.
    restored: bool,
    offline: Option<Offline>,
    /// When the current effective mode began.
    since: SystemTime,
    persist_error: Option<String>,
}

impl Inner {
    fn kind(&self) -> ModeKind {
        match (self.chosen, &self.offline) {
            (Mode::Automatic, Some(_)) => ModeKind::Offline,
            (m, _) => m.into(),
        }
    }

    fn behaviour(&self) -> Behaviour {
        match self.kind() {
            ModeKind::Automatic => Behaviour::Normal,
            ModeKind::Offline => Behaviour::Hold(Hold::Offline),
            ModeKind::CacheOnly => Behaviour::Hold(Hold::CacheOnly),
            ModeKind::PassThrough => Behaviour::PassThrough,
        }
    }

    fn reason(&self) -> String {
        if let Some(o) = &self.offline {
            return format!(
                "offline since {} because every managed upstream is unreachable: {}; probing with backoff",
                crate::time_fmt::rfc3339(o.since),
                o.cause
            );
        }
        let mut r = chosen_phrase(self.by).to_string();
        if self.by != ChosenBy::Default {
            r.push_str(&format!(" at {}", crate::time_fmt::rfc3339(self.chosen_at)));
        }
        if self.restored {
            r.push_str(" (kept across a restart)");
        }
        r
    }
}

/// The engine's mode: the user's choice, the offline sub-state, and where the choice is saved.
pub(crate) struct Modes {
    inner: Mutex<Inner>,
    behaviour: watch::Sender<Behaviour>,
    file: Option<PathBuf>,
    bus: Bus,
}

impl Modes {
    /// Reads the saved choice from `<data_dir>/mode.json` (automatic when there is none or it
    /// cannot be read; an unreadable file is logged, never fatal).
    pub fn load(data_dir: Option<&std::path::Path>, bus: Bus) -> Modes {
        let file = data_dir.map(store::path);
        let saved = file.as_deref().and_then(store::load);
        let now = SystemTime::now();
        let inner = match saved {
            Some(s) => Inner {
                chosen: s.mode,
                by: s.by,
                chosen_at: s.chosen_at(),
                restored: true,
                offline: None,
                since: now,
                persist_error: None,
            },
            None => Inner {
                chosen: Mode::Automatic,
                by: ChosenBy::Default,
                chosen_at: now,
                restored: false,
                offline: None,
                since: now,
                persist_error: None,
            },
        };
        if inner.chosen != Mode::Automatic {
            tracing::warn!(mode = %inner.chosen, "starting in the mode chosen before the restart");
        }
        Modes {
            behaviour: watch::channel(inner.behaviour()).0,
            inner: Mutex::new(inner),
            file,
            bus,
        }
    }

    /// What the request path does now (one read of a watch value per request).
    pub fn behaviour(&self) -> Behaviour {
        *self.behaviour.borrow()
    }

    /// Follows [`Modes::behaviour`] (the replayer holds while it is [`Behaviour::Hold`]).
    pub fn watch(&self) -> watch::Receiver<Behaviour> {
        self.behaviour.subscribe()
    }

    pub fn chosen(&self) -> Mode {
        self.lock().chosen
    }

    pub fn status(&self) -> ModeStatus {
        let i = self.lock();
        ModeStatus {
            mode: i.kind(),
            chosen: i.chosen,
            chosen_by: i.by,
            reason: i.reason(),
            since: crate::time_fmt::rfc3339(i.since),
            offline: i.offline.as_ref().map(|o| OfflineStatus {
                since: crate::time_fmt::rfc3339(o.since),
                cause: o.cause.clone(),
                probes: o.probes,
            }),
            persist_error: i.persist_error.clone(),
        }
    }

    /// The user's choice: applied at once, saved for the next start. Choosing any mode ends
    /// offline (choosing automatic again lets the detector find it again if it still holds).
    pub fn choose(&self, mode: Mode, by: ChosenBy) -> ModeStatus {
        let now = SystemTime::now();
        let save = store::Saved::new(mode, by, now);
        // A few hundred bytes, written on a user's click: a synchronous write is fine here
        // and keeps the tray's synchronous `set_paused` working.
        let persist_error = match &self.file {
            Some(f) => store::save(f, &save).err().map(|e| {
                tracing::warn!(file = %f.display(), error = %e, "cannot save the chosen mode; it applies until Weir stops");
                format!("cannot save {}: {e}", f.display())
            }),
            None => None,
        };
        self.change(|i| {
            i.chosen = mode;
            i.by = by;
            i.chosen_at = now;
            i.restored = false;
            i.offline = None;
            i.persist_error = persist_error;
        });
        self.status()
    }

    /// Automatic found every upstream unreachable. No effect outside automatic.
    pub fn enter_offline(&self, cause: String) -> bool {
        self.change(|i| {
            if i.chosen == Mode::Automatic && i.offline.is_none() {
                i.offline = Some(Offline {
                    since: SystemTime::now(),
                    cause,
                    probes: 0,
                });
            }
        })
    }

    /// A probe reached an upstream.
    pub fn leave_offline(&self) -> bool {
        self.change(|i| i.offline = None)
    }

    pub fn is_offline(&self) -> bool {
        self.lock().offline.is_some()
    }

    pub fn count_probe(&self) {
        if let Some(o) = self.lock().offline.as_mut() {
            o.probes += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few plain fields, consistent after any panic: take it back.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f`; when the effective mode changed, updates the watch and emits the events.
    /// Returns whether it changed.
    fn change(&self, f: impl FnOnce(&mut Inner)) -> bool {
        let (from, to, reason) = {
            let mut i = self.lock();
            let from = i.kind();
            f(&mut i);
            let to = i.kind();
            if from != to {
                i.since = SystemTime::now();
            }
            self.behaviour.send_replace(i.behaviour());
            (from, to, i.reason())
        };
        if from == to {
            return false;
        }
        tracing::warn!(%reason, from = ?from, to = ?to, "mode changed");
        let at = SystemTime::now();
        self.bus.emit(Event::ModeChanged {
            from,
            to,
            reason,
            at,
        });
        // The old pause event, for consumers that only know pause.
        if (from == ModeKind::PassThrough) != (to == ModeKind::PassThrough) {
            self.bus.emit(Event::Paused {
                at,
                paused: to == ModeKind::PassThrough,
            });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_in_both_spellings() {
        for k in ModeKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(Mode::parse(json.trim_matches('"')), Some(m));
        }
        assert_eq!(Mode::parse("offline"), None);
    }

    #[tokio::test]
    async fn a_choice_survives_a_restart_and_offline_does_not() {
        let d = tempfile::tempdir().unwrap();
        let m = Modes::load(Some(d.path()), Bus::new());
        assert_eq!(m.status().mode, ModeKind::Automatic);
        assert!(m.enter_offline("up0: refused".into()));
        assert_eq!(m.behaviour(), Behaviour::Hold(Hold::Offline));
        m.choose(Mode::CacheOnly, ChosenBy::Cli);
        assert_eq!(m.behaviour(), Behaviour::Hold(Hold::CacheOnly));
        // Offline only exists inside automatic.
        assert!(!m.enter_offline("again".into()));
        let again = Modes::load(Some(d.path()), Bus::new());
        let s = again.status();
        assert_eq!((s.mode, s.chosen_by), (ModeKind::CacheOnly, ChosenBy::Cli));
        assert!(s.reason.contains("kept across a restart"), "{}", s.reason);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(store::path(d.path())).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
    }

    #[tokio::test]
    async fn changes_are_events_and_pass_through_is_still_pause() {
        let bus = Bus::new();
        let mut rx = bus.subscribe();
        let m = Modes::load(None, bus);
        m.choose(Mode::PassThrough, ChosenBy::Tray);
        let Event::ModeChanged { from, to, .. } = rx.recv().await.unwrap() else {
            panic!("expected mode_changed first")
        };
        assert_eq!((from, to), (ModeKind::Automatic, ModeKind::PassThrough));
        assert!(matches!(
            rx.recv().await.unwrap(),
            Event::Paused { paused: true, .. }
        ));
        // Choosing the same mode again changes nothing and says nothing.
        m.choose(Mode::PassThrough, ChosenBy::Tray);
        assert!(rx.try_recv().is_err());
    }
}
