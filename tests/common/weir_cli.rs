//! The real `weir` binary run as a user would, for tests that drive its command line. Use with
//! `#[path = "common/weir_cli.rs"] mod weir_cli;`.

use std::path::Path;
use std::process::{Command, Output};

/// `weir ARGS` with a throwaway HOME and no usable keychain (no D-Bus session).
pub fn weir(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("cfg"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/weir-test-bus",
        )
        .output()
        .unwrap()
}
