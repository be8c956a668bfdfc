//! A keychain that gets locked while creates are queued, through the whole engine, against a
//! real gnome-keyring: queued creates wait ("waiting for keychain"), none fails, none is sent;
//! a new create that would need the queue gets a clear 503; after the keychain is unlocked the
//! queued creates replay, each exactly once.
//!
//! Locking would break every other test sharing the keyring, so the work runs in a child test
//! under its own private D-Bus session and gnome-keyring (the pattern of
//! `crates/keychain/tests/locked.rs`): the parent starts this test binary again, filtered to the
//! `#[ignore]`d child, under `scripts/with-keychain.sh`, and checks it reached its final line.

mod common;
use common::{eventually, with_secret, Upstream, Weir};
use std::process::{Command, Stdio};

const CHILD_VAR: &str = "WEIR_LOCKED_ENGINE_CHILD";
const DONE: &str = "CHILD-REACHED-END";
const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

fn tools_present() -> bool {
    let missing: Vec<&str> = ["dbus-run-session", "gnome-keyring-daemon", "dbus-send"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED: {missing:?} not found; install dbus-x11 gnome-keyring");
    }
    missing.is_empty()
}

#[test]
fn queued_creates_wait_for_a_locked_keychain_and_replay_once_after_unlock() {
    if !tools_present() {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/with-keychain.sh");
    let child = "child_locked_keychain_engine";
    let out = Command::new(script)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child, "--ignored", "--nocapture"])
        .env(CHILD_VAR, child)
        // Not the parent's keyring session: the child locks its own.
        .env_remove("WEIR_KEYCHAIN_BUS")
        .env_remove("WEIR_TEST_NO_KEYCHAIN")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{child} failed:\n{text}");
    assert!(
        text.contains(DONE),
        "{child} did not run to the end:\n{text}"
    );
}

fn lock_login_keyring() {
    let ok = Command::new("dbus-send")
        .args([
            "--session",
            "--print-reply",
            "--dest=org.freedesktop.secrets",
            "/org/freedesktop/secrets",
            "org.freedesktop.Secret.Service.Lock",
            "array:objpath:/org/freedesktop/secrets/collection/login",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "could not lock the login keyring");
}

/// What a person does at the unlock prompt: here, a new daemon replaces the running one and
/// unlocks the same login keyring (same data dir) with its password.
fn unlock_login_keyring() -> std::process::Child {
    use std::io::Write;
    let mut d = Command::new("gnome-keyring-daemon")
        .args([
            "--replace",
            "--foreground",
            "--unlock",
            "--components=secrets",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The password scripts/with-keychain.sh created the throwaway keyring with.
    d.stdin.take().unwrap().write_all(b"weir-test").unwrap();
    d
}

async fn create(weir: &Weir, up: &Upstream, i: usize) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"problem_statement": format!("locked task {i}")}).to_string();
    let r = weir
        .client("locked-user")
        .post(format!("{}{JOBS}", up.origin()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

fn posts(up: &Upstream) -> Vec<String> {
    up.seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .map(|s| String::from_utf8_lossy(&s.body).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child of queued_creates_wait_for_a_locked_keychain_and_replay_once_after_unlock"]
async fn child_locked_keychain_engine() {
    if std::env::var(CHILD_VAR).as_deref() != Ok("child_locked_keychain_engine") {
        return;
    }
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    // Credentials in the keychain (the default); a breaker that stays closed.
    let weir = Weir::start(
        &[&up.origin()],
        "[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n",
    )
    .await;
    assert_eq!(
        weir.handle.status().await.queue.credentials,
        weir::secrets::Backend::Keychain
    );
    for i in 0..3 {
        let (status, body) = create(&weir, &up, i).await;
        assert_eq!(status, 201, "queued while the upstream fails: {body}");
    }
    lock_login_keyring();
    // A create that needs the queue while the keychain is locked: refused clearly, not lost
    // silently (the client keeps it and is told why and how to fix it).
    let (status, p) = create(&weir, &up, 99).await;
    assert_eq!(status, 503, "{p}");
    assert_eq!(p["kind"], "queue_unavailable", "{p}");
    let text = p.to_string().to_lowercase();
    assert!(
        text.contains("keychain") || text.contains("credential"),
        "{p}"
    );

    // Every create so far met the 503 (counted upstream, nothing made). The upstream heals;
    // the queued creates must wait for the keychain, not fail.
    let failed_posts = posts(&up).len();
    up.set(|b| b.status = 201);
    let secret = weir.handle.control_secret().to_string();
    let queue_url = format!("{}/_weir/api/queue", weir.proxy_url());
    let mut waiting = false;
    for _ in 0..500 {
        let q: serde_json::Value = with_secret(reqwest::Client::new().get(&queue_url), &secret)
            .await
            .json()
            .await
            .unwrap();
        let items = q["items"].as_array().cloned().unwrap_or_default();
        assert!(
            items.iter().all(|it| it["state"] != "failed"),
            "an item failed: {q}"
        );
        if items.iter().any(|it| {
            it["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("waiting for keychain"))
        }) {
            waiting = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(waiting, "an item shows it waits for the keychain");
    assert_eq!(posts(&up).len(), failed_posts, "nothing sent while locked");
    let c = weir.handle.status().await.queue.counts.unwrap();
    assert_eq!(
        (c.failed, c.queued + c.replaying + c.in_doubt),
        (0, 3),
        "{c:?}"
    );

    let mut daemon = unlock_login_keyring();
    let all = eventually(3000, || posts(&up).len() == failed_posts + 3).await;
    assert!(all, "replayed after unlock: {:?}", posts(&up));
    let drained = common::eventually_status(&weir.handle, 750, |s| {
        s.queue
            .counts
            .as_ref()
            .is_some_and(|c| c.queued + c.replaying + c.in_doubt == 0)
    })
    .await;
    assert!(drained, "{:?}", weir.handle.status().await.queue);
    let sent = posts(&up);
    for i in 0..3 {
        let n = sent[failed_posts..]
            .iter()
            .filter(|b| b.contains(&format!("locked task {i}")))
            .count();
        assert_eq!(n, 1, "task {i} replayed exactly once: {sent:?}");
    }
    // The refused create was the client's to resend: Weir never replays it.
    assert!(!sent[failed_posts..]
        .iter()
        .any(|b| b.contains("locked task 99")));
    let c = weir.handle.status().await.queue.counts.unwrap();
    assert_eq!(c.failed, 0, "{c:?}");
    weir.handle.shutdown().await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    println!("{DONE}");
}
