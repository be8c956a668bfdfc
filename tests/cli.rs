//! The `weir` binary: config errors exit 2 naming file, line and key; `serve` prints where it
//! listens and stops gracefully on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[path = "common/weir_cli.rs"]
mod weir_cli;

fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    // Keep the user's own config and data out of the test.
    let home = tempfile::tempdir().unwrap().keep();
    c.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"));
    c
}

#[test]
fn bad_config_exits_2_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("weir.toml");
    std::fs::write(&f, "listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"x\"\norigin = \"https://a.example/path\"\n").unwrap();
    let out = weir().args(["serve", "--config"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4: key `upstream.origin`", f.display())),
        "{err}"
    );

    std::fs::write(&f, "listen = [1,\n").unwrap();
    let out = weir().args(["serve", "--config"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("weir.toml:"),
        "never a panic"
    );
}

#[cfg(unix)]
#[test]
fn serve_prints_addresses_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = weir()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("WEIR_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.starts_with("weir: proxy listening on http://127.0.0.1:"),
        "{first}"
    );
    // Standard output is a pipe here, not a terminal (a service manager's journal keeps
    // what it is given): the link goes out without the control secret.
    let second = lines.next().unwrap().unwrap();
    assert!(second.contains("/_weir/"), "{second}");
    assert!(!second.contains("secret="), "{second}");
    let addr = first.rsplit("http://").next().unwrap().to_string();
    let status = std::net::TcpStream::connect(&addr);
    assert!(status.is_ok(), "listening at {addr}");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let code = child.wait().unwrap();
    assert!(code.success(), "{code:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l == "weir: stopped"), "{rest:?}");
    // Standard error is a pipe too (a journal, `2> weir.log`): the log has no colour codes.
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains("created a new local CA"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "escape codes in a piped log: {log:?}"
    );
}

/// One `weir serve` per data dir: a second one (on another port) is refused at once, naming
/// the first one's process and the fix; once the first stops, the dir is free again.
#[cfg(unix)]
#[test]
fn a_second_serve_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let serve = || {
        weir_cli::spawn_serve(
            weir()
                .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(dir.path())
                .stderr(Stdio::null()),
        )
    };
    let (mut running, first) = serve();
    assert!(
        first.is_some_and(|l| l.starts_with("weir: proxy listening on")),
        "the first serve starts"
    );
    let out = weir()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "another Weir (process {}) is already using the data directory",
            running.id()
        )) && err.contains("--data-dir"),
        "{err}"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &running.id().to_string()])
        .status();
    assert!(running.wait().unwrap().success());
    let (mut again, first) = serve();
    assert!(
        first.is_some_and(|l| l.starts_with("weir: proxy listening on")),
        "the dir is free once the first one stopped"
    );
    let _ = again.kill();
    let _ = again.wait();
}
