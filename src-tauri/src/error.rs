//! Why the tray app could not start or do something: one `thiserror` enum for the shell.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrayError {
    #[error("{0}")]
    Config(#[from] weir::config::ConfigError),
    #[error(
        "listen address {0} is not a loopback address; Weir only listens on 127.0.0.1 or [::1]"
    )]
    NotLoopback(SocketAddr),
    #[error("{0}")]
    Engine(#[from] weir::EngineError),
    #[error("the window system refused: {0}")]
    Tauri(#[from] tauri::Error),
    #[error("tauri.conf.json has no window labelled `{0}`")]
    NoWindowConfig(&'static str),
    #[error("cannot open {url}: {message}")]
    Open { url: String, message: String },
    #[error("cannot start the dashboard window: {0}")]
    Dashboard(std::io::Error),
    #[error("cannot write the browser's launcher page into the data dir: {0}; check that the data dir is writable")]
    Launcher(std::io::Error),
    #[error("no dashboard window in this app (tests run without one)")]
    NoDashboard,
    #[error("config file {0} does not exist")]
    MissingConfig(PathBuf),
}
