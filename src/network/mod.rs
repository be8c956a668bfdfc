//! The network this machine is on, as fallback policy sees it: metered or not.
//!
//! Two sources, the forced one winning: what the OS says (NetworkManager's `Metered` property
//! on Linux, `linux`; each OS's own API elsewhere, `os`), and a developer's override (the
//! tray toggle, the dashboard, `weir network metered on|off|auto`, the control API), kept in
//! `<data dir>/network.json` (`store`). Read once per request by the policy phase, so the
//! answer is two atomics, no lock; the rest (why, since when) sits behind a mutex that only
//! writers and status readers take.

mod os;
mod store;

// The OS readers are the `metered` feature (their D-Bus / Network.framework / WinRT crates).
#[cfg(all(feature = "metered", target_os = "linux"))]
mod appears;
#[cfg(all(feature = "metered", target_os = "linux"))]
mod linux;
#[cfg(all(feature = "metered", target_os = "macos"))]
mod macos;
#[cfg(all(feature = "metered", target_os = "windows"))]
mod windows;

pub(crate) use os::spawn_watcher;

use crate::events::{Bus, Event};
use crate::view::ChosenBy;
pub use crate::view::MeteredSource;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::SystemTime;

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

fn to_u8(v: Option<bool>) -> u8 {
    match v {
        None => UNKNOWN,
        Some(true) => YES,
        Some(false) => NO,
    }
}

fn from_u8(v: u8) -> Option<bool> {
    match v {
        YES => Some(true),
        NO => Some(false),
        _ => None,
    }
}

/// Whether the network is metered, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeteredState {
    /// What the OS reports (`None`: unknown, or no OS API on this platform).
    pub os: Option<bool>,
    /// The developer's override (`None`: follow the OS).
    pub forced: Option<bool>,
    /// The answer policy uses: the override, else the OS, else not metered.
    pub metered: bool,
}

impl MeteredState {
    /// Which of the two sources gave [`MeteredState::metered`].
    pub fn source(&self) -> MeteredSource {
        match (self.forced, self.os) {
            (Some(_), _) => MeteredSource::Forced,
            (None, Some(_)) => MeteredSource::Os,
            (None, None) => MeteredSource::Default,
        }
    }
}

/// What the OS watcher knows (`network.os_watch` in the status document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OsWatch {
    /// `[network] detect_os = false`: the OS is not asked.
    Off,
    /// The watcher has not answered yet.
    Starting,
    /// The OS API answers; `value` is its own word for the state (NetworkManager:
    /// `unknown`, `yes`, `no`, `guess-yes`, `guess-no`).
    Watching { api: String, value: String },
    /// The system message bus cannot be reached (containers, minimal systems).
    NoBus { address: String, error: String },
    /// The bus is there but the network service is not (NetworkManager not running).
    NoService { service: String, error: String },
    /// The OS API answered with an error (Windows: reading the connection cost failed).
    Failed { api: String, error: String },
    /// This platform's API is not wired up yet; `api` names the one to use.
    Unsupported { platform: String, api: String },
    /// This Weir was built without the OS readers (the `metered` cargo feature).
    NotBuilt { feature: String },
}

impl OsWatch {
    /// A short phrase for the status line: where the OS value comes from, or why there is none.
    pub fn phrase(&self) -> String {
        match self {
            OsWatch::Off => "OS detection is off ([network] detect_os = false)".into(),
            OsWatch::Starting => "no OS information yet (the watcher is starting)".into(),
            OsWatch::Watching { api, value } => format!("{api} says Metered = {value}"),
            OsWatch::NoBus { address, .. } => {
                format!("no OS information: no system bus at {address}")
            }
            OsWatch::NoService { service, .. } => {
                format!("no OS information: {service} is not running")
            }
            OsWatch::Failed { api, error } => {
                format!("no OS information: {api} failed ({error})")
            }
            OsWatch::Unsupported { platform, api } => format!(
                "no OS information yet on this platform ({platform}; {api} is not wired up)"
            ),
            OsWatch::NotBuilt { feature } => {
                format!("no OS information: this Weir was built without the `{feature}` feature")
            }
        }
    }
}

/// `network` in the status document, `GET /_weir/api/network`, [`crate::EngineHandle::network`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStatus {
    #[serde(flatten)]
    pub state: MeteredState,
    pub source: MeteredSource,
    /// Who set the override (`None` while following the OS).
    pub forced_by: Option<ChosenBy>,
    /// What the OS watcher knows.
    pub os_watch: OsWatch,
    /// The short line for the tray and the dashboard: "metered (forced)", "not metered (OS)",
    /// "not metered (no OS information)".
    pub label: String,
    /// Why, for people: "forced in the tray; NetworkManager says Metered = no", "no OS
    /// information: no system bus at unix:path=…".
    pub reason: String,
    /// When the effective answer last changed (or the engine started).
    pub since: String,
    /// Why the override could not be kept for the next start, if it could not.
    pub persist_error: Option<String>,
}

struct Inner {
    forced_by: Option<ChosenBy>,
    os_watch: OsWatch,
    since: SystemTime,
    persist_error: Option<String>,
}

/// The shared view of the network (one per engine).
pub struct Network {
    os: AtomicU8,
    forced: AtomicU8,
    inner: Mutex<Inner>,
    /// `<data dir>/network.json`; `None`: the override is not kept (tests, `Default`).
    file: Option<PathBuf>,
    bus: Option<Bus>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Default for Network {
    /// Not metered, no override, nothing kept, no events.
    fn default() -> Network {
        Network {
            os: AtomicU8::new(UNKNOWN),
            forced: AtomicU8::new(UNKNOWN),
            inner: Mutex::new(Inner {
                forced_by: None,
                os_watch: OsWatch::Starting,
                since: SystemTime::now(),
                persist_error: None,
            }),
            file: None,
            bus: None,
        }
    }
}

impl Network {
    /// The engine's network: the override kept in `data_dir` (if any) restored, changes of the
    /// effective answer announced on `bus` as [`Event::Network`].
    pub(crate) fn load(data_dir: Option<&Path>, bus: Bus, detect_os: bool) -> Network {
        let n = Network {
            file: data_dir.map(store::path),
            bus: Some(bus),
            ..Network::default()
        };
        if let Some(saved) = n.file.as_deref().and_then(store::load) {
            n.forced.store(to_u8(saved.forced), Relaxed);
            n.lock().forced_by = saved.forced.map(|_| saved.by);
        }
        if !detect_os {
            n.lock().os_watch = OsWatch::Off;
        }
        n
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it cannot leave it half-written (plain assignments).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Metered, as policy sees it now.
    pub fn metered(&self) -> bool {
        self.state().metered
    }

    pub fn state(&self) -> MeteredState {
        let os = from_u8(self.os.load(Relaxed));
        let forced = from_u8(self.forced.load(Relaxed));
        MeteredState {
            os,
            forced,
            metered: forced.or(os).unwrap_or(false),
        }
    }

    /// The whole picture, for status and the control API.
    pub fn status(&self) -> NetworkStatus {
        let inner = self.lock();
        let state = self.state();
        status_of(state, &inner)
    }

    /// The developer's override (`None` returns to following the OS), in memory only and
    /// chosen by "the API"; the control API and the tray use [`Network::choose`], which also
    /// keeps it for the next start.
    pub fn force(&self, metered: Option<bool>) {
        self.change(|n, inner| {
            n.forced.store(to_u8(metered), Relaxed);
            inner.forced_by = metered.map(|_| ChosenBy::Api);
        });
    }

    /// Sets the override (`None`: follow the OS), keeps it in `network.json`, and answers the
    /// new status (with `persist_error` set if it could not be kept).
    pub fn choose(&self, metered: Option<bool>, by: ChosenBy) -> NetworkStatus {
        self.change(|n, inner| {
            n.forced.store(to_u8(metered), Relaxed);
            inner.forced_by = metered.map(|_| by);
            inner.persist_error = n.file.as_deref().and_then(|file| {
                let saved = store::Saved::new(metered, by, SystemTime::now());
                store::save(file, &saved).err().map(|e| {
                    tracing::warn!(file = %file.display(), error = %e, "cannot keep the metered override for the next start");
                    format!("cannot write {}: {e}", file.display())
                })
            });
        });
        self.status()
    }

    /// What the OS reports, set by the platform watcher.
    pub fn set_os(&self, metered: Option<bool>) {
        self.change(|n, _| n.os.store(to_u8(metered), Relaxed));
    }

    /// The watcher's report: the value and where it comes from (or why there is none).
    pub(crate) fn set_os_watch(&self, metered: Option<bool>, watch: OsWatch) {
        self.change(|n, inner| {
            n.os.store(to_u8(metered), Relaxed);
            if inner.os_watch != watch {
                tracing::info!(os = ?metered, watch = %watch.phrase(), "network: the OS's metered report changed");
            }
            inner.os_watch = watch;
        });
    }

    /// Applies `f` under the lock (writers are serialised, so two changes cannot both see the
    /// same "before") and announces a change of the effective answer.
    fn change(&self, f: impl FnOnce(&Network, &mut Inner)) {
        let mut inner = self.lock();
        let before = self.state();
        f(self, &mut inner);
        let after = self.state();
        if before.metered != after.metered {
            inner.since = SystemTime::now();
            let status = status_of(after, &inner);
            if let Some(bus) = &self.bus {
                bus.emit(Event::Network {
                    from: before.metered,
                    to: after.metered,
                    source: status.source,
                    reason: status.reason,
                    at: inner.since,
                });
            }
        }
    }
}

fn status_of(state: MeteredState, inner: &Inner) -> NetworkStatus {
    let what = if state.metered {
        "metered"
    } else {
        "not metered"
    };
    let source = state.source();
    let why = match source {
        MeteredSource::Forced => "forced",
        MeteredSource::Os => "OS",
        MeteredSource::Default => "no OS information",
    };
    let reason = match source {
        MeteredSource::Forced => {
            let by = match inner.forced_by {
                Some(ChosenBy::Tray) => "in the tray",
                Some(ChosenBy::Dashboard) => "in the dashboard",
                Some(ChosenBy::Cli) => "with `weir network`",
                _ => "through the control API",
            };
            format!("forced {by}; {}", inner.os_watch.phrase())
        }
        MeteredSource::Os | MeteredSource::Default => inner.os_watch.phrase(),
    };
    NetworkStatus {
        state,
        source,
        forced_by: state.forced.and(inner.forced_by),
        os_watch: inner.os_watch.clone(),
        label: format!("{what} ({why})"),
        reason,
        since: crate::time_fmt::rfc3339(inner.since),
        persist_error: inner.persist_error.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_wins_over_the_os_and_unknown_is_not_metered() {
        let n = Network::default();
        assert!(!n.metered());
        n.set_os(Some(true));
        assert!(n.metered());
        n.force(Some(false));
        assert!(!n.metered());
        n.force(None);
        assert!(n.metered());
        assert_eq!(n.state().os, Some(true));
    }

    #[test]
    fn a_change_of_the_effective_answer_is_announced_once() {
        let bus = Bus::new();
        let mut rx = bus.subscribe();
        let n = Network::load(None, bus, true);
        n.set_os_watch(
            Some(true),
            OsWatch::Watching {
                api: "NetworkManager".into(),
                value: "yes".into(),
            },
        );
        // Forcing the value the OS already gives changes the source, not the answer.
        n.choose(Some(true), ChosenBy::Tray);
        n.choose(Some(false), ChosenBy::Tray);
        let mut seen = Vec::new();
        while let Ok(Event::Network {
            from, to, source, ..
        }) = rx.try_recv()
        {
            seen.push((from, to, source));
        }
        assert_eq!(
            seen,
            vec![
                (false, true, MeteredSource::Os),
                (true, false, MeteredSource::Forced)
            ]
        );
        let s = n.status();
        assert_eq!(s.label, "not metered (forced)");
        assert_eq!(s.forced_by, Some(ChosenBy::Tray));
        assert_eq!(
            s.reason,
            "forced in the tray; NetworkManager says Metered = yes"
        );
    }

    #[test]
    fn the_override_is_kept_in_the_data_dir_and_auto_forgets_it() {
        let d = tempfile::tempdir().unwrap();
        let n = Network::load(Some(d.path()), Bus::new(), true);
        let s = n.choose(Some(true), ChosenBy::Cli);
        assert_eq!(s.persist_error, None);
        let again = Network::load(Some(d.path()), Bus::new(), true);
        assert_eq!(again.state().forced, Some(true));
        assert_eq!(again.status().forced_by, Some(ChosenBy::Cli));
        again.choose(None, ChosenBy::Cli);
        let third = Network::load(Some(d.path()), Bus::new(), true);
        assert_eq!(third.state().forced, None);
        assert_eq!(third.status().source, MeteredSource::Default);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store::path(d.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn no_os_information_reads_as_not_metered_and_says_why() {
        let n = Network::load(None, Bus::new(), true);
        n.set_os_watch(
            None,
            OsWatch::NoBus {
                address: "unix:path=/nonexistent".into(),
                error: "No such file or directory".into(),
            },
        );
        let s = n.status();
        assert!(!s.state.metered);
        assert_eq!(s.label, "not metered (no OS information)");
        assert_eq!(
            s.reason,
            "no OS information: no system bus at unix:path=/nonexistent"
        );
        // An OS API that answers with an error says so, with its message.
        n.set_os_watch(
            None,
            OsWatch::Failed {
                api: "Windows NetworkInformation".into(),
                error: "Element not found.".into(),
            },
        );
        let s = n.status();
        assert_eq!(s.label, "not metered (no OS information)");
        assert_eq!(
            s.reason,
            "no OS information: Windows NetworkInformation failed (Element not found.)"
        );
    }
}
