//! Where Weir keeps its config and data on each OS (the `directories` crate knows the rules:
//! XDG on Linux, ~/Library on macOS, %APPDATA% on Windows).

use std::path::PathBuf;

fn dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("dev", "weir", "weir")
}

/// `<config dir>/config.toml`, e.g. `~/.config/weir/config.toml` on Linux.
pub fn default_config_file() -> Option<PathBuf> {
    dirs().map(|d| d.config_dir().join("config.toml"))
}

/// e.g. `~/.local/share/weir` on Linux.
pub fn default_data_dir() -> PathBuf {
    dirs()
        .map(|d| d.data_dir().to_path_buf())
        .unwrap_or_else(|| std::env::temp_dir().join("weir"))
}
