//! How a Weir process finds its settings — one rule for `weir serve`, the `weir` CLI
//! commands and the tray: the given file, else the OS config file if it exists, else the
//! built-in defaults; `--listen` overrides the file; the data dir comes from the flag, else the
//! file, else the OS data dir.

use super::{load_file, ConfigError, Settings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Resolved start-up settings.
#[derive(Debug, Clone)]
pub struct Launch {
    pub settings: Settings,
    pub data_dir: PathBuf,
    /// Where the dashboard saves settings: the given file, else the OS default location.
    pub config_file: Option<PathBuf>,
}

pub fn resolve(
    config: Option<&Path>,
    listen: Option<SocketAddr>,
    data_dir: Option<&Path>,
) -> Result<Launch, ConfigError> {
    let file = config
        .map(Path::to_path_buf)
        .or_else(|| crate::paths::default_config_file().filter(|p| p.exists()));
    let mut settings = match &file {
        Some(f) => load_file(f)?,
        None => Settings::default(),
    };
    if let Some(l) = listen {
        settings.listen = l;
    }
    if !settings.listen.ip().is_loopback() {
        return Err(ConfigError::NotLoopback(settings.listen));
    }
    let data_dir = data_dir
        .map(Path::to_path_buf)
        .or_else(|| settings.data_dir.clone())
        .unwrap_or_else(crate::paths::default_data_dir);
    let config_file = config
        .map(Path::to_path_buf)
        .or_else(crate::paths::default_config_file);
    Ok(Launch {
        settings,
        data_dir,
        config_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_missing_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "listen = \"127.0.0.1:1\"\ndata_dir = \"/from/file\"\n").unwrap();
        let l = resolve(Some(&f), Some("127.0.0.1:2".parse().unwrap()), None).unwrap();
        assert_eq!(l.settings.listen.port(), 2);
        assert_eq!(l.data_dir, PathBuf::from("/from/file"));
        assert_eq!(l.config_file.as_deref(), Some(f.as_path()));
        assert!(matches!(
            resolve(Some(Path::new("/nonexistent.toml")), None, None),
            Err(ConfigError::Read { .. })
        ));
        assert!(matches!(
            resolve(Some(&f), Some("0.0.0.0:9".parse().unwrap()), None),
            Err(ConfigError::NotLoopback(_))
        ));
    }
}
