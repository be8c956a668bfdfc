//! Settings changes while Weir runs. A new config text (saved by the settings API, or the
//! config file changed on disk: [`watch`]) is validated with the start-up rules; a bad one is
//! refused with file:line, kept in the status and sent as an event, and the settings in force
//! stay. A good one is put in force at once ([`crate::config::LiveSettings`]): every later
//! request reads it, and the parts that built state from settings reconfigure in place
//! (breakers keep their state). Restart-only settings keep their running value and are listed
//! in `restart_required`.

pub(crate) mod watch;

use crate::config::{ConfigError, LiveSettings, RestartKey, Settings};
use crate::events::{Bus, Event, SettingsSource};
use crate::pipeline::Proxy;
use crate::status::{SettingsError, SettingsStatus};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Applies settings changes to a running engine and keeps their outcome for the status.
pub(crate) struct Reloader {
    live: LiveSettings,
    proxy: Arc<Proxy>,
    bus: Bus,
    config_file: Option<PathBuf>,
    /// The file's settings when the engine started: a restart-only key is reported when the
    /// file now says something else than it did then (so `--listen` on the command line is
    /// not mistaken for a change).
    baseline: Settings,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    status: SettingsStatus,
    /// The text last put in force (or refused), so the watcher's echo of an API save, or a
    /// touch without a change, does nothing.
    last_text: Option<blake3::Hash>,
}

/// What a successful change reports.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub restart_required: Vec<RestartKey>,
}

impl Reloader {
    pub fn new(
        live: LiveSettings,
        proxy: Arc<Proxy>,
        bus: Bus,
        config_file: Option<PathBuf>,
    ) -> Reloader {
        let running = live.get();
        // The file as it was at start; when it is missing or unreadable the engine's settings
        // came from elsewhere (defaults, a test) and are the baseline themselves.
        let (baseline, text) = match config_file.as_ref().map(std::fs::read_to_string) {
            Some(Ok(text)) => match crate::config::parse_str(&text, &display(&config_file)) {
                Ok(s) => (s, Some(blake3::hash(text.as_bytes()))),
                Err(_) => ((*running).clone(), None),
            },
            _ => ((*running).clone(), None),
        };
        let status = SettingsStatus {
            config_file: config_file.as_ref().map(|p| p.display().to_string()),
            ..SettingsStatus::default()
        };
        Reloader {
            live,
            proxy,
            bus,
            config_file,
            baseline,
            state: Mutex::new(State {
                status,
                last_text: text,
            }),
        }
    }

    pub fn config_file(&self) -> Option<&PathBuf> {
        self.config_file.as_ref()
    }

    /// The settings part of the status document.
    pub fn status(&self) -> SettingsStatus {
        self.lock().status.clone()
    }

    pub fn set_watching(&self, watching: bool) {
        self.lock().status.watching = watching;
    }

    /// Validates `text` (the config file's new content) and puts it in force, or records why
    /// not. The same text twice in a row is applied once.
    pub fn apply_text(&self, text: &str, source: SettingsSource) -> Result<Applied, ConfigError> {
        let hash = blake3::hash(text.as_bytes());
        let file = display(&self.config_file);
        let new = match crate::config::parse_str(text, &file) {
            Ok(s) => s,
            Err(e) => {
                self.refuse(&e, &file, source, Some(hash));
                return Err(e);
            }
        };
        let restart_required = crate::config::restart_required(&self.baseline, &new);
        let running = self.live.get();
        let s = self.live.replace(new.with_restart_only_from(&running));
        // The parts that built state from settings, reconfigured in place.
        self.proxy.upstreams.apply(&s);
        self.proxy.apply(&s);
        let at = SystemTime::now();
        {
            let mut st = self.lock();
            st.last_text = Some(hash);
            st.status.version += 1;
            st.status.applied_at = Some(crate::time_fmt::rfc3339(at));
            st.status.applied_from = Some(source);
            st.status.restart_required.clone_from(&restart_required);
            st.status.error = None;
        }
        if restart_required.is_empty() {
            tracing::info!(?source, "settings applied");
        } else {
            let keys: Vec<&str> = restart_required.iter().map(|k| k.as_str()).collect();
            tracing::warn!(?source, restart_required = %keys.join(", "), "settings applied; these keep their old value until Weir restarts");
        }
        self.bus.emit(Event::SettingsApplied {
            source,
            at,
            restart_required: restart_required.clone(),
        });
        Ok(Applied { restart_required })
    }

    /// Reads the config file and applies it if it changed since the last apply. A missing
    /// file changes nothing (an editor may be between deleting and renaming).
    pub fn reload_file(&self) {
        let Some(path) = &self.config_file else {
            return;
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(file = %path.display(), "config file gone; settings unchanged");
                return;
            }
            Err(source) => {
                let e = ConfigError::Read {
                    path: path.clone(),
                    source,
                };
                self.refuse(&e, &display(&self.config_file), SettingsSource::File, None);
                return;
            }
        };
        if self.lock().last_text == Some(blake3::hash(text.as_bytes())) {
            return;
        }
        // Refusals are recorded (status, event, log) inside.
        let _refused = self.apply_text(&text, SettingsSource::File);
    }

    fn refuse(
        &self,
        e: &ConfigError,
        file: &str,
        source: SettingsSource,
        hash: Option<blake3::Hash>,
    ) {
        tracing::warn!(error = %e, "settings change refused; the settings in force are unchanged");
        let error = SettingsError::from_config(e, file);
        {
            let mut st = self.lock();
            // An API save is validated before it is written, so only a file refusal means the
            // file on disk is bad; its text is remembered so the same bad text is not
            // reported again on every touch.
            if source == SettingsSource::File {
                st.last_text = hash;
                st.status.error = Some(error.clone());
            }
        }
        self.bus.emit(Event::SettingsRejected {
            source,
            at: SystemTime::now(),
            error,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn display(file: &Option<PathBuf>) -> String {
    file.as_ref()
        .map_or_else(|| "<settings>".to_string(), |p| p.display().to_string())
}
