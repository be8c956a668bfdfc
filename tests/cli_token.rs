//! `weir token set|status|forget` through the real binary, against a real `weir serve` of the
//! same install and the real keychain (scripts/with-keychain.sh): the token goes in on standard
//! input, is never echoed (stdout, stderr, the data dir), the running Weir picks it up at once
//! (its sessions poller leaves `off`), and `forget` turns it off again. An empty input is a
//! usage error (exit 2). Without a session bus (`env -u DBUS_SESSION_BUS_ADDRESS`) the same
//! holds with the file store, and the commands name it rather than a keychain.

#[path = "common/weir_cli.rs"]
mod weir_cli;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const TOKEN: &str = "gho_weirCliTokenTest0123456789";

fn weir(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    // Keep the user's own config and data out of the test.
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("WEIR_LOG", "weir=warn")
        .env_remove("WEIR_CONTROL_SECRET");
    c
}

fn run(home: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    weir_cli::feed(weir(home).args(args), stdin)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn token_set_status_forget_never_echo_the_token() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let data_s = data.to_str().unwrap().to_string();
    let cfg = home.path().join("weir.toml");
    // The agents upstream is a closed loopback port: the poller gets no answer (and never
    // reaches the real GitHub from a test).
    std::fs::write(
        &cfg,
        "default_upstreams = false\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n",
    )
    .unwrap();
    let cfg_s = cfg.to_str().unwrap().to_string();
    let mut serve = weir(home.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &cfg_s,
            "--data-dir",
            &data_s,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    // Keep reading: a closed pipe would make `weir serve`'s next line fail and stop it.
    std::thread::spawn(move || for _ in lines {});
    let _serve = Serve(serve);
    let listen = first.rsplit("http://").next().unwrap().to_string();
    let args = |cmd: &'static str| {
        vec![
            "token".to_string(),
            "--listen".into(),
            listen.clone(),
            "--config".into(),
            cfg_s.clone(),
            "--data-dir".into(),
            data_s.clone(),
            cmd.to_string(),
        ]
    };
    let call = |cmd: &'static str, stdin: &str| {
        let a = args(cmd);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(home.path(), &a, stdin)
    };

    let empty = call("set", "\n");
    assert_eq!(empty.status.code(), Some(2), "{}", text(&empty));
    assert!(text(&empty).contains("no token given"), "{}", text(&empty));

    let set = call("set", &format!("{TOKEN}\n"));
    let out = text(&set);
    assert!(!out.contains(TOKEN), "the token is never echoed: {out}");
    assert!(set.status.success(), "{out}");
    // Without a session bus the token is a file in the data dir, and the command says so (it
    // said "stored in the keychain" there, which a person reads as encrypted at rest).
    let files = std::env::var("DBUS_SESSION_BUS_ADDRESS").is_err();
    let secrets = data.join("secrets");
    if files {
        assert!(
            out.contains("stored in an owner-only file in")
                && out.contains(secrets.to_str().unwrap()),
            "{out}"
        );
        assert!(!out.contains("keychain ("), "{out}");
    } else {
        assert!(out.contains("stored in the OS keychain"), "{out}");
    }
    assert!(out.contains("OAuth app token, gho_"), "{out}");
    assert!(out.contains("picked the change up"), "{out}");

    // The running Weir re-read the keychain: its poller is on (nothing answers upstream, so it
    // backs off, but it is not off). Asked a few times: the poller switches on its own task.
    let mut out = String::new();
    for _ in 0..50 {
        let status = call("status", "");
        out = text(&status);
        assert!(status.status.success(), "{out}");
        if !out.contains(": off") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!out.contains(TOKEN), "{out}");
    assert!(out.contains("is stored"), "{out}");
    assert_eq!(out.contains("owner-only file"), files, "{out}");
    assert!(out.contains("Sessions poller at"), "{out}");
    assert!(!out.contains(": off"), "{out}");

    let forget = call("forget", "");
    assert!(forget.status.success(), "{}", text(&forget));
    let mut out = String::new();
    for _ in 0..50 {
        out = text(&call("status", ""));
        if out.contains(": off") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(out.contains("No GitHub token is stored"), "{out}");
    assert!(out.contains(": off (no token)"), "{out}");

    for f in walk(&data) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "token found in {}",
            f.display()
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
