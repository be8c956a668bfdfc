//! A cache that survives restarts (#13): list and view answers are sealed into `cache.sqlite`
//! in the data dir with a key kept in the keychain, and after a restart during an outage they
//! are served stale with the upstream's error. Nothing readable is in the data dir; a tampered
//! record is dropped; the byte budget holds; `weir cache clear` empties memory and disk; without
//! a keychain nothing is written.
//!
//! Every test but the last needs a keychain: run under scripts/with-keychain.sh (they say so
//! and return without one).

mod common;
use common::{with_secret, Upstream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weir::status::{CachePersistence, MemoryOnlyReason};

const LIST: &str = "/agents/sessions";
const VIEW: &str = "/agents/sessions/sess-1";
const TOKEN: &str = "ghu_PERSISTTOKEN1234567890abcdef";
const PROBLEM: &str = "Teach the frobnicator to count sheep backwards";
const TITLE: &str = "Sheep counting, reversed";

use common::has_keychain;

/// Bodies that carry a problem statement and a session title (what must never be readable).
fn sessions(up: &Upstream) {
    let list = format!(
        r#"{{"sessions":[{{"id":"sess-1","name":"{TITLE}","problem_statement":"{PROBLEM}"}}]}}"#
    );
    let view = format!(r#"{{"id":"sess-1","name":"{TITLE}","problem_statement":"{PROBLEM}"}}"#);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = format!(
        r#"{{"token":"tid=copilot-secret","expires_at":{},"refresh_in":1500}}"#,
        now + 1800
    );
    up.set(|b| {
        b.path_bodies = vec![
            ("/copilot_internal/v2/token".into(), token),
            (VIEW.into(), view),
            (LIST.into(), list),
        ]
    });
}

/// Lists and views go stale at once and stay usable on error for a day: after the restart
/// every request asks the upstream first.
const STALE_AT_ONCE: &str = "[classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"24h\"\n[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"24h\"\n[breaker]\nminimum_calls = 1000\n[retry]\nbase = \"1ms\"\ncap = \"5ms\"\n";

async fn start(data: &Path, origin: &str, extra: &str) -> weir::EngineHandle {
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{origin}\"\n{extra}"
    );
    let settings = weir::config::parse_str(&toml, "test.toml").expect("test config");
    weir::start(weir::EngineOptions::new(settings, data.to_path_buf()))
        .await
        .expect("weir starts")
}

fn client(h: &weir::EngineHandle) -> reqwest::Client {
    common::proxied_with_token(h, TOKEN)
}

async fn get(h: &weir::EngineHandle, url: &str) -> (u16, String, String) {
    let r = client(h).get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let cs = r
        .headers()
        .get("cache-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, cs, r.text().await.unwrap())
}

async fn persistence(h: &weir::EngineHandle) -> CachePersistence {
    h.status().await.cache.persistence
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_an_outage_serves_the_persisted_answers_stale() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    sessions(&up);
    let list_url = format!("{}{LIST}", up.origin());
    let view_url = format!("{}{VIEW}", up.origin());

    let first = start(&data, &up.origin(), STALE_AT_ONCE).await;
    let (s, cs, list_body) = get(&first, &list_url).await;
    assert_eq!((s, cs.contains("stored")), (200, true), "{cs}");
    let (s, _, view_body) = get(&first, &view_url).await;
    assert_eq!(s, 200);
    assert!(list_body.contains(PROBLEM));
    // A token answer is cached in memory but never written to disk.
    let (s, cs, _) = get(
        &first,
        &format!("{}/copilot_internal/v2/token", up.origin()),
    )
    .await;
    assert_eq!((s, cs.contains("stored")), (200, true), "{cs}");
    assert_eq!(first.status().await.cache.entries, 3);
    first.flush_cache().await;
    assert!(matches!(
        persistence(&first).await,
        CachePersistence::Persisted { entries: 2, .. }
    ));
    // Stop Weir (the last writes reach the disk), then break the upstream.
    first.shutdown().await;
    up.kill();

    let second = start(&data, &up.origin(), STALE_AT_ONCE).await;
    match persistence(&second).await {
        CachePersistence::Persisted {
            loaded_at_start,
            rejected_at_start,
            entries,
            ..
        } => assert_eq!((loaded_at_start, rejected_at_start, entries), (2, 0, 2)),
        other => panic!("{other:?}"),
    }
    let (s, cs, body) = get(&second, &list_url).await;
    assert_eq!(s, 200, "{cs} {body}");
    assert_eq!(body, list_body, "the same answer as before the restart");
    assert!(
        cs.contains("hit") && cs.contains("fwd=stale") && cs.contains("detail="),
        "stale, with the upstream's error: {cs}"
    );
    let (s, cs, body) = get(&second, &view_url).await;
    assert_eq!((s, body.as_str()), (200, view_body.as_str()), "{cs}");
    assert!(cs.contains("fwd=stale"), "{cs}");
    second.shutdown().await;

    // Nothing readable in the data dir: no problem statement, title or token, in any file.
    let all = files(&data);
    assert!(all.iter().any(|p| p.ends_with("cache.sqlite")), "{all:?}");
    for p in &all {
        let bytes = std::fs::read(p).unwrap();
        for secret in [PROBLEM, TITLE, TOKEN, "sheep", "copilot-secret"] {
            assert!(!contains(&bytes, secret), "{secret:?} in {}", p.display());
        }
        if p.to_string_lossy().contains("cache.sqlite") {
            let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_503_after_the_restart_names_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    sessions(&up);
    let url = format!("{}{LIST}", up.origin());
    let first = start(&data, &up.origin(), STALE_AT_ONCE).await;
    let (_, _, before) = get(&first, &url).await;
    first.shutdown().await;
    assert_eq!(up.count(LIST), 1);
    up.set(|b| b.status = 503);
    let second = start(&data, &up.origin(), STALE_AT_ONCE).await;
    let (s, cs, body) = get(&second, &url).await;
    assert_eq!((s, body), (200, before));
    assert!(cs.contains("fwd=stale; fwd-status=503"), "{cs}");
    assert!(
        up.count(LIST) >= 2,
        "the upstream was asked again after the restart"
    );
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_or_swapped_records_are_dropped_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    sessions(&up);
    let first = start(&data, &up.origin(), STALE_AT_ONCE).await;
    for p in [LIST, VIEW, "/agents/sessions/sess-2"] {
        assert_eq!(get(&first, &format!("{}{p}", up.origin())).await.0, 200);
    }
    first.shutdown().await;
    {
        let db = rusqlite::Connection::open(data.join("cache.sqlite")).unwrap();
        let rows: Vec<(i64, Vec<u8>)> = db
            .prepare("SELECT rowid, record FROM entries ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 3);
        // One record altered by a bit; two others swapped between their rows.
        let mut flipped = rows[0].1.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x01;
        let set = "UPDATE entries SET record = ?1 WHERE rowid = ?2";
        db.execute(set, rusqlite::params![flipped, rows[0].0])
            .unwrap();
        db.execute(set, rusqlite::params![rows[2].1, rows[1].0])
            .unwrap();
        db.execute(set, rusqlite::params![rows[1].1, rows[2].0])
            .unwrap();
    }
    up.set(|b| b.status = 503);
    let second = start(&data, &up.origin(), STALE_AT_ONCE).await;
    match persistence(&second).await {
        CachePersistence::Persisted {
            loaded_at_start,
            rejected_at_start,
            entries,
            ..
        } => assert_eq!((loaded_at_start, rejected_at_start, entries), (0, 3, 0)),
        other => panic!("{other:?}"),
    }
    for p in [LIST, VIEW, "/agents/sessions/sess-2"] {
        let (s, cs, _) = get(&second, &format!("{}{p}", up.origin())).await;
        assert_eq!(s, 503, "the upstream's error passes, nothing stale: {cs}");
        assert!(!cs.contains("hit"), "{cs}");
    }
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_budget_holds_and_the_newest_entries_stay() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    up.set(|b| b.body = Some("x".repeat(3000)));
    let budget = 100_000u64;
    let cfg = format!("[cache]\ndisk_max_bytes = {budget}\n");
    let h = start(&data, &up.origin(), &cfg).await;
    for i in 0..40 {
        let u = format!("{}{LIST}?page={i}", up.origin());
        assert_eq!(get(&h, &u).await.0, 200);
    }
    h.flush_cache().await;
    let CachePersistence::Persisted {
        entries,
        bytes,
        max_bytes,
        ..
    } = persistence(&h).await
    else {
        panic!("persisted")
    };
    assert_eq!(max_bytes, budget);
    assert!(bytes <= budget, "{bytes} > {budget}");
    assert!(
        (5..40).contains(&entries),
        "some entries evicted, some kept: {entries}"
    );
    // Every status read sees memory holding all 40 (its own, larger budget).
    assert_eq!(h.status().await.cache.entries, 40);
    h.shutdown().await;
    let file = std::fs::metadata(data.join("cache.sqlite")).unwrap().len();
    eprintln!("cache.sqlite: {file} bytes for a {budget}-byte budget");
    // Records are counted exactly; the file adds SQLite's pages and B-tree around them.
    assert!(
        file <= budget * 2 + (64 << 10),
        "the file shrinks with the budget: {file}"
    );
    // After a restart the newest pages are the ones that are left.
    up.set(|b| b.status = 503);
    let again = start(&data, &up.origin(), &format!("{cfg}{STALE_AT_ONCE}")).await;
    let newest = get(&again, &format!("{}{LIST}?page=39", up.origin())).await;
    assert_eq!(newest.0, 200, "{}", newest.1);
    let oldest = get(&again, &format!("{}{LIST}?page=0", up.origin())).await;
    assert_eq!(oldest.0, 503, "{}", oldest.1);
    again.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_cache_clear_empties_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    sessions(&up);
    let h = start(&data, &up.origin(), "").await;
    let url = format!("{}{LIST}", up.origin());
    get(&h, &url).await;
    get(&h, &format!("{}{VIEW}", up.origin())).await;
    h.flush_cache().await;
    assert!(matches!(
        persistence(&h).await,
        CachePersistence::Persisted { entries: 2, .. }
    ));
    // The control call needs the secret.
    let api = format!("http://{}/_weir/api/cache/clear", h.local_addr());
    let denied = reqwest::Client::new().post(&api).send().await.unwrap();
    assert_eq!(denied.status(), 401);
    assert_eq!(h.status().await.cache.entries, 2);

    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"{}\"\nwatch_github_status = false\n",
            h.local_addr()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["cache", "--config"])
        .arg(&cfg)
        .arg("--data-dir")
        .arg(&data)
        .arg("clear")
        .env("WEIR_CONTROL_SECRET", h.control_secret())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("2 entries removed"), "{said}");
    assert_eq!(h.status().await.cache.entries, 0);
    assert!(matches!(
        persistence(&h).await,
        CachePersistence::Persisted {
            entries: 0,
            bytes: 0,
            ..
        }
    ));
    // The next request asks the upstream again.
    get(&h, &url).await;
    assert_eq!(up.count(LIST), 2);
    // Cleared again through the API (as the dashboard's button does), then restarted: nothing
    // comes back from disk.
    let r = with_secret(reqwest::Client::new().post(&api), h.control_secret()).await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (v["cleared"].as_u64(), v["entries"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(v["persistence"]["state"], "persisted");
    h.shutdown().await;
    let again = start(&data, &up.origin(), "").await;
    assert!(matches!(
        persistence(&again).await,
        CachePersistence::Persisted {
            loaded_at_start: 0,
            ..
        }
    ));
    again.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_cache_file_leaves_the_cache_in_memory_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    // A directory where the file should be: it can be neither opened nor replaced.
    std::fs::create_dir_all(data.join("cache.sqlite")).unwrap();
    let up = Upstream::start().await;
    sessions(&up);
    let h = start(&data, &up.origin(), "").await;
    match persistence(&h).await {
        CachePersistence::MemoryOnly { reason, detail } => {
            assert_eq!(reason, MemoryOnlyReason::OpenFailed);
            assert!(detail.contains("cache.sqlite"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let url = format!("{}{LIST}", up.origin());
    assert_eq!(get(&h, &url).await.0, 200);
    let (s, cs, _) = get(&h, &url).await;
    assert_eq!(s, 200);
    assert!(cs.contains("hit"), "still cached in memory: {cs}");
    assert_eq!(up.count(LIST), 1);
    let v: serde_json::Value = reqwest::get(format!("http://{}/_weir/api/status", h.local_addr()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["cache"]["persistence"]["state"], "memory_only");
    assert_eq!(v["cache"]["persistence"]["reason"], "open_failed");
    h.shutdown().await;
}

/// A real `weir serve` with no session bus, so no keychain (the test removes the bus address
/// from the child's environment; it runs with or without scripts/with-keychain.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_keychain_nothing_is_written_and_the_status_says_memory_only() {
    use std::io::{BufRead, BufReader};
    let up = Upstream::start().await;
    sessions(&up);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // With no keychain, `auto` keeps the cache key in files (tests/headless.rs); here the file
    // store cannot be made either (`secrets` is a plain file).
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("secrets"), b"not a directory").unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n",
            up.origin()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--data-dir")
        .arg(&data)
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/weir-test-bus",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first.rsplit("http://").next().unwrap().to_string();
    let proxy = reqwest::Proxy::all(format!("http://{base}")).unwrap();
    let c = reqwest::Client::builder().proxy(proxy).build().unwrap();
    for _ in 0..2 {
        let r = c
            .get(format!("{}{LIST}", up.origin()))
            .header("authorization", format!("token {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(up.count(LIST), 1, "cached in memory");
    let v: serde_json::Value = reqwest::get(format!("http://{base}/_weir/api/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();
    assert_eq!(v["cache"]["persistence"]["state"], "memory_only", "{v}");
    assert_eq!(v["cache"]["persistence"]["reason"], "no_keychain", "{v}");
    let names: Vec<String> = files(&data)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("cache.sqlite")),
        "{names:?}"
    );
    for p in files(&data) {
        let bytes = std::fs::read(&p).unwrap();
        assert!(!contains(&bytes, PROBLEM), "{}", p.display());
    }
}

/// A real full disk: `weir serve` in its own mount namespace (`unshare -rm`) whose data dir is
/// a 256 KiB tmpfs. Every request is still answered and cached in memory; the status says the
/// cache file could not be written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_never_breaks_requests_and_the_status_says_why() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    if !has_keychain(&data) {
        return;
    }
    let up = Upstream::start().await;
    up.set(|b| b.body = Some(format!(r#"{{"pad":"{}"}}"#, "y".repeat(16 * 1024))));
    let cfg = tmp.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n",
            up.origin()
        ),
    )
    .unwrap();
    let d = data.display();
    let script = format!(
        "mount -t tmpfs -o size=256k tmpfs '{d}' && exec \"$0\" serve --config \"$1\" --data-dir \"$2\""
    );
    let mut child = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_weir"))
        .arg(&cfg)
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare (util-linux) is needed for this test");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .next()
        .expect("weir serve printed its address")
        .unwrap();
    let base = first.rsplit("http://").next().unwrap().to_string();
    std::thread::spawn(move || for _ in lines {});
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{base}")).unwrap())
        .build()
        .unwrap();
    let status = || async {
        reqwest::get(format!("http://{base}/_weir/api/status"))
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };
    assert_eq!(status().await["cache"]["persistence"]["state"], "persisted");
    for i in 0..40 {
        let r = c
            .get(format!("{}{LIST}?page={i}", up.origin()))
            .header("authorization", format!("token {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "page {i}");
    }
    let mut last = serde_json::Value::Null;
    for _ in 0..250 {
        last = status().await;
        if last["cache"]["persistence"]["state"] == "memory_only" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let p = &last["cache"]["persistence"];
    assert_eq!(p["state"], "memory_only", "{last}");
    assert_eq!(p["reason"], "write_failed", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("full"), "{p}");
    // Still cached in memory, and new answers still come.
    let r = c
        .get(format!("{}{LIST}?page=0", up.origin()))
        .header("authorization", format!("token {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["cache-status"]
        .to_str()
        .unwrap()
        .contains("hit"));
    assert_eq!(up.count(&format!("{LIST}?page=0")), 1);
    child.kill().unwrap();
    child.wait().unwrap();
}

fn pct(v: &mut [std::time::Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

/// Figures for BENCHMARKS.md (not a test of behaviour: it asserts only that the runs did what
/// they claim). `cargo test --release -p weir --test cache_persist bench -- --ignored
/// --nocapture` under scripts/with-keychain.sh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture under scripts/with-keychain.sh"]
async fn bench_persistence_cost() {
    use std::time::Instant as Clock;
    let probe = tempfile::tempdir().unwrap();
    if !has_keychain(&probe.path().join("data")) {
        return;
    }
    let up = Upstream::start().await;
    // A list answer of about 1.5 KiB, like a page of a few sessions.
    let body = format!(r#"{{"sessions":[{}]}}"#, [r#"{"id":"sess-0000","name":"a session title of some length","problem_statement":"a problem statement that says what to do, at some length"}"#; 10].join(","));
    up.set(|b| b.body = Some(body.clone()));
    const MISSES: usize = 2000;
    const HITS: usize = 5000;
    for persist in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // Every miss reaches the upstream: the client rate limit would turn most into 429s.
        let cfg = if persist {
            "[rate_limit]\nenabled = false\n"
        } else {
            "[rate_limit]\nenabled = false\n[cache]\npersist = false\n"
        };
        let h = start(&data, &up.origin(), cfg).await;
        let c = client(&h);
        let mut miss = Vec::with_capacity(MISSES);
        let t0 = Clock::now();
        for i in 0..MISSES {
            let s = Clock::now();
            let r = c
                .get(format!("{}{LIST}?page={i}", up.origin()))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
            miss.push(s.elapsed());
        }
        let miss_secs = t0.elapsed().as_secs_f64();
        h.flush_cache().await;
        let flushed_secs = t0.elapsed().as_secs_f64();
        let mut hit = Vec::with_capacity(HITS);
        let t1 = Clock::now();
        for _ in 0..HITS {
            let s = Clock::now();
            let r = c
                .get(format!("{}{LIST}?page=0", up.origin()))
                .send()
                .await
                .unwrap();
            r.bytes().await.unwrap();
            hit.push(s.elapsed());
        }
        let hit_secs = t1.elapsed().as_secs_f64();
        let p = persistence(&h).await;
        if persist {
            assert!(
                matches!(p, CachePersistence::Persisted { entries, dropped_writes: 0, .. } if entries == MISSES as u64),
                "{p:?}"
            );
        }
        println!(
            "BENCH persist={persist} misses: {:.0}/s p50 {:.0} us p90 {:.0} us p99 {:.0} us (all on disk after {:.2} s of {:.2} s) | fresh hits: {:.0}/s p50 {:.0} us p90 {:.0} us",
            MISSES as f64 / miss_secs,
            pct(&mut miss, 0.5),
            pct(&mut miss, 0.9),
            pct(&mut miss, 0.99),
            flushed_secs,
            miss_secs,
            HITS as f64 / hit_secs,
            pct(&mut hit, 0.5),
            pct(&mut hit, 0.9),
        );
        h.shutdown().await;
    }
    for n in [0usize, 1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let h = start(&data, &up.origin(), "[rate_limit]\nenabled = false\n").await;
        let c = client(&h);
        let urls: Vec<String> = (0..n)
            .map(|i| format!("{}{LIST}?page={i}", up.origin()))
            .collect();
        for chunk in urls.chunks(16) {
            let all = chunk.iter().map(|u| {
                let c = c.clone();
                async move { c.get(u).send().await.unwrap().bytes().await.unwrap() }
            });
            futures::future::join_all(all).await;
        }
        h.flush_cache().await;
        // 16 at a time can outrun the one writer: the writes it could not queue are dropped
        // (counted) and those entries stay in memory only.
        let (stored, dropped) = match persistence(&h).await {
            CachePersistence::Persisted {
                entries,
                dropped_writes,
                ..
            } => (entries, dropped_writes),
            other => panic!("{other:?}"),
        };
        assert_eq!(stored + dropped, n as u64);
        h.shutdown().await;
        let file = std::fs::metadata(data.join("cache.sqlite"))
            .map(|m| m.len())
            .unwrap_or(0);
        let mut times = Vec::new();
        for _ in 0..3 {
            let s = Clock::now();
            let h = start(&data, &up.origin(), "").await;
            times.push(s.elapsed());
            let p = persistence(&h).await;
            assert!(
                matches!(p, CachePersistence::Persisted { loaded_at_start, .. } if loaded_at_start == stored),
                "{p:?}"
            );
            h.shutdown().await;
        }
        println!(
            "BENCH startup with {stored} entries of {n} written, {dropped} dropped while filling 16 at a time ({file} bytes on disk): median {:.1} ms (runs: {:?})",
            pct(&mut times, 0.5) / 1000.0,
            times
        );
    }
}
