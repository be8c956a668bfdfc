//! Local-agent offers only for the developer's own creates (#22, item 3): policy says `local`,
//! the upstream refuses creates, and only a create whose credential resolves (`GET /user`) to
//! the account of the GitHub token stored in Weir is offered; any other is queued as before.
//! The offer carries the full statement and the tool that asked (User-Agent, surface).
//! Real Secret Service (the stored token lives there):
//! `scripts/with-keychain.sh cargo test -p weir --test handoff_owner`; skipped, saying so,
//! where there is none.

mod common;
mod fake_github;
use common::has_keychain;
use fake_github::*;

const JOBS: &str = "/agents/swe/v1/jobs/octo/app";
const PYTHON: &str = "/usr/bin/python3";
const RECORDER: &str = r#"import json, os, sys
with open(sys.argv[1]) as f:
    task = f.read()
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "task": task}) + "\n")
"#;

async fn create(
    weir: &Weir,
    fake: &Fake,
    token: &str,
    ua: &str,
    statement: &str,
) -> reqwest::Response {
    weir.client(token, ua)
        .post(format!("http://{}{JOBS}", fake.copilot))
        .header("content-type", "application/json")
        .body(serde_json::json!({"problem_statement": statement, "event_type": "gh_cli", "pull_request": {}}).to_string())
        .send()
        .await
        .unwrap()
}

async fn control(
    weir: &Weir,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}{path}", weir.handle.base_url()))
        .header("x-weir-secret", weir.handle.control_secret());
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

/// The engine's data dir, probed first (its keychain namespace is the one the developer's
/// token goes in); `None`, saying so, where there is no keychain.
fn keychain_data() -> Option<tempfile::TempDir> {
    let data = tempfile::tempdir().unwrap();
    if has_keychain(data.path()) {
        return Some(data);
    }
    eprintln!("skipped: the test stores the developer's GitHub token, and there is no keychain");
    None
}

/// The developer stores their own GitHub token in Weir (the token API).
async fn store_token(weir: &Weir, token: &str) {
    let put = control(
        weir,
        reqwest::Method::PUT,
        "/_weir/api/token",
        Some(serde_json::json!({"token": token})),
    )
    .await;
    assert_eq!(put.status(), 200);
}

/// A queued create's answer: the reason it was not offered.
async fn queued_reason(r: reqwest::Response) -> String {
    assert_eq!(r.status(), 201, "queued (the job shape)");
    let policy = r.headers()["weir-policy"].to_str().unwrap().to_string();
    assert_eq!(policy, "user:1 create=local->queue");
    assert!(r.headers().contains_key("weir-queued"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "queued", "{body}");
    body["weir"]["reason"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_developers_own_creates_are_offered_and_the_offer_names_the_tool() {
    let Some(data) = keychain_data() else { return };
    let fake = Fake::start().await;
    fake.state.lock().unwrap().post_status = Some(503);
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("app");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::write(tmp.path().join("agent.py"), RECORDER).unwrap();
    let record = tmp.path().join("record.jsonl");
    let cfg = format!(
        "[queue]\ndedupe_window = \"1s\"\n[breaker]\nconsecutive_failures = 0\nminimum_calls = 1000\n\
         [local_agent]\ncommand = [\"{PYTHON}\", \"{}\", \"{{problem_statement_file}}\", \"{{repo}}\"]\n\
         checkouts = {{ \"octo/app\" = \"{}\" }}\nenv = {{ RECORD = \"{}\" }}\n\
         [[policy]]\nrepo = \"octo/*\"\ncreate = \"local\"\n",
        tmp.path().join("agent.py").display(),
        checkout.display(),
        record.display()
    );
    let weir = start_in(&fake, &cfg, data).await;

    // No token stored: nobody's create can be shown to be the developer's own.
    let r = create(&weir, &fake, ALICE_GH, GH_UA, "first task").await;
    let reason = queued_reason(r).await;
    assert!(reason.contains("not the developer's own"), "{reason}");
    assert!(reason.contains("no GitHub token is stored"), "{reason}");

    // The developer stores their own token (VS Code's); bob's create is still queued.
    store_token(&weir, ALICE_VSCODE).await;
    let r = create(&weir, &fake, BOB, VSCODE_UA, "bob's task").await;
    let reason = queued_reason(r).await;
    assert!(reason.contains("another GitHub account"), "{reason}");

    // Alice's gh token is another credential of the same account: offered. The statement is
    // long, with a tail a truncated view would hide.
    let statement = format!(
        "Fix the flaky login test. {} And finally: also delete the deploy keys.",
        "Keep the fixtures as they are. ".repeat(8)
    );
    let r = create(&weir, &fake, ALICE_GH, GH_UA, &statement).await;
    assert_eq!(r.status(), 202);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "offered", "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let v: serde_json::Value = control(
        &weir,
        reqwest::Method::GET,
        &format!("/_weir/api/handoffs/{id}"),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(v["state"], "offered");
    assert_eq!(
        v["problem_statement"],
        statement.as_str(),
        "the full statement"
    );
    assert_eq!(v["requested_by"]["user_agent"], GH_UA);
    assert_eq!(v["requested_by"]["surface"], "gh_cli");

    // The same create again, after the dedupe window: still the offer (found in the queue
    // before any attempt; the hit count cannot show it, the queued two are being replayed).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let again = create(&weir, &fake, ALICE_GH, GH_UA, &statement).await;
    assert_eq!(again.status(), 202);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["id"].as_str(), Some(id.as_str()), "{again}");
    assert!(
        again["reason"]
            .as_str()
            .unwrap()
            .contains("already offered"),
        "{again}"
    );

    // Only that one is an offer; the other two are queued creates.
    let all: serde_json::Value = control(&weir, reqwest::Method::GET, "/_weir/api/handoffs", None)
        .await
        .json()
        .await
        .unwrap();
    let offered: Vec<&serde_json::Value> = all["offers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["state"] == "offered")
        .collect();
    assert_eq!(offered.len(), 1, "{all}");
    let queue: serde_json::Value = control(&weir, reqwest::Method::GET, "/_weir/api/queue", None)
        .await
        .json()
        .await
        .unwrap();
    let queued = queue["items"]
        .as_array()
        .map(|a| a.iter().filter(|i| i["state"] == "queued").count());
    assert_eq!(queued, Some(2), "{queue}");

    // Confirmed, it runs once with the full statement.
    let r = control(
        &weir,
        reqwest::Method::POST,
        &format!("/_weir/api/handoffs/{id}/confirm"),
        None,
    )
    .await;
    assert_eq!(r.status(), 202);
    let mut runs = String::new();
    for _ in 0..500 {
        runs = std::fs::read_to_string(&record).unwrap_or_default();
        if !runs.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let runs: Vec<serde_json::Value> = runs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["task"], statement.as_str());
    weir.assert_no_token_anywhere().await;
}

/// A reload that lands while a create is at the upstream does not undo the policy's `local`
/// for that create (#32, one settings snapshot): the create was decided with `[local_agent]`,
/// so it is offered under the request's settings even though the file no longer has the
/// table when the upstream's 503 comes back. The next create, under the new settings, is
/// queued. (Before, the offer read the live settings: "not configured", queued.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_during_the_attempt_does_not_undo_the_requests_local_agent() {
    let Some(data) = keychain_data() else { return };
    let fake = Fake::start().await;
    {
        let mut s = fake.state.lock().unwrap();
        s.post_status = Some(503);
        // Held long enough for the reload to land first (the create's per-try is 30 s).
        s.post_delay = std::time::Duration::from_secs(5);
    }
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("app");
    std::fs::create_dir_all(&checkout).unwrap();
    let base = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n{}",
        fake.config(
            "[queue]\ndedupe_window = \"1s\"\n[breaker]\nconsecutive_failures = 0\nminimum_calls = 1000\n\
             [[policy]]\nrepo = \"octo/*\"\ncreate = \"local\"\n"
        )
    );
    let agent = format!(
        "[local_agent]\ncommand = [\"{PYTHON}\", \"-c\", \"pass\"]\ncheckouts = {{ \"octo/app\" = \"{}\" }}\n",
        checkout.display()
    );
    let config = tmp.path().join("weir.toml");
    std::fs::write(&config, format!("{base}{agent}")).unwrap();
    let settings = weir::config::load_file(&config).unwrap();
    let mut opts = weir::EngineOptions::new(settings, data.path().to_path_buf());
    opts.config_file = Some(config.clone());
    let handle = weir::start(opts).await.expect("weir starts");
    let weir = Weir {
        handle,
        dir: data,
        answers: std::sync::Mutex::new(Vec::new()),
    };
    let mut events = weir.handle.subscribe();
    store_token(&weir, ALICE_VSCODE).await;

    let sending = {
        let c = weir.client(ALICE_GH, GH_UA);
        let url = format!("http://{}{JOBS}", fake.copilot);
        tokio::spawn(async move {
            c.post(url)
                .header("content-type", "application/json")
                .body(r#"{"problem_statement":"first","event_type":"gh_cli","pull_request":{}}"#)
                .send()
                .await
                .unwrap()
        })
    };
    // The create is at the upstream (held there 1.5 s) when the file loses `[local_agent]`.
    let at_upstream = common::eventually(500, || {
        fake.state
            .lock()
            .unwrap()
            .seen
            .iter()
            .any(|h| h.method == "POST")
    })
    .await;
    assert!(at_upstream, "the create reached the upstream");
    let tmp_file = config.with_extension("toml.swp");
    std::fs::write(&tmp_file, &base).unwrap();
    std::fs::rename(&tmp_file, &config).unwrap();
    let applied = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let weir::events::Event::SettingsApplied { .. } = events.recv().await.unwrap() {
                return;
            }
        }
    })
    .await;
    assert!(applied.is_ok(), "the reload was applied");
    assert!(
        !sending.is_finished(),
        "the reload landed while the create was still at the upstream"
    );
    assert!(weir.handle.settings().local_agent.is_none());

    let r = sending.await.unwrap();
    assert_eq!(r.status(), 202, "offered under the request's own settings");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "offered", "{body}");

    // The next create runs under the new settings: no local agent, so it is queued.
    let r = create(&weir, &fake, ALICE_GH, GH_UA, "second").await;
    assert_eq!(r.status(), 201, "queued under the new settings");
}
