#![cfg(feature = "metered")]
//! The metered network (#14): Weir follows NetworkManager's `Metered` property on a real
//! private D-Bus daemon (started here, `dbus-daemon --session`) where this test exports a small
//! fake `org.freedesktop.NetworkManager` with zbus; the override API (secret, Origin, kept in
//! the data dir across a restart, `null` back to the OS value); and `weir network` through the
//! real binary.

mod common;
use common::{eventually_status, with_secret, Weir};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use weir::events::Event;
use weir::mode::ChosenBy;
use weir::network::{MeteredSource, OsWatch};

const NM: &str = "org.freedesktop.NetworkManager";
const NM_PATH: &str = "/org/freedesktop/NetworkManager";

/// A `dbus-daemon` of this test's own, on a socket in a temp dir; killed when dropped.
struct PrivateBus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    fn start() -> PrivateBus {
        let dir = tempfile::tempdir().unwrap();
        let (child, address) = Self::spawn(&dir.path().join("bus"));
        PrivateBus {
            child,
            address,
            _dir: dir,
        }
    }

    /// The daemon dies (as a system bus does on a restart); `start_again` brings up a new
    /// one at the same address.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn start_again(&mut self) {
        let socket = self._dir.path().join("bus");
        // A killed daemon leaves its socket file behind.
        let _ = std::fs::remove_file(&socket);
        self.child = Self::spawn(&socket).0;
    }

    fn spawn(socket: &std::path::Path) -> (Child, String) {
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", socket.display()))
            .stdout(Stdio::piped())
            // Not inherited: a daemon outliving a killed test must not hold the runner's pipes.
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (package dbus-daemon) must be installed");
        // The daemon prints its address once it listens.
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("unix:"), "dbus-daemon said {line:?}");
        // Without the printed `guid=`: a restarted daemon has a new one, and a client given
        // an address with a guid refuses any other.
        (child, format!("unix:path={}", socket.display()))
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one property Weir reads, as NetworkManager exports it.
struct FakeNmIface {
    metered: u32,
}

#[zbus::interface(name = "org.freedesktop.NetworkManager")]
impl FakeNmIface {
    #[zbus(property)]
    async fn metered(&self) -> u32 {
        self.metered
    }
}

/// A fake NetworkManager on the private bus (its own connection, owning the well-known name).
struct FakeNm {
    conn: zbus::Connection,
}

impl FakeNm {
    async fn start(address: &str, metered: u32) -> FakeNm {
        let conn = zbus::connection::Builder::address(address)
            .unwrap()
            .serve_at(NM_PATH, FakeNmIface { metered })
            .unwrap()
            .name(NM)
            .unwrap()
            .build()
            .await
            .unwrap();
        FakeNm { conn }
    }

    /// Changes `Metered` and emits `PropertiesChanged`, as NetworkManager does.
    async fn set(&self, metered: u32) {
        let iface = self
            .conn
            .object_server()
            .interface::<_, FakeNmIface>(NM_PATH)
            .await
            .unwrap();
        iface.get_mut().await.metered = metered;
        iface
            .get()
            .await
            .metered_changed(iface.signal_emitter())
            .await
            .unwrap();
    }

    /// NetworkManager stops: its name leaves the bus.
    async fn stop(self) {
        assert!(self.conn.release_name(NM).await.unwrap());
        drop(self.conn);
    }
}

fn network_cfg(bus: &str) -> String {
    format!("[network]\nsystem_bus_address = \"{bus}\"\n")
}

async fn health_ok(weir: &Weir) -> bool {
    reqwest::get(format!("{}/_weir/api/health", weir.proxy_url()))
        .await
        .is_ok_and(|r| r.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metered_follows_networkmanager_and_its_absence_is_not_an_error() {
    let mut bus = PrivateBus::start();
    let weir = Weir::start(&[], &network_cfg(&bus.address)).await;
    // NetworkManager is not running yet: no OS information (and never an error).
    assert!(
        eventually_status(&weir.handle, 250, |s| matches!(
            s.network.os_watch,
            OsWatch::NoService { .. }
        ))
        .await,
        "{:?}",
        weir.handle.network().status()
    );
    let mut events = weir.handle.subscribe();
    // It starts: seen through NameOwnerChanged, then its `Metered` (1 = yes) is read.
    let nm = FakeNm::start(&bus.address, 1).await;
    assert!(
        eventually_status(&weir.handle, 250, |s| s.network.state.os == Some(true)).await,
        "{:?}",
        weir.handle.network().status()
    );
    // The status document as the dashboard reads it.
    let s = weir.status().await;
    assert_eq!(s["network"]["metered"], true);
    assert_eq!(s["network"]["source"], "os");
    assert_eq!(s["network"]["label"], "metered (OS)");
    assert_eq!(s["network"]["os_watch"]["state"], "watching");
    assert_eq!(s["network"]["os_watch"]["value"], "yes");
    assert_eq!(s["network"]["reason"], "NetworkManager says Metered = yes");

    // NetworkManager's PropertiesChanged: 2 = no.
    nm.set(2).await;
    assert!(eventually_status(&weir.handle, 250, |s| s.network.state.os == Some(false)).await);
    assert!(!weir.handle.network().status().state.metered);
    // guess-yes counts as metered, as NetworkManager advises.
    nm.set(3).await;
    assert!(eventually_status(&weir.handle, 250, |s| s.network.state.metered).await);
    assert_eq!(
        weir.handle.network().status().os_watch,
        OsWatch::Watching {
            api: "NetworkManager".into(),
            value: "guess-yes".into()
        }
    );

    // NetworkManager goes away: no OS information, not metered, and Weir still serves.
    nm.stop().await;
    assert!(
        eventually_status(&weir.handle, 250, |s| matches!(
            s.network.os_watch,
            OsWatch::NoService { .. }
        ))
        .await
    );
    let n = weir.handle.network().status();
    assert_eq!((n.state.os, n.state.metered), (None, false));
    assert_eq!(n.label, "not metered (no OS information)");
    assert!(health_ok(&weir).await);

    // The effective answer changed four times (unknown→yes, yes→no, no→guess-yes,
    // guess-yes→gone), each announced once with where it came from.
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let Event::Network {
            from, to, source, ..
        } = e
        {
            seen.push((from, to, source));
        }
    }
    assert_eq!(
        seen,
        vec![
            (false, true, MeteredSource::Os),
            (true, false, MeteredSource::Os),
            (false, true, MeteredSource::Os),
            (true, false, MeteredSource::Default),
        ]
    );

    // It comes back, as "no" this time: no restart needed.
    let nm = FakeNm::start(&bus.address, 1).await;
    assert!(eventually_status(&weir.handle, 250, |s| s.network.state.os == Some(true)).await);

    // The bus itself goes away: no OS information (not a stale "metered"), Weir still serves.
    bus.kill();
    assert!(
        eventually_status(&weir.handle, 250, |s| matches!(
            s.network.os_watch,
            OsWatch::NoBus { .. }
        ))
        .await,
        "{:?}",
        weir.handle.network().status()
    );
    assert_eq!(weir.handle.network().status().state.os, None);
    assert!(!weir.handle.network().status().state.metered);
    assert!(health_ok(&weir).await);
    drop(nm);

    // A new bus at the same address (a restarted system bus) is found again by the watcher's
    // retry, and NetworkManager on it is read.
    bus.start_again();
    let _nm = FakeNm::start(&bus.address, 3).await;
    assert!(
        eventually_status(&weir.handle, 500, |s| s.network.state.os == Some(true)).await,
        "{:?}",
        weir.handle.network().status()
    );
    weir.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_system_bus_there_is_no_os_information_and_weir_serves() {
    let dir = tempfile::tempdir().unwrap();
    let address = format!("unix:path={}", dir.path().join("no-bus").display());
    let weir = Weir::start(&[], &network_cfg(&address)).await;
    assert!(
        eventually_status(&weir.handle, 250, |s| matches!(
            s.network.os_watch,
            OsWatch::NoBus { .. }
        ))
        .await
    );
    let s = weir.status().await;
    assert_eq!(s["network"]["metered"], false);
    assert_eq!(s["network"]["os"], serde_json::Value::Null);
    assert_eq!(s["network"]["label"], "not metered (no OS information)");
    assert_eq!(
        s["network"]["reason"],
        format!("no OS information: no system bus at {address}")
    );
    assert!(health_ok(&weir).await);
    // The override still works without the OS.
    weir.handle.set_network_metered(Some(true), ChosenBy::Tray);
    assert!(weir.handle.network().status().state.metered);
    let metrics = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("weir_network_metered{source=\"forced\"} 1\n"),
        "{metrics}"
    );
    weir.handle.shutdown().await;
}

async fn put_network(weir: &Weir, body: &str) -> reqwest::Response {
    let req = reqwest::Client::new()
        .put(format!("{}/_weir/api/network", weir.proxy_url()))
        .body(body.to_string());
    with_secret(req, weir.handle.control_secret()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_override_is_protected_kept_across_a_restart_and_auto_returns_to_the_os() {
    let bus = PrivateBus::start();
    let _nm = FakeNm::start(&bus.address, 2).await;
    let weir = Weir::start(&[], &network_cfg(&bus.address)).await;
    assert!(eventually_status(&weir.handle, 250, |s| s.network.state.os == Some(false)).await);
    let url = format!("{}/_weir/api/network", weir.proxy_url());
    let client = reqwest::Client::new();

    // No secret: refused like every mutating control call (401), nothing changes.
    let r = client
        .put(&url)
        .body(r#"{"metered":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A page of another origin, even with the secret: refused (403).
    let r = client
        .put(&url)
        .header("origin", "http://evil.example")
        .header("x-weir-secret", weir.handle.control_secret())
        .body(r#"{"metered":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A body that is not the override: 422 with the shape it wants.
    let r = put_network(&weir, r#"{"metered":"yes"}"#).await;
    assert_eq!(r.status(), 422);
    let p: serde_json::Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("true|false|null"));
    assert_eq!(weir.handle.network().status().state.forced, None);
    assert!(!weir.handle.network().status().state.metered);

    let r = put_network(&weir, r#"{"metered":true,"by":"dashboard"}"#).await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["metered"], true);
    assert_eq!(v["forced"], true);
    assert_eq!(v["os"], false);
    assert_eq!(v["source"], "forced");
    assert_eq!(v["label"], "metered (forced)");
    assert_eq!(
        v["reason"],
        "forced in the dashboard; NetworkManager says Metered = no"
    );
    let file = weir.dir.path().join("network.json");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // A restart (same data dir) keeps the override.
    let again = weir.handle.restart().await.unwrap();
    let n = again.network().status();
    assert_eq!((n.state.forced, n.state.metered), (Some(true), true));
    assert_eq!(n.forced_by, Some(ChosenBy::Dashboard));
    assert!(eventually_status(&again, 250, |s| s.network.state.os == Some(false)).await);
    assert!(
        again.network().status().state.metered,
        "the override still wins"
    );

    // `null` follows the OS again (not metered), and that too is kept.
    let r = reqwest::Client::new()
        .put(format!("http://{}/_weir/api/network", again.local_addr()))
        .header("x-weir-secret", again.control_secret())
        .body(r#"{"metered":null}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let n = again.network().status();
    assert_eq!(
        (n.state.forced, n.state.metered, n.source),
        (None, false, MeteredSource::Os)
    );
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["forced"], serde_json::Value::Null);
    // GET needs no secret (the status document carries the same).
    let g: serde_json::Value =
        reqwest::get(format!("http://{}/_weir/api/network", again.local_addr()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(g["source"], "os");
    again.shutdown().await;
}

/// `weir network` through the real binary against a running engine: print, force on, print,
/// auto, a bad value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_network_round_trip_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.path().join("weir.toml");
    let cfg_text = format!(
        "listen = \"127.0.0.1:{port}\"\nwatch_github_status = false\n[network]\ndetect_os = false\n"
    );
    std::fs::write(&cfg, &cfg_text).unwrap();
    let settings = weir::config::parse_str(&cfg_text, "weir.toml").unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    let secret = handle.control_secret().to_string();
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.arg("network")
            .arg("--config")
            .arg(&cfg)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env("WEIR_CONTROL_SECRET", &secret);
        tokio::task::spawn_blocking(move || c.output().unwrap())
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let out = run(&[]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text(&out).trim(),
        "not metered (no OS information) — OS detection is off ([network] detect_os = false)"
    );

    let out = run(&["metered", "on"]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text(&out).trim(),
        "metered (forced) — forced with `weir network`; OS detection is off ([network] detect_os = false)"
    );
    let n = handle.network().status();
    assert_eq!((n.state.metered, n.forced_by), (true, Some(ChosenBy::Cli)));

    let out = run(&["--json"]).await.unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["forced"], true);
    assert_eq!(v["forced_by"], "cli");

    let out = run(&["metered", "auto"]).await.unwrap();
    assert!(out.status.success());
    assert!(text(&out).starts_with("not metered (no OS information) — "));
    assert_eq!(handle.network().status().state.forced, None);

    // A value that is not on/off/auto: a usage error (exit 2), nothing sent.
    let out = run(&["metered", "sometimes"]).await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(handle.network().status().state.forced, None);

    // A wrong secret is refused by the engine and reported.
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.args(["network", "--config"])
        .arg(&cfg)
        .arg("--data-dir")
        .arg(&data)
        .args(["metered", "on"])
        .env("WEIR_CONTROL_SECRET", "not-the-secret");
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("control secret"));
    assert_eq!(handle.network().status().state.forced, None);
    handle.shutdown().await;
}
