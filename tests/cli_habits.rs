//! CLI habits (#23) through the real binary, with the user's config, data dir and keychain
//! kept out: global options anywhere on the line (against a real `weir serve`), completion
//! scripts per shell, the man pages build.rs writes, and exit codes that match `weir --help`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// The `weir` binary with HOME, the XDG dirs and the session bus (the keychain) pointed away
/// from the user's own.
fn weir(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("WEIR_CONTROL_SECRET")
        .env_remove("WEIR_LOG");
    c
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn network_status(o: &Output) -> weir::network::NetworkStatus {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[cfg(unix)]
#[test]
fn global_options_are_accepted_before_and_after_the_subcommand() {
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let port = closed_port();
    let cfg = home.path().join("weir.toml");
    std::fs::write(&cfg, format!("listen = \"127.0.0.1:{port}\"\n")).unwrap();
    let (mut serve, secret) = common::serve_with_secret(&cfg, data.path());
    let run = |args: &[&str]| {
        weir(home.path())
            .args(args)
            .env("WEIR_CONTROL_SECRET", &secret)
            .output()
            .unwrap()
    };
    let (cfg_s, data_s) = (cfg.to_str().unwrap(), data.path().to_str().unwrap());

    // The habit from the issue: the options after the subcommand and its value.
    let on = run(&[
        "network",
        "metered",
        "on",
        "--config",
        cfg_s,
        "--data-dir",
        data_s,
    ]);
    assert_eq!(on.status.code(), Some(0), "{}", text(&on));
    assert!(
        String::from_utf8_lossy(&on.stdout).starts_with("metered (forced)"),
        "{}",
        text(&on)
    );
    let s = network_status(&run(&[
        "network",
        "--data-dir",
        data_s,
        "--json",
        "--config",
        cfg_s,
    ]));
    assert_eq!(s.label, "metered (forced)");

    // Before the subcommand, as before.
    let off = run(&[
        "--config",
        cfg_s,
        "--data-dir",
        data_s,
        "network",
        "metered",
        "off",
    ]);
    assert_eq!(off.status.code(), Some(0), "{}", text(&off));
    let s = network_status(&run(&["--json", "--config", cfg_s, "network"]));
    assert_eq!(s.label, "not metered (forced)");

    // --listen alone finds the same Weir (no config file), between subcommand and value.
    let listen = format!("127.0.0.1:{port}");
    let auto = run(&[
        "network",
        "metered",
        "--listen",
        &listen,
        "auto",
        "--data-dir",
        data_s,
    ]);
    assert_eq!(auto.status.code(), Some(0), "{}", text(&auto));
    let s = network_status(&run(&["network", "--json", "--listen", &listen]));
    assert!(s.forced_by.is_none(), "{s:?}");
    assert!(!s.label.contains("forced"), "{s:?}");

    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    assert!(serve.wait().unwrap().success());
}

/// A reader that stops early (`weir completions bash | grep -q complete`) closes the pipe:
/// `weir` ends quietly with success, never a panic (clap_complete's writer panicked on it).
#[test]
fn completions_to_a_reader_that_stops_early_end_quietly() {
    use std::io::Read;
    let home = tempfile::tempdir().unwrap();
    let mut child = weir(home.path())
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is closed here, long before a script of tens of KiB is written.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn completions_for_each_shell_name_the_subcommands_and_options() {
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let o = weir(home.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        for word in [
            "serve",
            "network",
            "metered",
            "completions",
            "data-dir",
            "json",
        ] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let bad = weir(home.path())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

#[test]
fn build_script_writes_man_pages_from_the_same_definitions() {
    let man = Path::new(env!("OUT_DIR")).join("man");
    let page = std::fs::read_to_string(man.join("weir.1")).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH weir"),
        "{page}"
    );
    for word in ["serve", "completions", "\\-\\-data\\-dir", "Exit status"] {
        assert!(page.contains(word), "weir.1 lacks {word}");
    }
    let sub = std::fs::read_to_string(man.join("weir-network-metered.1")).unwrap();
    assert!(sub.contains("auto"), "{sub}");
}

#[test]
fn exit_codes_are_the_ones_help_documents() {
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_s = data.path().to_str().unwrap();
    let code = |args: &[&str]| {
        let o = weir(home.path()).args(args).output().unwrap();
        (o.status.code(), o)
    };

    let (c, help) = code(&["--help"]);
    assert_eq!(c, Some(0));
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for line in [
        "Exit status:",
        "  0  success",
        "  1  a runtime failure",
        "  2  the command line or the configuration is wrong",
    ] {
        assert!(help.contains(line), "help lacks {line:?}:\n{help}");
    }

    // 0: success.
    assert_eq!(code(&["--version"]).0, Some(0));
    let (c, o) = code(&["ca", "path", "--data-dir", data_s]);
    assert_eq!(c, Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(data_s),
        "{}",
        text(&o)
    );

    // 1: a runtime failure — nothing answers where Weir should be.
    let closed = format!("127.0.0.1:{}", closed_port());
    let (c, o) = code(&["queue", "ls", "--listen", &closed, "--data-dir", data_s]);
    assert_eq!(c, Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot reach Weir"));
    // … and a failed doctor check, also in its JSON form.
    let (c, o) = code(&[
        "doctor",
        "--listen",
        &closed,
        "--json",
        "--data-dir",
        data_s,
    ]);
    assert_eq!(c, Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["failed"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["checks"][0]["outcome"], "failed", "{v}");

    // 2: the command line or the config.
    let (c, o) = code(&["serve", "--no-such-option"]);
    assert_eq!(c, Some(2), "{}", text(&o));
    let (c, o) = code(&["mode", "sideways"]);
    assert_eq!(c, Some(2), "{}", text(&o));
    let (c, o) = code(&["ca", "path", "--json"]);
    assert_eq!(c, Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no JSON output"));
    let bad = home.path().join("bad.toml");
    std::fs::write(&bad, "listen = [1,\n").unwrap();
    let (c, o) = code(&["env", "--config", bad.to_str().unwrap()]);
    assert_eq!(c, Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.toml:"));
    let (c, o) = code(&["queue", "--listen", "not-an-address", "ls"]);
    assert_eq!(c, Some(2), "{}", text(&o));
}
