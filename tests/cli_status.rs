//! `weir status` against a running `weir serve`: it reads the engine's real status document and
//! prints the state at a glance (a healthy start, then an upstream whose breaker opened);
//! `--json` prints the document; with nothing running it says so and exits 1.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

#[path = "common/weir_cli.rs"]
mod weir_cli;

fn weir(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("DBUS_SESSION_BUS_ADDRESS");
    c
}

/// An upstream that answers every request `503`, counting them.
fn failing_upstream() -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                // The head, up to its empty line (the requests here have no body).
                while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let body = r#"{"message":"unavailable"}"#;
                        let _ = write!(
                            s,
                            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    line.clear();
                }
            });
        }
    });
    (port, seen)
}

struct Serving {
    child: Child,
    addr: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(home: &std::path::Path, config: &std::path::Path) -> Serving {
    let (child, first) = weir_cli::spawn_serve(
        weir(home)
            .args(["serve", "--config"])
            .arg(config)
            .stderr(Stdio::null()),
    );
    let addr = first
        .as_deref()
        .and_then(|l| l.rsplit("http://").next())
        .expect("weir serve prints where it listens")
        .to_string();
    Serving { child, addr }
}

fn status(home: &std::path::Path, config: &std::path::Path, json: bool) -> (i32, String) {
    let mut c = weir(home);
    c.arg("status").arg("--config").arg(config);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A list call through Weir as an HTTP proxy.
fn list_through(weir: &str, up: u16) -> String {
    let mut s = TcpStream::connect(weir).unwrap();
    write!(
        s,
        "GET http://127.0.0.1:{up}/agents/sessions HTTP/1.1\r\nhost: 127.0.0.1:{up}\r\nauthorization: token status-test\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.lines().next().unwrap_or_default().to_string()
}

#[test]
fn weir_status_reads_the_running_engine_at_a_glance() {
    let home = tempfile::tempdir().unwrap();
    let (up, seen) = failing_upstream();
    let config = home.path().join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nwatch_github_status = false\ndefault_upstreams = false\n\
             [[upstream]]\nname = \"lab\"\norigin = \"http://127.0.0.1:{up}\"\n\
             [offline]\ndetect = false\n[retry]\nbase = \"1ms\"\ncap = \"5ms\"\njitter = false\n\
             [breaker]\nconsecutive_failures = 2\nminimum_calls = 1000\njitter = false\n"
        ),
    )
    .unwrap();

    // Nothing running at the configured address: said, exit 1.
    let stopped = home.path().join("stopped.toml");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(&stopped, format!("listen = \"127.0.0.1:{port}\"\n")).unwrap();
    let (code, text) = status(home.path(), &stopped, false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("cannot reach Weir at"), "{text}");

    let running = serve(home.path(), &config);
    // `weir status` finds it through the config's listen address: here port 0, so the test
    // points it at the address the engine printed.
    let at = home.path().join("at.toml");
    let cfg = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&at, cfg.replace("127.0.0.1:0", &running.addr)).unwrap();

    let (code, text) = status(home.path(), &at, false);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("at http://{}", running.addr)),
        "{text}"
    );
    assert!(text.contains("mode         automatic: "), "{text}");
    assert!(text.contains("upstreams    lab: closed since "), "{text}");
    assert!(text.contains("queue        "), "{text}");
    assert!(text.contains("tunnels      0, 0 B up, 0 B down"), "{text}");

    // Two failed lists open the upstream's breaker; the glance says so.
    for _ in 0..2 {
        let first = list_through(&running.addr, up);
        assert!(
            first.contains(" 503 ") || first.contains(" 502 "),
            "{first}"
        );
    }
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    let (code, text) = status(home.path(), &at, false);
    assert_eq!(code, 0, "{text}");
    eprintln!("{text}");
    assert!(text.contains("upstreams    lab: open since "), "{text}");
    assert!(text.contains("; probes in "), "{text}");

    // `--json`: the document as Weir sent it.
    let (code, text) = status(home.path(), &at, true);
    assert_eq!(code, 0, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["upstreams"][0]["breaker"]["state"], "open");
    drop(running);
}
