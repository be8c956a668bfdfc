//! What the client-setup commands (`ca`, `env`, `setup`, `doctor`) share: the `--config` and
//! `--data-dir` flags and loading the install ([`weir::client_setup::Install`]).

use super::EXIT_CONFIG;
use std::path::PathBuf;
use std::process::ExitCode;
use weir::client_setup::Install;

/// Flags every client-setup command takes (anywhere on the command line).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CommonArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

/// Loads the config like `weir serve` does; a bad file is printed and becomes exit code 2.
pub fn load(args: &CommonArgs) -> Result<Install, ExitCode> {
    Install::load(args.config.as_deref(), args.data_dir.as_deref()).map_err(|e| {
        eprintln!("weir: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Prints `weir: <message>` to stderr and returns exit code 1.
pub fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("weir: {message}");
    ExitCode::FAILURE
}
