//! What the client-setup commands (`ca`, `env`, `setup`, `doctor`) share: loading the install
//! ([`weir::client_setup::Install`]) from the global `--config`, `--listen` and `--data-dir`.

use super::args::GlobalArgs;
use super::EXIT_CONFIG;
use std::process::ExitCode;
use weir::client_setup::Install;

/// Loads the config like `weir serve` does (so `--listen` moves the address `weir env` and
/// `weir setup` print, too); a bad file is printed and becomes exit code 2.
pub fn load(args: &GlobalArgs) -> Result<Install, ExitCode> {
    weir::config::resolve(
        args.config.as_deref(),
        args.listen,
        args.data_dir.as_deref(),
    )
    .map(|l| Install::new(l.settings, l.data_dir))
    .map_err(|e| {
        eprintln!("weir: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Prints `weir: <message>` to stderr and returns exit code 1.
pub fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("weir: {message}");
    ExitCode::FAILURE
}
