//! Modes: cache only (no upstream calls, creates queued and replayed once on leaving), pass-through
//! (the old pause), and automatic's offline sub-state (entered when every upstream refuses
//! connections, left by a probe). Real loopback upstreams that count what they receive, the real
//! SQLite queue, the real keychain (run under scripts/with-keychain.sh; the tests that queue
//! creates skip without one), and the real `weir` binary for `weir mode`.

mod common;
use common::{eventually, eventually_status, with_secret, Upstream, Weir};
use weir::events::Event;
use weir::mode::{ChosenBy, ModeKind};

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";
const LIST: &str = "/agents/sessions";
/// Lists are stale at once (so a cache-only hit must say so), the breaker stays out of the way,
/// and offline probes are quick and deterministic.
const CFG: &str = "[classes.list]\nfresh_ttl = \"1ms\"\nstale_while_revalidate = \"0s\"\ndeadline = \"500ms\"\n[breaker]\nminimum_calls = 1000\n[retry]\njitter = false\n[offline]\nprobe_base = \"20ms\"\nprobe_cap = \"100ms\"\njitter = false\n";

fn body(i: usize) -> String {
    format!(r#"{{"problem_statement":"mode task {i}","event_type":"weir-test"}}"#)
}

fn has_keychain() -> bool {
    let d = tempfile::tempdir().unwrap();
    let ok = weir::secrets::Namespace::for_data_dir(d.path())
        .keychain()
        .probe()
        .is_ok();
    if !ok {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
    }
    ok
}

fn posts(up: &Upstream) -> Vec<String> {
    up.seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .map(|s| String::from_utf8_lossy(&s.body).into_owned())
        .collect()
}

async fn set_mode(weir: &Weir, mode: &str) -> reqwest::Response {
    let req = reqwest::Client::new()
        .put(format!("{}/_weir/api/mode", weir.proxy_url()))
        .body(format!(r#"{{"mode":"{mode}","by":"dashboard"}}"#));
    with_secret(req, weir.handle.control_secret()).await
}

/// The mode transitions announced so far, in order.
fn transitions(rx: &mut tokio::sync::broadcast::Receiver<Event>) -> Vec<(ModeKind, ModeKind)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let Event::ModeChanged { from, to, .. } = e {
            out.push((from, to));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_only_makes_no_upstream_calls_and_replays_each_create_once_after() {
    if !has_keychain() {
        return;
    }
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], CFG).await;
    let mut events = weir.handle.subscribe();
    let c = weir.client("alice");
    let origin = up.origin();
    // Fill the cache: one list, one view.
    for p in [LIST, "/agents/sessions/s1"] {
        let r = c.get(format!("{origin}{p}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = set_mode(&weir, "cache-only").await;
    assert_eq!(r.status(), 200);
    let st: serde_json::Value = r.json().await.unwrap();
    assert_eq!(st["mode"], "cache_only");
    assert_eq!(st["chosen_by"], "dashboard");
    let before = up.total();

    // A mixed run: lists and views (cached), a list never fetched, a log stream, creates.
    let mut queued = Vec::new();
    for i in 0..4 {
        let r = c.get(format!("{origin}{LIST}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let cs = r.headers()["cache-status"].to_str().unwrap().to_string();
        assert_eq!(cs, "weir; hit; fwd=stale; detail=cache_only");
        let r = c
            .get(format!("{origin}/agents/sessions/s1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = c
            .post(format!("{origin}{JOBS}"))
            .body(body(i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["status"], "queued");
        assert!(
            v["weir"]["reason"].as_str().unwrap().contains("cache-only"),
            "{v}"
        );
        queued.push(v["weir"]["queue_id"].as_i64().unwrap());
    }
    for p in ["/agents/sessions/nwo/octo/repo", "/agents/sessions/s1/logs"] {
        let r = c.get(format!("{origin}{p}")).send().await.unwrap();
        assert_eq!(r.status(), 503, "{p}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{p}"
        );
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["kind"], "cache_only_miss", "{p}");
        assert!(v["detail"]
            .as_str()
            .unwrap()
            .contains("weir mode automatic"));
    }
    // The replay worker was woken by every enqueue: give it the chance to (wrongly) send.
    let sent = eventually(25, || up.total() > before).await;
    assert!(
        !sent,
        "no upstream call in cache-only mode: {:?}",
        up.seen()
    );
    assert_eq!(up.total(), before);
    let st = weir.handle.status().await;
    assert_eq!(st.queue.counts.as_ref().unwrap().queued, 4);
    assert_eq!(st.mode.mode, ModeKind::CacheOnly);

    // Leaving the mode: every queued create reaches the upstream exactly once.
    assert_eq!(set_mode(&weir, "automatic").await.status(), 200);
    assert!(eventually(500, || posts(&up).len() >= 4).await, "replayed");
    assert!(
        eventually_status(&weir.handle, 500, |s| s
            .queue
            .counts
            .as_ref()
            .is_some_and(|c| c.done == 4))
        .await
    );
    // A double, if any, would show up now.
    let doubled = eventually(25, || posts(&up).len() > 4).await;
    assert!(!doubled);
    let mut got = posts(&up);
    got.sort();
    let mut want: Vec<String> = (0..4).map(body).collect();
    want.sort();
    assert_eq!(got, want, "each create once");
    assert_eq!(
        transitions(&mut events),
        vec![
            (ModeKind::Automatic, ModeKind::CacheOnly),
            (ModeKind::CacheOnly, ModeKind::Automatic)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_is_what_pause_was_and_the_pause_api_still_works() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], CFG).await;
    let c = weir.client("bob");
    let pause = |on: bool| {
        let req = reqwest::Client::new()
            .post(format!("{}/_weir/api/pause", weir.proxy_url()))
            .body(format!(r#"{{"paused":{on}}}"#));
        with_secret(req, weir.handle.control_secret())
    };
    assert_eq!(pause(true).await.status(), 200);
    let st = weir.handle.status().await;
    assert_eq!(
        (st.mode.mode, st.mode.chosen_by, st.paused),
        (ModeKind::PassThrough, ChosenBy::Api, true)
    );
    for _ in 0..3 {
        let r = c
            .get(format!("{}{LIST}", up.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("cache-status").is_none(), "untouched");
    }
    assert_eq!(up.count(LIST), 3, "nothing cached or coalesced");
    assert_eq!(pause(false).await.status(), 200);
    assert_eq!(weir.handle.mode().mode, ModeKind::Automatic);

    // "Resume" only ever undid a pause: it leaves cache-only alone.
    assert_eq!(set_mode(&weir, "cache_only").await.status(), 200);
    assert_eq!(pause(false).await.status(), 200);
    assert_eq!(weir.handle.mode().mode, ModeKind::CacheOnly);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_api_needs_the_secret_and_a_real_mode() {
    let weir = Weir::start(&[], "").await;
    let url = format!("{}/_weir/api/mode", weir.proxy_url());
    let http = reqwest::Client::new();
    let r = http
        .put(&url)
        .body(r#"{"mode":"cache-only"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    for bad in [
        r#"{"mode":"offline"}"#,
        r#"{"mode":"cache-only","by":"default"}"#,
        "{}",
    ] {
        let r = with_secret(http.put(&url).body(bad), weir.handle.control_secret()).await;
        assert_eq!(r.status(), 422, "{bad}");
    }
    assert_eq!(weir.handle.mode().mode, ModeKind::Automatic);
    let v: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["mode"], "automatic");
    assert_eq!(v["chosen_by"], "default");
    let metrics = http
        .get(format!("{}/metrics", weir.proxy_url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("weir_mode{mode=\"automatic\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_mode{mode=\"cache_only\"} 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_goes_offline_when_the_upstream_is_gone_and_back_by_a_probe() {
    if !has_keychain() {
        return;
    }
    let up = Upstream::start().await;
    let addr = up.addr;
    let origin = up.origin();
    let weir = Weir::start(&[&origin], CFG).await;
    let mut events = weir.handle.subscribe();
    let c = weir.client("carol");
    let r = c.get(format!("{origin}{LIST}")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    up.kill();
    assert!(eventually(250, || std::net::TcpStream::connect(addr).is_err()).await);
    // The next list finds the upstream refusing connections: answered stale (stale-if-error).
    let r = c.get(format!("{origin}{LIST}")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        eventually_status(&weir.handle, 500, |s| s.mode.mode == ModeKind::Offline).await,
        "offline"
    );
    let st = weir.handle.status().await;
    assert_eq!(st.mode.chosen, weir::mode::Mode::Automatic);
    assert!(st.mode.reason.contains("unreachable"), "{}", st.mode.reason);
    assert!(st.mode.offline.as_ref().unwrap().cause.contains("up0"));

    // Offline: lists from the cache, marked; creates queued without an attempt.
    let r = c.get(format!("{origin}{LIST}")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; detail=offline"
    );
    let r = c
        .post(format!("{origin}{JOBS}"))
        .body(body(7))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(
        v["weir"]["reason"].as_str().unwrap().contains("offline"),
        "{v}"
    );
    let r = c
        .get(format!("{origin}/agents/sessions/nwo/a/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["kind"], "offline_miss");

    // The upstream comes back: a probe finds it, Weir leaves offline and replays the create once.
    let back = Upstream::start_on(tokio::net::TcpListener::bind(addr).await.unwrap()).await;
    assert!(
        eventually_status(&weir.handle, 500, |s| s.mode.mode == ModeKind::Automatic).await,
        "back online"
    );
    assert!(back.seen().iter().any(|s| s.method == "HEAD"), "by a probe");
    assert!(
        eventually(500, || !posts(&back).is_empty()).await,
        "replayed"
    );
    let doubled = eventually(25, || posts(&back).len() > 1).await;
    assert!(!doubled);
    assert_eq!(posts(&back), vec![body(7)]);
    assert_eq!(
        transitions(&mut events),
        vec![
            (ModeKind::Automatic, ModeKind::Offline),
            (ModeKind::Offline, ModeKind::Automatic)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_down_is_not_offline() {
    let up0 = Upstream::start().await;
    let up1 = Upstream::start().await;
    let weir = Weir::start(&[&up0.origin(), &up1.origin()], CFG).await;
    let c = weir.client("dave");
    up0.kill();
    assert!(eventually(250, || std::net::TcpStream::connect(up0.addr).is_err()).await);
    let r = c
        .get(format!("{}{LIST}", up0.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502, "no copy, upstream unreachable");
    // The failure made Weir check every upstream; up1 answered its probe.
    assert!(eventually(500, || up1.seen().iter().any(|s| s.method == "HEAD")).await);
    assert_eq!(weir.handle.mode().mode, ModeKind::Automatic);
    assert_eq!(up1.count(LIST), 0);
}

/// `weir mode` through the real binary against a running engine: print, choose, print again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_mode_round_trip_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.path().join("weir.toml");
    let cfg_text = format!("listen = \"127.0.0.1:{port}\"\nwatch_github_status = false\n");
    std::fs::write(&cfg, &cfg_text).unwrap();
    let settings = weir::config::parse_str(&cfg_text, "weir.toml").unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    let secret = handle.control_secret().to_string();
    let run = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
        c.arg("mode")
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .arg("--data-dir")
            .arg(&data)
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
    assert!(
        text(&out).starts_with("automatic — the default"),
        "{}",
        text(&out)
    );

    let out = run(&["cache-only"]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text(&out).starts_with("cache-only — chosen with `weir mode`"),
        "{}",
        text(&out)
    );
    let m = handle.mode();
    assert_eq!((m.mode, m.chosen_by), (ModeKind::CacheOnly, ChosenBy::Cli));

    let out = run(&["--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "cache_only");

    let out = run(&["sideways"]).await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    // clap refuses it before anything is sent, naming the modes there are.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'sideways'") && err.contains("cache-only"),
        "{err}"
    );

    let out = run(&["pass-through"]).await.unwrap();
    assert!(out.status.success());
    assert!(handle.is_paused(), "pass-through is what pause was");

    // The choice is kept in the data dir, private, and read back by the next start.
    let saved = std::fs::read_to_string(data.join("mode.json")).unwrap();
    assert!(saved.contains("pass_through"), "{saved}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let bits = std::fs::metadata(data.join("mode.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(bits & 0o777, 0o600);
    }
    handle.shutdown().await;
    let again = weir::start(weir::EngineOptions::new(
        weir::config::parse_str(&cfg_text, "weir.toml").unwrap(),
        data.clone(),
    ))
    .await
    .unwrap();
    let m = again.mode();
    assert_eq!(
        (m.mode, m.chosen_by),
        (ModeKind::PassThrough, ChosenBy::Cli)
    );
    assert!(m.reason.contains("kept across a restart"), "{}", m.reason);
    let out = run(&[]).await.unwrap();
    assert!(
        text(&out).starts_with("pass-through — chosen with `weir mode`"),
        "{}",
        text(&out)
    );
    again.shutdown().await;
}
