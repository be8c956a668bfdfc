//! Config errors at their two borders: a policy file's own error joins the config errors
//! (policy cannot import `config`, which holds its rules), and a refused file becomes the
//! status document's [`SettingsError`] (a plain type in the `view` leaf, so the event stream
//! can carry it without importing `config`'s loader).

use super::error::ConfigError;
use crate::policy::PolicyError;
use crate::view::SettingsError;

impl From<PolicyError> for ConfigError {
    fn from(e: PolicyError) -> ConfigError {
        match e {
            PolicyError::Read { path, source } => ConfigError::Read { path, source },
            PolicyError::Invalid {
                file,
                line,
                key,
                message,
            } => ConfigError::Invalid {
                file,
                line,
                key,
                message,
            },
        }
    }
}

impl SettingsError {
    /// From a [`ConfigError`] for `file`.
    pub fn from_config(e: &ConfigError, file: &str) -> SettingsError {
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
