//! Local-agent hand-off (#14) against the real engine, its real SQLite queue and a real
//! program: a Python script (started directly, no shell) that appends its argv, environment,
//! working directory and the problem statement file's text to a record file.

mod common;
use common::{eventually, with_secret, Upstream, Weir};
use std::path::{Path, PathBuf};
use weir::handoff::{CreateRequest, HandoffError, HandoffRequest};

const JOBS: &str = "/agents/swe/v1/jobs/octo/app";
const STATEMENT: &str = "Fix the flaky login test; it fails 1 run in 20.";

/// The interpreter itself (not an `env` lookup: a version manager's shim would add its own
/// variables to the environment this test checks).
const PYTHON: &str = "/usr/bin/python3";

const RECORDER: &str = r#"#!/usr/bin/env python3
import json, os, sys
text = None
for i, a in enumerate(sys.argv):
    if a == "--task-file":
        with open(sys.argv[i + 1]) as f:
            text = f.read()
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                        "task": text}) + "\n")
print("working on it with ghp_notarealtoken123 in the log")
"#;

/// A checkout of octo/app under `<tmp>/src`, the recorder script, and the `[local_agent]`
/// table pointing at both.
struct Agent {
    tmp: tempfile::TempDir,
}

impl Agent {
    fn new() -> Agent {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("src/app/.git")).unwrap();
        // A flat clone under a root is taken only for the owner its remote names.
        std::fs::write(
            tmp.path().join("src/app/.git/config"),
            "[remote \"origin\"]\n\turl = https://github.com/octo/app.git\n",
        )
        .unwrap();
        let script = tmp.path().join("agent.py");
        std::fs::write(&script, RECORDER).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        Agent { tmp }
    }

    fn record(&self) -> PathBuf {
        self.tmp.path().join("record.jsonl")
    }

    fn checkout(&self) -> PathBuf {
        self.tmp.path().join("src/app")
    }

    fn toml(&self, extra: &str) -> String {
        let recorder = format!(
            "\"{PYTHON}\", \"{script}\", \"--repo\", \"{{repo}}\", \"--in\", \"{{checkout}}\", \
             \"--task-file\", \"{{problem_statement_file}}\", \"--offer={{offer_id}}\", \"{{problem_statement}}\"",
            script = self.tmp.path().join("agent.py").display(),
        );
        self.toml_running(&recorder, extra)
    }

    /// `[local_agent]` with `argv` (the inside of the `command` array).
    fn toml_running(&self, argv: &str, extra: &str) -> String {
        format!(
            "[queue]\ncredentials = \"memory\"\n[breaker]\nconsecutive_failures = 0\nminimum_calls = 1000\n\
             [local_agent]\ncommand = [{argv}]\n\
             roots = [\"{src}\"]\nenv = {{ RECORD = \"{record}\" }}\n{extra}",
            src = self.tmp.path().join("src").display(),
            record = self.record().display(),
        )
    }

    fn runs(&self) -> Vec<serde_json::Value> {
        read_runs(&self.record())
    }
}

fn read_runs(path: &Path) -> Vec<serde_json::Value> {
    match std::fs::read_to_string(path) {
        Ok(t) => t
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn by_hand(repo: &str) -> HandoffRequest {
    HandoffRequest {
        upstream: "up0".into(),
        repo: repo.into(),
        problem_statement: STATEMENT.into(),
        base_branch: Some("main".into()),
        rule: "octo-local".into(),
        create: None,
    }
}

/// An offer carrying a real create request (as the policy phase makes it).
fn with_create(up: &Upstream) -> HandoffRequest {
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", "token alice".parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    HandoffRequest {
        create: Some(CreateRequest {
            uri: format!("{}{JOBS}", up.origin()).parse().unwrap(),
            headers,
            body: format!(r#"{{"problem_statement":"{STATEMENT}"}}"#).into(),
            dedupe_key: "test-create-1".into(),
            identity: "alice-hash".into(),
        }),
        ..by_hand("octo/app")
    }
}

async fn api(weir: &Weir, method: reqwest::Method, path: &str) -> reqwest::Response {
    let url = format!("{}/_weir/api/handoffs{path}", weir.proxy_url());
    with_secret(
        reqwest::Client::new().request(method, url),
        weir.handle.control_secret(),
    )
    .await
}

async fn view(weir: &Weir, id: &str) -> serde_json::Value {
    api(weir, reqwest::Method::GET, &format!("/{id}"))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_offer_runs_the_command_once_with_the_right_arguments() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], &agent.toml("")).await;

    let offer = weir
        .handle
        .handoffs()
        .offer(by_hand("octo/app"))
        .await
        .unwrap();
    assert_eq!(offer.location, format!("/_weir/api/handoffs/{}", offer.id));
    // Offered, not run.
    assert!(!agent.record().exists());
    let st = weir.handle.status_now().handoffs;
    assert!(st.configured);
    assert_eq!(st.pending.len(), 1);
    assert_eq!(st.pending[0].repo, "octo/app");
    assert_eq!(st.pending[0].rule, "octo-local");
    assert_eq!(st.pending[0].excerpt, STATEMENT);
    // The open status document leaves the private fields out.
    let open = weir.status().await;
    assert_eq!(open["handoffs"]["pending"][0]["rule"], "octo-local");
    assert!(!open["handoffs"].to_string().contains("octo/app"));

    // Reads and answers need the control secret, and a foreign Origin is refused.
    let url = format!("{}/_weir/api/handoffs", weir.proxy_url());
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 401);
    let confirm_url = format!("{url}/{}/confirm", offer.id);
    let evil = reqwest::Client::new()
        .post(&confirm_url)
        .header("x-weir-secret", weir.handle.control_secret())
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);
    let no_secret = reqwest::Client::new()
        .post(&confirm_url)
        .send()
        .await
        .unwrap();
    assert_eq!(no_secret.status(), 401);
    assert!(!agent.record().exists());

    let list: serde_json::Value = api(&weir, reqwest::Method::GET, "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["configured"], true);
    assert_eq!(list["offers"][0]["state"], "offered");
    assert_eq!(
        list["offers"][0]["back_to_queue"], false,
        "made by hand: withdrawn"
    );
    assert_eq!(list["offers"][0]["problem_statement"], STATEMENT);
    assert_eq!(
        list["offers"][0]["checkout"],
        agent.checkout().display().to_string()
    );

    let mut events = weir.handle.subscribe();
    let r = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/confirm", offer.id),
    )
    .await;
    assert_eq!(r.status(), 202);
    // A second confirmation, while it runs or after, never starts it again.
    let again = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/confirm", offer.id),
    )
    .await;
    assert_eq!(again.status(), 409);
    let p: serde_json::Value = again.json().await.unwrap();
    assert!(
        p["type"].as_str().unwrap().ends_with("handoff_answered"),
        "{p}"
    );
    let declined = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/decline", offer.id),
    )
    .await;
    assert_eq!(declined.status(), 409);

    let mut finished = None;
    while finished.is_none() {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(30), events.recv())
            .await
            .expect("the command ends")
            .unwrap();
        if let weir::events::Event::Handoff {
            change: weir::events::HandoffChange::Finished,
            id,
            detail,
            ..
        } = ev
        {
            finished = Some((id, detail));
        }
    }
    let (id, detail) = finished.unwrap();
    assert_eq!(id.to_string(), offer.id);
    assert!(detail.contains("exit code 0"), "{detail}");

    let runs = agent.runs();
    assert_eq!(runs.len(), 1, "exactly one run");
    let run = &runs[0];
    let checkout = agent.checkout().display().to_string();
    let argv: Vec<&str> = run["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(argv[..4], ["--repo", "octo/app", "--in", checkout.as_str()]);
    assert_eq!(argv[4], "--task-file");
    assert_eq!(argv[6], format!("--offer={}", offer.id));
    assert_eq!(
        argv[7], STATEMENT,
        "the statement is one argument, not split"
    );
    assert_eq!(run["task"], STATEMENT, "the statement file holds it");
    assert_eq!(run["cwd"], checkout);
    // The environment: Weir's facts and the configured env; nothing else but the basics.
    let env = run["env"].as_object().unwrap();
    assert_eq!(env["WEIR_REPO"], "octo/app");
    assert_eq!(env["WEIR_CHECKOUT"], checkout);
    assert_eq!(env["WEIR_BASE_BRANCH"], "main");
    assert_eq!(env["RECORD"], agent.record().display().to_string());
    let allowed = [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TERM", "RECORD",
    ];
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        assert!(
            !env.contains_key("CARGO_MANIFEST_DIR"),
            "Weir's own environment leaked"
        );
    }
    for k in env.keys() {
        assert!(
            allowed.contains(&k.as_str()) || k.starts_with("WEIR_"),
            "the agent got `{k}` from Weir's environment"
        );
    }
    // The statement file is gone once the command ended.
    assert!(!Path::new(argv[5]).exists());

    let v = view(&weir, &offer.id).await;
    assert_eq!(v["state"], "handed_off");
    assert_eq!(v["running"], false);
    assert_eq!(v["outcome"]["exit_code"], 0);
    let tail = v["outcome"]["output_tail"].as_str().unwrap();
    assert!(tail.contains("working on it"), "{tail}");
    assert!(
        !tail.contains("notarealtoken"),
        "tokens are blanked: {tail}"
    );
    // In the queue's history as handed_off.
    let q: serde_json::Value = with_secret(
        reqwest::Client::new().get(format!("{}/_weir/api/queue/{}", weir.proxy_url(), offer.id)),
        weir.handle.control_secret(),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(q["state"], "handed_off");
    // ... with the hand-off's record under `result` (the dashboard's queue table shows it),
    // read from the offers table, and in the list too.
    assert_eq!(q["result"]["outcome"]["exit_code"], 0, "{q}");
    assert_eq!(q["result"]["running"], false, "{q}");
    assert_eq!(q["result"]["program"], PYTHON, "{q}");
    let all: serde_json::Value = with_secret(
        reqwest::Client::new().get(format!("{}/_weir/api/queue", weir.proxy_url())),
        weir.handle.control_secret(),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(all["items"][0]["result"], q["result"], "{all}");
    let st = weir.handle.status_now().handoffs;
    assert!(st.pending.is_empty());
    assert_eq!(
        st.recent[0].outcome,
        weir::status::HandoffOutcome::Succeeded
    );
    assert_eq!(st.recent[0].exit_code, Some(0));
    // One offer, confirmed once (the second confirm and the decline were refused), one run.
    assert_eq!(
        st.counts,
        weir::status::HandoffCounts {
            offered: 1,
            confirmed: 1,
            succeeded: 1,
            ..Default::default()
        }
    );
    let metrics = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "weir_handoff_offers_waiting 0",
        "weir_handoff_offers_total 1",
        "weir_handoff_answers_total{answer=\"confirmed\"} 1",
        "weir_handoff_answers_total{answer=\"declined\"} 0",
        "weir_handoff_runs_total{result=\"succeeded\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in:\n{metrics}"
        );
    }
    // Nothing went upstream.
    assert_eq!(up.total(), 0);
    // Confirming after the end is still refused, and nothing ran again.
    let late = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/confirm", offer.id),
    )
    .await;
    assert_eq!(late.status(), 409);
    assert_eq!(agent.runs().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_offer_goes_back_to_the_queue_and_nothing_runs() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 201;
        b.body = Some(r#"{"job_id":"j1","session_id":"s1"}"#.into());
    });
    let weir = Weir::start(&[&up.origin()], &agent.toml("")).await;
    let offer = weir
        .handle
        .handoffs()
        .offer(with_create(&up))
        .await
        .unwrap();
    // The same create offered again is the same offer, not a second one.
    let again = weir
        .handle
        .handoffs()
        .offer(with_create(&up))
        .await
        .unwrap();
    assert_eq!(again.id, offer.id);
    assert_eq!(view(&weir, &offer.id).await["state"], "offered");
    // Offered creates are never replayed.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(up.count(JOBS), 0);

    let r = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/decline", offer.id),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(
        matches!(v["state"].as_str(), Some("queued" | "replaying" | "done")),
        "{v}"
    );
    // Back in the queue: replayed once, with the caller's credential, and done.
    let replayed = eventually(500, || up.count(JOBS) == 1).await;
    assert!(
        replayed,
        "the declined create was replayed: {}",
        view(&weir, &offer.id).await
    );
    let seen = up.seen();
    assert_eq!(
        seen[0]
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("token alice")
    );
    let mut state = String::new();
    for _ in 0..250 {
        state = view(&weir, &offer.id).await["state"]
            .as_str()
            .unwrap()
            .to_string();
        if state == "done" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(state, "done");
    let confirm = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/confirm", offer.id),
    )
    .await;
    assert_eq!(confirm.status(), 409);
    assert!(!agent.record().exists(), "declined: nothing ran");
    let st = weir.handle.status_now().handoffs;
    assert_eq!(st.recent[0].outcome, weir::status::HandoffOutcome::Declined);
    assert_eq!(up.count(JOBS), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_offer_expires_back_to_the_queue_and_nothing_runs() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 201;
        b.body = Some(r#"{"job_id":"j2","session_id":"s2"}"#.into());
    });
    let weir = Weir::start(&[&up.origin()], &agent.toml("offer_ttl = \"1s\"\n")).await;
    let offer = weir
        .handle
        .handoffs()
        .offer(with_create(&up))
        .await
        .unwrap();
    // A manual offer (no create behind it) is withdrawn instead.
    let manual = weir
        .handle
        .handoffs()
        .offer(by_hand("octo/app"))
        .await
        .unwrap();
    assert!(
        eventually(500, || up.count(JOBS) == 1).await,
        "the expired offer's create was replayed"
    );
    let mut m = view(&weir, &manual.id).await;
    for _ in 0..250 {
        if m["state"] != "offered" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        m = view(&weir, &manual.id).await;
    }
    assert_eq!(m["state"], "cancelled", "{m}");
    assert!(m["note"].as_str().unwrap().contains("not answered"), "{m}");
    let st = weir.handle.status_now().handoffs;
    assert!(st.pending.is_empty());
    assert!(st
        .recent
        .iter()
        .all(|r| r.outcome == weir::status::HandoffOutcome::Expired));
    assert_eq!(st.recent.len(), 2);
    let late = api(
        &weir,
        reqwest::Method::POST,
        &format!("/{}/confirm", offer.id),
    )
    .await;
    assert_eq!(late.status(), 409);
    assert!(!agent.record().exists(), "expired: nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_local_agent_nothing_is_offered() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "[queue]\ncredentials = \"memory\"\n").await;
    let e = weir
        .handle
        .handoffs()
        .offer(by_hand("octo/app"))
        .await
        .unwrap_err();
    assert!(matches!(e, HandoffError::NotConfigured), "{e:?}");
    assert!(!weir.handle.status_now().handoffs.configured);
    let r = with_secret(
        reqwest::Client::new()
            .post(format!("{}/_weir/api/handoffs", weir.proxy_url()))
            .json(&serde_json::json!({"repo": "octo/app", "problem_statement": "x"})),
        weir.handle.control_secret(),
    )
    .await;
    assert_eq!(r.status(), 409);
    let p: serde_json::Value = r.json().await.unwrap();
    assert!(
        p["type"].as_str().unwrap().ends_with("handoff_unavailable"),
        "{p}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_without_a_checkout_is_not_offered() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], &agent.toml("")).await;
    let e = weir
        .handle
        .handoffs()
        .offer(by_hand("octo/elsewhere"))
        .await
        .unwrap_err();
    assert!(matches!(e, HandoffError::NoCheckout { .. }), "{e:?}");
    // `..` cannot climb out of a root.
    let e = weir
        .handle
        .handoffs()
        .offer(by_hand("../src"))
        .await
        .unwrap_err();
    assert!(matches!(e, HandoffError::NoCheckout { .. }), "{e:?}");
    assert!(weir.handle.status_now().handoffs.pending.is_empty());
}

#[test]
fn a_bad_local_agent_table_is_refused_with_its_line() {
    let e = weir::config::parse_str(
        "listen = \"127.0.0.1:0\"\n[local_agent]\ncommand = [\"agent\", \"{secret}\"]\n",
        "test.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("test.toml:3: key `local_agent.command`"),
        "{e}"
    );
    let e = weir::config::parse_str("[local_agent]\nroots = [\"/src\"]\n", "test.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("local_agent.command") && e.contains("needs command"),
        "{e}"
    );
    let e = weir::config::parse_str(
        "[local_agent]\ncommand = [\"a\"]\nenv = { \"BAD-NAME\" = \"x\" }\n",
        "test.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("test.toml:3: key `local_agent.env`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offers_survive_a_restart_and_an_interrupted_run_is_closed() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    let data = tempfile::tempdir().unwrap();
    // A command that outlives the engine.
    let sleeper = format!("\"{PYTHON}\", \"-c\", \"import time; time.sleep(120)\"");
    let text = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n{}",
        up.origin(),
        agent.toml_running(&sleeper, "")
    );
    let toml = |_: &str| text.clone();
    let start = |text: String| {
        let dir = data.path().to_path_buf();
        async move {
            let s = weir::config::parse_str(&text, "t.toml").unwrap();
            weir::start(weir::EngineOptions::new(s, dir)).await.unwrap()
        }
    };
    let first = start(toml(&sleeper)).await;
    let waiting = first.handoffs().offer(by_hand("octo/app")).await.unwrap();
    let running = first.handoffs().offer(by_hand("octo/app")).await.unwrap();
    let id: i64 = running.id.parse().unwrap();
    assert!(first.handoffs().confirm(id).await.unwrap().running);
    first.shutdown().await;

    let second = start(toml(&sleeper)).await;
    let mut pending = Vec::new();
    for _ in 0..250 {
        pending = second.status_now().handoffs.pending;
        if !pending.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(pending.len(), 1, "the unanswered offer is still offered");
    assert_eq!(pending[0].id.to_string(), waiting.id);
    assert_eq!(pending[0].repo, "octo/app");
    let mut v = second.handoffs().get(id).await.unwrap();
    for _ in 0..250 {
        if !v.running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        v = second.handoffs().get(id).await.unwrap();
    }
    assert!(!v.running);
    let err = v.outcome.unwrap()["error"].as_str().unwrap().to_string();
    assert!(err.contains("Weir stopped"), "{err}");
    second.shutdown().await;
}

/// The whole path: a `[[policy]]` rule says `local`, the upstream cannot take the create, the
/// client gets `202 offered` with the offer's location, and only the confirmation through the
/// API runs the command (once). Declining another puts it back in the queue.
/// Only the developer's own creates are offered (#22): here no GitHub token is stored, so no
/// create can be shown to be the developer's, and policy's `local` falls back to the queue.
/// (The offer itself, confirmed once, for a create of the stored token's account:
/// tests/handoff_owner.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_policy_hands_to_the_local_agent_is_queued_when_it_is_not_the_developers() {
    let agent = Agent::new();
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let rules = "[[policy]]\nrepo = \"octo/*\"\ncreate = \"local\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{}{rules}", agent.toml(""))).await;
    let r = weir
        .client("alice")
        .post(format!("{}{JOBS}", up.origin()))
        .header("content-type", "application/json")
        .body(format!(r#"{{"problem_statement":"{STATEMENT}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["weir-policy"], "user:1 create=local->queue");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "queued", "{body}");
    let reason = body["weir"]["reason"].as_str().unwrap();
    assert!(reason.contains("not the developer's own"), "{reason}");
    assert_eq!(up.count(JOBS), 1, "one attempt, then the queue");
    let all: serde_json::Value = api(&weir, reqwest::Method::GET, "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["offers"].as_array().map(Vec::len), Some(0), "{all}");
    assert!(!agent.record().exists());
}

/// `weir handoff ls|confirm` against a real `weir serve`: lists the offer, confirms it once
/// (the command runs once), and a second confirm fails with the problem's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_confirms_an_offer_once() {
    use std::process::Command;
    let agent = Agent::new();
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &cfg,
        format!(
            "default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n{}",
            up.origin(),
            agent.toml("")
        ),
    )
    .unwrap();
    let (mut child, secret) = common::serve_with_secret(&cfg, dir.path());
    let r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/_weir/api/handoffs"))
        .header("x-weir-secret", &secret)
        .json(&serde_json::json!({"repo": "octo/app", "problem_statement": STATEMENT}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"].to_string();
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("handoff")
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env("WEIR_CONTROL_SECRET", &secret)
            .output()
            .unwrap()
    };
    let ls = cli(&["ls"]);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(
        ls.status.success() && text.contains("octo/app") && text.contains("offered"),
        "{text}"
    );
    assert!(!agent.record().exists());
    let ok = cli(&["confirm", &id]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let again = cli(&["confirm", &id]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already answered"), "{err}");
    assert!(
        eventually(500, || agent.runs().len() == 1).await,
        "the command ran"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(agent.runs().len(), 1);
}
