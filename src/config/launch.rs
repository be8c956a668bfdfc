//! How a Weir process finds its settings — one rule for `weir serve`, the `weir` CLI
//! commands and the tray: the given file, else the OS config file if it exists, else the
//! built-in defaults; `--listen` overrides the file; the data dir comes from the flag, else the
//! file, else the OS data dir.
//!
//! [`LaunchArgs`] are those three flags as clap definitions: `weir serve` and the tray's own
//! parser (`weir_tray::TrayArgs`) flatten them in.

use super::{load_file, ConfigError, Settings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `--config`, `--listen`, `--data-dir`: how every Weir process is launched.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, overriding the config file (loopback only).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl LaunchArgs {
    /// Settings, data dir and config file by [`resolve`].
    pub fn resolve(&self) -> Result<Launch, ConfigError> {
        resolve(
            self.config.as_deref(),
            self.listen,
            self.data_dir.as_deref(),
        )
    }
}

/// Resolved start-up settings.
#[derive(Debug, Clone)]
pub struct Launch {
    pub settings: Settings,
    pub data_dir: PathBuf,
    /// Where the dashboard saves settings: the given file, else the OS default location.
    pub config_file: Option<PathBuf>,
}

/// Settings, data dir and config file by the one launch rule (see the module doc).
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
        .or_else(crate::paths::default_data_dir)
        .ok_or(ConfigError::NoDataDir)?;
    let config_file = config
        .map(Path::to_path_buf)
        .or_else(crate::paths::default_config_file);
    Ok(Launch {
        settings,
        data_dir,
        config_file,
    })
}
