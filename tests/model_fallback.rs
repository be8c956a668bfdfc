//! Model fallback, kept apart from session fallback, against a real loopback completion
//! endpoint (tests/common/completions.rs) behind a real Weir: one rewritten attempt when a
//! model fails, straight to the fallback while its breaker is open, never after the first
//! byte of a stream, never for agent-session routes, never without config; the
//! agent-sessions breaker is never touched. Counts and bytes, no timing.

mod common;
use common::completions::{Completions, Plan};
use common::Weir;
use weir::events::{BreakerState, Event, ModelFallbackChange};

/// Breaker jitter off, and a long open wait so an opened breaker stays open for the test.
const BREAKER: &str = "[breaker]\njitter = false\nopen_wait = \"600s\"\nopen_wait_max = \"600s\"\n";
const RULE: &str = "[[model_fallback]]\nfrom = \"claude-*\"\nto = \"gpt-5\"\n";

fn chat(model: &str, stream: bool) -> String {
    // Spacing and key order are the client's own: the rewrite must keep them.
    format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"say hi\"}}], \"model\":  \"{model}\", \"stream\": {stream}, \"temperature\": 0.10}}"
    )
}

async fn post(weir: &Weir, url: &str, body: String) -> reqwest::Response {
    weir.client("dev")
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn fallback_header(r: &reqwest::Response) -> Option<String> {
    r.headers()
        .get("weir-model-fallback")
        .map(|v| v.to_str().unwrap().to_string())
}

/// The agent-sessions breaker (the upstream's gate) saw no call and is closed.
fn sessions_breaker_untouched(s: &weir::status::StatusSnapshot) {
    let b = &s.upstreams[0].guard.breaker;
    assert_eq!(b.state, BreakerState::Closed, "{}", b.reason);
    assert_eq!((b.calls_in_window, b.consecutive_failures), (0, 0));
}

#[tokio::test]
async fn a_failing_model_gets_one_attempt_with_the_fallback_model() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(529));
    let weir = Weir::start(&[&fake.origin()], &format!("{BREAKER}{RULE}")).await;
    let mut events = weir.handle.subscribe();
    let url = format!("{}/chat/completions", fake.origin());
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    let answer: serde_json::Value = r.json().await.unwrap();
    assert_eq!(answer["model"], "gpt-5");

    let calls = fake.calls();
    assert_eq!(calls.len(), 2, "one attempt, one fallback attempt");
    assert_eq!(calls[0].model.as_deref(), Some("claude-x"));
    assert_eq!(calls[1].model.as_deref(), Some("gpt-5"));
    // Only the model changed: every other byte as the client sent it.
    assert_eq!(calls[0].body, chat("claude-x", false).as_bytes());
    assert_eq!(calls[1].body, chat("gpt-5", false).as_bytes());
    assert_eq!(
        calls[1].headers["content-length"],
        chat("gpt-5", false).len().to_string().as_str()
    );

    let s = weir.handle.status().await;
    sessions_breaker_untouched(&s);
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!(m.fallbacks, 1);
    let ep = m.episode.as_ref().expect("an episode is under way");
    assert_eq!(
        (ep.to.as_str(), ep.reason.as_str()),
        ("gpt-5", "overloaded (529)")
    );
    assert_eq!(s.upstreams[0].classes["model"].upstream_requests, 2);

    // A second failing request: counted in the same episode, announced once only.
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    // The model recovers: its next answer ends the episode (announced once).
    fake.plan("claude-x", Plan::Json);
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!((r.status().as_u16(), fallback_header(&r)), (200, None));
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let Event::ModelFallback {
            change,
            from,
            to,
            fallbacks,
            message,
            ..
        } = e
        {
            seen.push((change, from, to, fallbacks, message));
        }
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, ModelFallbackChange::Started);
    assert_eq!(
        seen[0].4,
        "Model claude-x is failing on up0 (overloaded (529)): Weir sends its requests to gpt-5 for now"
    );
    assert_eq!((seen[1].0, seen[1].3), (ModelFallbackChange::Ended, 2));
    assert_eq!(
        seen[1].4,
        "Model claude-x answers again on up0: back to it after 2 requests sent to gpt-5"
    );
    let s = weir.handle.status().await;
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!((m.fallbacks, m.episode.is_none()), (2, true));
    let metrics = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("weir_model_fallbacks_total{upstream=\"up0\",model=\"claude-x\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn answers_that_are_not_outages_never_fall_back() {
    let fake = Completions::start().await;
    fake.plan("claude-quota", Plan::Status(429));
    fake.plan("claude-bad", Plan::Status(400));
    let weir = Weir::start(&[&fake.origin()], &format!("{BREAKER}{RULE}")).await;
    let url = format!("{}/chat/completions", fake.origin());
    for (model, status) in [("claude-quota", 429), ("claude-bad", 400)] {
        let r = post(&weir, &url, chat(model, false)).await;
        assert_eq!((r.status().as_u16(), fallback_header(&r)), (status, None));
    }
    // A body without a model goes out once as it is, tracked by no model breaker.
    let r = post(&weir, &url, "{\"messages\": []}".into()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(fake.calls().len(), 3);
    assert_eq!(fake.calls_for("gpt-5"), 0);
    let s = weir.handle.status().await;
    let names: Vec<_> = s.models.iter().map(|m| m.model.as_str()).collect();
    assert_eq!(names, ["claude-bad", "claude-quota"]);
    assert!(s
        .models
        .iter()
        .all(|m| m.breaker == BreakerState::Closed && m.fallbacks == 0));
}

#[tokio::test]
async fn while_the_models_breaker_is_open_requests_go_straight_to_the_fallback() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(503));
    let extra = format!("{BREAKER}consecutive_failures = 2\n{RULE}");
    let weir = Weir::start(&[&fake.origin()], &extra).await;
    let url = format!("{}/v1/messages", fake.origin());
    for _ in 0..2 {
        let r = post(&weir, &url, chat("claude-x", false)).await;
        assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    }
    assert_eq!(fake.calls_for("claude-x"), 2);
    let s = weir.handle.status().await;
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!(m.breaker, BreakerState::Open, "{}", m.reason);
    for _ in 0..3 {
        let r = post(&weir, &url, chat("claude-x", false)).await;
        assert_eq!(r.status(), 200);
        assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    }
    assert_eq!(fake.calls_for("claude-x"), 2, "open: claude-x is not asked");
    assert_eq!(fake.calls_for("gpt-5"), 5);
    let s = weir.handle.status().await;
    sessions_breaker_untouched(&s);
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!(m.fallbacks, 5);
    assert_eq!(m.episode.as_ref().unwrap().fallbacks, 5);
    let gpt = s.models.iter().find(|m| m.model == "gpt-5").unwrap();
    assert_eq!((gpt.breaker, gpt.fallbacks), (BreakerState::Closed, 0));
    // Agent-session calls on the same upstream flow as ever.
    let r = weir
        .client("dev")
        .get(format!("{}/agents/sessions", fake.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_is_not_retried() {
    let fake = Completions::start().await;
    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_string();
    fake.plan("claude-x", Plan::StreamThenBreak(vec![first.clone()]));
    // One failure opens a model's breaker here: the mid-stream break must count.
    let extra = format!("{BREAKER}consecutive_failures = 1\n{RULE}");
    let weir = Weir::start(&[&fake.origin()], &extra).await;
    let url = format!("{}/chat/completions", fake.origin());
    let mut r = post(&weir, &url, chat("claude-x", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(fallback_header(&r), None);
    let mut got = Vec::new();
    let broke = loop {
        match r.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(broke, "the client sees the stream break, not a clean end");
    assert_eq!(
        got,
        first.as_bytes(),
        "the client got the bytes sent before the break"
    );
    assert_eq!(
        fake.calls().len(),
        1,
        "never retried, never sent to the fallback"
    );
    let open = common::eventually_status(&weir.handle, 100, |s| {
        s.models
            .iter()
            .any(|m| m.model == "claude-x" && m.breaker == BreakerState::Open)
    })
    .await;
    assert!(open, "the model's breaker recorded the break");
    sessions_breaker_untouched(&weir.handle.status().await);
}

#[tokio::test]
async fn a_stream_that_breaks_before_its_first_byte_falls_back() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::StreamThenBreak(vec![]));
    let events = vec![
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ];
    fake.plan("gpt-5", Plan::Stream(events.clone()));
    let weir = Weir::start(&[&fake.origin()], &format!("{BREAKER}{RULE}")).await;
    let url = format!("{}/responses", fake.origin());
    let r = post(&weir, &url, chat("claude-x", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let body = r.bytes().await.unwrap();
    assert_eq!(body, events.concat().as_bytes());
    let models: Vec<_> = fake.calls().into_iter().map(|c| c.model).collect();
    assert_eq!(models, [Some("claude-x".into()), Some("gpt-5".into())]);
    let s = weir.handle.status().await;
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!(m.episode.as_ref().unwrap().reason, "connection");
    sessions_breaker_untouched(&s);
}

#[tokio::test]
async fn without_config_nothing_is_rewritten() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(529));
    let weir = Weir::start(&[&fake.origin()], BREAKER).await;
    let url = format!("{}/v1/chat/completions", fake.origin());
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(r.status(), 529, "the upstream's answer passes on");
    assert_eq!(fallback_header(&r), None);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("model claude-x failed with 529"));
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body, chat("claude-x", false).as_bytes());
    // Other answers pass unchanged too; a 429 is a quota, not a model outage.
    fake.plan("claude-y", Plan::Status(429));
    let r = post(&weir, &url, chat("claude-y", false)).await;
    assert_eq!((r.status().as_u16(), fallback_header(&r)), (429, None));
    let s = weir.handle.status().await;
    sessions_breaker_untouched(&s);
    assert!(s
        .models
        .iter()
        .all(|m| m.fallbacks == 0 && m.episode.is_none()));
}

#[tokio::test]
async fn session_failures_never_change_models() {
    let fake = Completions::start().await;
    // Every answer for claude-x fails, on every path, sessions included.
    fake.plan("claude-x", Plan::Status(503));
    let extra = format!("{BREAKER}[queue]\ncredentials = \"memory\"\n{RULE}");
    let weir = Weir::start(&[&fake.origin()], &extra).await;
    let c = weir.client("dev");
    // A create whose body happens to name a model: the create class never rewrites it.
    let create = format!("{}/agents/swe/v1/jobs/o/r", fake.origin());
    let r = c
        .post(&create)
        .header("content-type", "application/json")
        .body(chat("claude-x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(fallback_header(&r), None);
    assert_ne!(r.status(), 200);
    let list = format!("{}/agents/sessions", fake.origin());
    let r = c.get(&list).send().await.unwrap();
    assert_eq!((r.status().as_u16(), fallback_header(&r)), (200, None));
    assert_eq!(
        fake.calls_for("gpt-5"),
        0,
        "no model fallback on session routes"
    );
    assert!(fake.calls().iter().all(|c| c.path.starts_with("/agents/")));
    let s = weir.handle.status().await;
    assert!(s.models.is_empty(), "session calls feed no model breaker");
    assert_eq!(s.upstreams[0].classes["model"].upstream_requests, 0);
}

#[test]
fn bad_model_fallback_config_names_the_line() {
    let e = weir::config::parse_str(
        "watch_github_status = false\n[[model_fallback]]\nfrom = \"claude-*\"\nto = \"gpt-*\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml:4: key `model_fallback.to`: `gpt-*` is not a model name (e.g. \"gpt-5\"; no `*`)"
    );
    let e = weir::config::parse_str(
        "[[model_fallback]]\nfrom = \"a\"\nto = \"b\"\nupsteam = \"x\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("w.toml:4: key `model_fallback.upsteam`"),
        "{e}"
    );
}

#[tokio::test]
async fn the_episode_ends_once_the_models_breaker_closed_again() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(500));
    // One failure opens it, a short open wait, one probe decides.
    let extra = format!(
        "[breaker]\njitter = false\nconsecutive_failures = 1\nopen_wait = \"50ms\"\nopen_wait_max = \"50ms\"\nhalf_open_probes = 1\n{RULE}"
    );
    let weir = Weir::start(&[&fake.origin()], &extra).await;
    let mut events = weir.handle.subscribe();
    let url = format!("{}/chat/completions", fake.origin());
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(fallback_header(&r).as_deref(), Some("claude-x -> gpt-5"));
    fake.plan("claude-x", Plan::Json);
    // Until the open wait is over requests go to gpt-5; then the probe reaches claude-x (its
    // breaker half-open: the episode goes on), and the answer after it ends the episode.
    let mut direct = 0;
    for _ in 0..200 {
        let r = post(&weir, &url, chat("claude-x", false)).await;
        let header = fallback_header(&r);
        r.bytes().await.unwrap();
        if header.is_none() {
            direct += 1;
            if direct == 2 {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(direct, 2, "claude-x answered again");
    let changes: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e {
            Event::ModelFallback {
                change, fallbacks, ..
            } => Some((change, fallbacks)),
            _ => None,
        })
        .collect();
    let fell_back = fake.calls_for("gpt-5") as u64;
    assert_eq!(
        changes,
        [
            (ModelFallbackChange::Started, 1),
            (ModelFallbackChange::Ended, fell_back)
        ]
    );
    let s = weir.handle.status().await;
    let m = s.models.iter().find(|m| m.model == "claude-x").unwrap();
    assert_eq!(
        (m.breaker, m.episode.is_none()),
        (BreakerState::Closed, true)
    );
    sessions_breaker_untouched(&s);
}

#[tokio::test]
async fn an_open_model_breaker_fails_that_model_fast_and_no_other() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(503));
    // No [[model_fallback]]: the per-model breaker works on its own.
    let weir = Weir::start(
        &[&fake.origin()],
        &format!("{BREAKER}consecutive_failures = 1\n"),
    )
    .await;
    let url = format!("{}/chat/completions", fake.origin());
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(r.status(), 503, "the upstream's own 503");
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "breaker_open");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("the circuit breaker for model claude-x on up0 is open"),
        "{p}"
    );
    assert_eq!(fake.calls_for("claude-x"), 1, "open: not sent");
    let r = post(&weir, &url, chat("gpt-5", false)).await;
    assert_eq!(r.status(), 200, "another model is not held back");
    sessions_breaker_untouched(&weir.handle.status().await);
}

#[tokio::test]
async fn a_policy_rule_can_forbid_model_fallback_and_the_answer_names_it() {
    let fake = Completions::start().await;
    fake.plan("claude-x", Plan::Status(503));
    // Completions name no repository: only `repo = "*"` rules apply to them.
    let policy = "[[policy]]\nrepo = \"*\"\nmodel = \"never\"\n";
    let weir = Weir::start(&[&fake.origin()], &format!("{BREAKER}{RULE}{policy}")).await;
    let url = format!("{}/chat/completions", fake.origin());
    let r = post(&weir, &url, chat("claude-x", false)).await;
    assert_eq!(r.status(), 503, "the model's own failure stands");
    assert_eq!(fallback_header(&r), None);
    assert_eq!(
        r.headers()["weir-policy"].to_str().unwrap(),
        "user:1 model=never"
    );
    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "no fallback attempt");
    assert_eq!(calls[0].model.as_deref(), Some("claude-x"));
    let s = weir.handle.status().await;
    sessions_breaker_untouched(&s);
    assert!(s.models.iter().all(|m| m.fallbacks == 0));
}
