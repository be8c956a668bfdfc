//! The lab's error type.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("cannot listen on a loopback port: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the lab only sends traffic to loopback addresses; `{0}` is not one")]
    NotLoopback(String),
    #[error("the lab's Weir configuration does not validate: {0}")]
    Config(#[from] weir::config::ConfigError),
    #[error("cannot start Weir: {0}")]
    Engine(#[from] weir::EngineError),
    #[error("fleet worker process: {0}")]
    Worker(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot draw the chart {path}: {message}")]
    Chart { path: PathBuf, message: String },
    #[error("bad scenario settings: {0}")]
    Settings(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}
