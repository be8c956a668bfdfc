//! Creates are never lost and never doubled: a real SQLite file, a real keychain (run the suite
//! under scripts/with-keychain.sh), real loopback upstreams, and a real `kill -9`.

mod common;
use common::{eventually, Upstream, Weir};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";
/// Credentials in memory (no keychain needed) and a breaker that never opens.
const MEMORY_QUEUE: &str = "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";

fn body(i: usize) -> String {
    format!(r#"{{"problem_statement":"task {i}","event_type":"weir-test"}}"#)
}

/// A queue item as the control API shows it (reads need the control secret).
async fn read(url: &str, secret: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(url)
        .header("x-weir-secret", secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_identical_creates_make_one_upstream_create() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.delay = Duration::from_millis(400);
        b.status = 201;
        b.body = Some(r#"{"job_id":"j1","session_id":"s1"}"#.into());
    });
    let weir = Weir::start(&[&up.origin()], "[queue]\ncredentials = \"memory\"\n").await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (c, u) = (weir.client("alice"), format!("{}{JOBS}", up.origin()));
            tokio::spawn(async move {
                let r = c.post(u).body(body(1)).send().await.unwrap();
                (r.status().as_u16(), r.bytes().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(up.count(JOBS), 1, "one upstream create");
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "identical answers"
    );
    assert_eq!(answers[0].0, 201);
    // A different body from the same identity is a different create.
    weir.client("alice")
        .post(format!("{}{JOBS}", up.origin()))
        .body(body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(up.count(JOBS), 2);
}

#[tokio::test]
async fn fatal_answers_are_never_queued() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "[queue]\ncredentials = \"memory\"\n").await;
    for status in [400u16, 401, 403, 404, 422] {
        up.set(|b| b.status = status);
        let r = weir
            .client("a")
            .post(format!("{}{JOBS}", up.origin()))
            .body(body(status as usize))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "passed through as it came");
    }
    let s = weir.status().await;
    assert_eq!(s["queue"]["queued"], 0);
    assert_eq!(up.count(JOBS), 5);
}

#[tokio::test]
async fn a_failing_upstream_gets_the_create_queued_then_replayed_once() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let weir = Weir::start(&[&up.origin()], MEMORY_QUEUE).await;
    let r = weir
        .client("a")
        .post(format!("{}{JOBS}", up.origin()))
        .body(body(7))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    assert!(loc.starts_with("/_weir/api/queue/"));
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["status"], "queued");
    up.set(|b| {
        b.status = 201;
        b.body = Some(r#"{"job_id":"j7"}"#.into());
    });
    let url = format!("{}{loc}", weir.proxy_url());
    let mut done = false;
    for _ in 0..300 {
        let item = read(&url, weir.handle.control_secret()).await;
        if item["state"] == "done" {
            assert_eq!(item["result"]["job_id"], "j7");
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(done, "replayed");
    let creates: Vec<_> = up
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(
        creates.len(),
        2,
        "the failed attempt and exactly one replay"
    );
    assert_eq!(
        creates[1].headers["authorization"], "token a",
        "the replay carries the credential"
    );
    assert_eq!(&creates[1].body[..], body(7).as_bytes());
}

fn spawn_serve(config: &std::path::Path, data: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.rsplit("http://").next().unwrap().to_string();
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Needs the real keychain: credentials must survive the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_creates_survive_kill_9_and_reach_the_upstream_exactly_once() {
    // The upstream's port is reserved, then closed: connection refused = upstream down.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = listener.local_addr().unwrap();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(&cfg, format!("default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\n[[upstream]]\nname = \"jobs\"\norigin = \"http://{up_addr}\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n")).unwrap();
    let (mut weir, addr) = spawn_serve(&cfg, dir.path());
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{addr}")).unwrap())
        .build()
        .unwrap();
    for i in 0..20 {
        let r = client
            .post(format!("http://{up_addr}{JOBS}"))
            .header("authorization", format!("token u{i}"))
            .body(body(i))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 201, "{text}");
    }
    weir.kill().unwrap(); // SIGKILL
    weir.wait().unwrap();

    let up = Upstream::start_on(tokio::net::TcpListener::bind(up_addr).await.unwrap()).await;
    up.set(|b| {
        b.status = 201;
        b.body = Some(r#"{"job_id":"j"}"#.into());
    });
    let (mut weir, _addr) = spawn_serve(&cfg, dir.path());
    let all_in = eventually(1000, || up.count(JOBS) >= 20).await;
    // Give a double (if any) the chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    weir.kill().unwrap();
    weir.wait().unwrap();
    assert!(all_in, "only {} of 20 replayed", up.count(JOBS));
    let mut per_body: HashMap<Vec<u8>, usize> = HashMap::new();
    for s in up.seen().into_iter().filter(|s| s.method == "POST") {
        *per_body.entry(s.body.to_vec()).or_default() += 1;
    }
    assert_eq!(per_body.len(), 20);
    assert!(per_body.values().all(|n| *n == 1), "{per_body:?}");
}

#[tokio::test]
async fn an_in_doubt_create_found_upstream_is_not_sent_again() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let weir = Weir::start(&[&up.origin()], MEMORY_QUEUE).await;
    weir.handle.shutdown().await;
    // Queue an item directly, as a crash mid-replay leaves it: state replaying.
    let db = weir.dir.path().join("queue.sqlite3");
    {
        let mut store = weir_store::Store::open(&db).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let it = store
            .insert(
                &weir_store::NewItem {
                    upstream: "up0".into(),
                    method: http::Method::POST,
                    path_and_query: JOBS.into(),
                    headers: vec![],
                    body: body(9).into_bytes(),
                    identity: "x".into(),
                    credential_ref: None,
                    dedupe_key: "k9".into(),
                    repo: Some("octo/repo".into()),
                    problem_statement: Some("task 9".into()),
                    in_doubt: false,
                    provisional: None,
                },
                now,
            )
            .unwrap();
        store.mark_replaying(it.id, now).unwrap();
    }
    // The upstream already has the session (the crashed attempt went through).
    let created = weir::time_fmt::rfc3339(std::time::SystemTime::now());
    // In the real shapes: the session in the list, the statement in the job behind it.
    up.set(|b| {
        b.status = 200;
        b.path_bodies = vec![
            (
                "/agents/sessions?".into(),
                format!(r#"{{"sessions":[{{"id":"sess-9","name":"task 9","created_at":"{created}","last_updated_at":"{created}"}}]}}"#),
            ),
            (
                format!("{JOBS}/session/sess-9"),
                r#"{"job_id":"job-9","session_id":"sess-9","problem_statement":"task 9"}"#.into(),
            ),
        ];
    });
    let settings = weir::config::parse_str(&format!("default_upstreams = false\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n[queue]\ncredentials = \"memory\"\n", up.origin()), "t").unwrap();
    let again = weir::start(weir::EngineOptions::new(
        settings,
        weir.dir.path().to_path_buf(),
    ))
    .await
    .unwrap();
    let mut state = String::new();
    for _ in 0..200 {
        let v: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/_weir/api/queue/1", again.base_url()))
            .header("x-weir-secret", again.control_secret())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state = v["state"].as_str().unwrap_or("").to_string();
        if state == "done" {
            assert_eq!(v["result"]["session"]["id"], "sess-9");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "done");
    assert_eq!(
        up.seen().iter().filter(|s| s.method == "POST").count(),
        0,
        "no second create"
    );
    again.shutdown().await;
}

#[tokio::test]
async fn without_a_keychain_creates_are_not_queued_and_the_client_is_told_why() {
    if std::env::var("DBUS_SESSION_BUS_ADDRESS").is_ok()
        && std::env::var("WEIR_TEST_NO_KEYCHAIN").is_err()
    {
        // Covered by running this binary once more without a bus (scripts/test.sh does).
        return;
    }
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    // With no keychain, `auto` keeps credentials in files (tests/headless.rs); here the file
    // store cannot be made either (`secrets` is a plain file), so there is no store at all.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secrets"), b"not a directory").unwrap();
    let weir = Weir::start_in(
        dir,
        &[&up.origin()],
        "[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n",
    )
    .await;
    // The create's answer: its status and its problem document.
    let create = |n: usize| {
        let r = weir
            .client("a")
            .post(format!("{}{JOBS}", up.origin()))
            .body(body(n));
        async move {
            let r = r.send().await.unwrap();
            (r.status(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, p) = create(1).await;
    assert_eq!(status, 503);
    assert_eq!(p["kind"], "queue_unavailable");
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains("credential"), "{p}");
    assert!(detail.contains("file store"), "{p}");
    assert_eq!(
        p["maybe_created"],
        serde_json::Value::Null,
        "a 503 was not made: {p}"
    );

    // A 502 may have come after the work (the create is in doubt): with no queue to look it
    // up later, the client is told it may exist upstream already.
    up.set(|b| b.status = 502);
    let (status, p) = create(2).await;
    assert_eq!(status, 503);
    assert_eq!(p["kind"], "queue_unavailable");
    assert_eq!(p["maybe_created"], true, "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .ends_with("check its session list before creating again"),
        "{p}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_cancels_queued_creates() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(&cfg, format!("default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\n[[upstream]]\nname = \"jobs\"\norigin = \"{}\"\n[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n", up.origin())).unwrap();
    let (mut child, secret) = common::serve_with_secret(&cfg, dir.path());
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://127.0.0.1:{port}")).unwrap())
        .build()
        .unwrap();
    let r = client
        .post(format!("{}{JOBS}", up.origin()))
        .header("authorization", "token z")
        .body(body(3))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let cli = |args: &[&str], secret: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.arg("queue").arg("--config").arg(&cfg).args(args);
        if let Some(s) = secret {
            c.env("WEIR_CONTROL_SECRET", s);
        }
        c.output().unwrap()
    };
    let ls = cli(&["ls"], Some(&secret));
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.status.success() && text.contains(JOBS), "{text}");
    let denied = cli(&["cancel", "1"], Some("wrong"));
    assert!(!denied.status.success());
    let ok = cli(&["cancel", "1"], Some(&secret));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let show = cli(&["show", "1"], Some(&secret));
    assert!(String::from_utf8_lossy(&show.stdout).contains("\"state\": \"cancelled\""));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A create whose attempt timed out after it was sent may exist upstream: it is queued
/// `in_doubt` and looked up before any replay, never sent blind a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_timed_out_is_looked_up_not_resent() {
    let up = Upstream::start().await;
    let created = weir::time_fmt::rfc3339(std::time::SystemTime::now());
    up.set(|b| {
        b.delay = Duration::from_millis(800);
        b.status = 201;
        // The real shapes: the session has no problem statement; the job behind it has.
        b.path_bodies = vec![
            (
                "/agents/sessions?".into(),
                format!(r#"{{"sessions":[{{"id":"sess-t","name":"task 5","created_at":"{created}","last_updated_at":"{created}"}}]}}"#),
            ),
            (
                format!("{JOBS}/session/sess-t"),
                r#"{"job_id":"job-t","session_id":"sess-t","problem_statement":"task 5"}"#.into(),
            ),
        ];
    });
    let cfg = "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n[classes.create]\nper_try_timeout = \"200ms\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let r = weir
        .client("a")
        .post(format!("{}{JOBS}", up.origin()))
        .body(body(5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let url = format!("{}{loc}", weir.proxy_url());
    let mut last = serde_json::Value::Null;
    for _ in 0..300 {
        last = read(&url, weir.handle.control_secret()).await;
        if last["state"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last["state"], "done", "{last}");
    assert_eq!(last["result"]["session"]["id"], "sess-t");
    assert_eq!(
        up.seen().iter().filter(|s| s.method == "POST").count(),
        1,
        "sent once, never resent"
    );
}

/// Issue 31, item 2: the queue is bounded per credential and in all. Past a cap a create gets
/// a `queue_refused` problem that names the cap and what to do; a create with no credential is
/// never queued (a page's `no-cors` POST could otherwise fill the disk and the keychain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_per_credential_and_in_all() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let cfg = "[queue]\ncredentials = \"memory\"\nmax_items = 3\nmax_items_per_identity = 2\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let create = |client: reqwest::Client, i: usize| {
        let url = format!("{}{JOBS}", up.origin());
        async move {
            let r = client.post(url).body(body(i)).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<serde_json::Value>().await.unwrap())
        }
    };
    assert_eq!(create(weir.client("a"), 1).await.0, 201);
    assert_eq!(create(weir.client("a"), 2).await.0, 201);
    let (status, p) = create(weir.client("a"), 3).await;
    assert_eq!(
        (status, p["kind"].as_str()),
        (503, Some("queue_refused")),
        "{p}"
    );
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("queue.max_items_per_identity = 2"),
        "{detail}"
    );
    assert!(detail.contains("weir queue cancel"), "{detail}");
    assert_eq!(create(weir.client("b"), 4).await.0, 201);
    let (status, p) = create(weir.client("c"), 5).await;
    assert_eq!(
        (status, p["kind"].as_str()),
        (503, Some("queue_refused")),
        "{p}"
    );
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("queue.max_items = 3"),
        "{p}"
    );
    // No credential at all: never queued, even with room.
    let anonymous = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(weir.proxy_url()).unwrap())
        .build()
        .unwrap();
    let (status, p) = create(anonymous, 6).await;
    assert_eq!(
        (status, p["kind"].as_str()),
        (503, Some("queue_refused")),
        "{p}"
    );
    assert!(
        p["detail"].as_str().unwrap().contains("no credential"),
        "{p}"
    );
    let list = read(
        &format!("{}/_weir/api/queue", weir.proxy_url()),
        weir.handle.control_secret(),
    )
    .await;
    let items = list["items"].as_array().map(Vec::len);
    assert_eq!(items, Some(3), "{list}");
}
