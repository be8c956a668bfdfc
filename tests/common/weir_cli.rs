//! The real `weir` binary run as a user would, for tests that drive its command line. Use with
//! `#[path = "common/weir_cli.rs"] mod weir_cli;`.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::Path;
use std::process::{Command, Output, Stdio};

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

/// Runs `cmd` (a `weir` command the caller set up) with `stdin` written to it: the commands
/// that read a secret from standard input.
pub fn feed(cmd: &mut Command, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Starts `cmd` (a `weir serve` the caller set up) and returns it with the first line it
/// printed (`weir: proxy listening on http://…`). The rest of its standard output is read to
/// the end in a thread: a closed pipe would fail its later lines (the dashboard link, `weir:
/// stopped`).
pub fn spawn_serve(cmd: &mut Command) -> (std::process::Child, Option<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok);
    std::thread::spawn(move || for _ in lines {});
    (child, first)
}
