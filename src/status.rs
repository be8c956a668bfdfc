//! The typed status document: what `/_weir/api/status` serves, what the tray and the dashboard
//! read. Built from the engine's parts; public so consumers use these types, not JSON keys.

use crate::stats::ClassSnapshot;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct StatusSnapshot {
    pub version: &'static str,
    pub listen: String,
    pub dashboard: String,
    pub paused: bool,
    pub started_at: String,
    pub upstreams: Vec<UpstreamStatus>,
    pub surfaces: BTreeMap<&'static str, u64>,
    pub passthrough_requests: u64,
    pub tunnels: u64,
    pub rejected: u64,
    pub cache: CacheStatus,
    pub queue: QueueStatus,
    /// GitHub Status (watched components and incidents); `null` when the watcher is off.
    pub github: Option<weir_status::GithubStatus>,
    /// Whether a GitHub token is stored in the keychain (the token is never shown).
    pub github_token_stored: bool,
    /// Live settings: where they come from, the last change, what waits for a restart.
    pub settings: SettingsStatus,
}

/// Where a settings change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsSource {
    /// `PUT /_weir/api/settings` (the dashboard, the tray).
    Api,
    /// The config file changed on disk.
    File,
}

/// `settings` in the status document.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SettingsStatus {
    /// The config file watched for changes (and written by the settings API).
    pub config_file: Option<String>,
    /// Whether changes to the file on disk are picked up.
    pub watching: bool,
    /// Changes put in force since start (0: the start-up settings).
    pub version: u64,
    pub applied_at: Option<String>,
    pub applied_from: Option<SettingsSource>,
    /// Settings changed in the file that keep their old value until the engine restarts
    /// (the tray offers **Restart engine** while this is not empty).
    pub restart_required: Vec<crate::config::RestartKey>,
    /// The last change that was refused (the settings in force did not change); cleared by
    /// the next good one.
    pub error: Option<SettingsError>,
}

/// A refused config file: where and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingsError {
    pub file: String,
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    /// The config key, when the problem has one.
    pub key: Option<String>,
    pub message: String,
    pub at: String,
}

impl SettingsError {
    /// From a [`crate::config::ConfigError`] for `file`.
    pub fn from_config(e: &crate::config::ConfigError, file: &str) -> SettingsError {
        use crate::config::ConfigError;
        let at = crate::time_fmt::rfc3339(std::time::SystemTime::now());
        match e {
            ConfigError::Invalid {
                file,
                line,
                key,
                message,
            } => SettingsError {
                file: file.clone(),
                line: Some(*line),
                key: Some(key.clone()),
                message: message.clone(),
                at,
            },
            other => SettingsError {
                file: file.to_string(),
                line: None,
                key: None,
                message: other.to_string(),
                at,
            },
        }
    }
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, &self.key) {
            (Some(l), Some(k)) => write!(f, "{}:{l}: key `{k}`: {}", self.file, self.message),
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueStatus {
    pub available: bool,
    pub error: Option<String>,
    pub credentials: crate::secrets::Backend,
    #[serde(flatten)]
    pub counts: Option<weir_store::StateCounts>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    pub name: String,
    pub origin: String,
    pub classes: BTreeMap<&'static str, ClassSnapshot>,
    pub totals: ClassSnapshot,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub fallback: Option<String>,
    pub fallback_attempts: u64,
    #[serde(flatten)]
    pub guard: crate::upstream::GateStatus,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub in_flight: usize,
}
