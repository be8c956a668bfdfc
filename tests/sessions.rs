//! The agent-sessions companion against a real loopback agents API (the sessions change state
//! between polls): off without a token; its polls share the cache an IDE fills (the upstream
//! sees no more list calls with the poller than without); it backs off while the breaker is
//! open; it stops after repeated 401s and says so; it announces finished / failed /
//! needs-review sessions; the new-task form's call creates once.
//!
//! Time is paused (`start_paused`): intervals and backoff are counted, never timed. Paused time
//! only ever runs ahead (it jumps to the next timer whenever the runtime waits on something
//! outside it: SQLite's thread, a loopback packet the kernel delivers late under load), so
//! the assertions are upper bounds on calls and gaps between calls, and the sessions status is
//! read with `EngineHandle::sessions` (no database read). Class timeouts are long so a jump
//! can never time a request out. The token lives in the keychain
//! (scripts/with-keychain.sh); without one the poller must say so.

mod common;
use common::{with_secret, Upstream, Weir};
use std::time::Duration;
use weir::events::{Event, SessionChange};
use weir::status::{PollerReason, PollerState, SessionGroup};

/// `gh agent-task list`'s list request as Go encodes it: the poller sends exactly this.
const LIST: &str = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";
const TOKEN: &str = "gho_weirSessionsTest0123456789";
/// Exact backoff (no jitter) and a breaker out of the way unless a test sets it.
const QUIET: &str = "[retry]\nbase = \"1ms\"\ncap = \"5ms\"\njitter = false\n[breaker]\njitter = false\nminimum_calls = 1000\nconsecutive_failures = 0\n[classes.list]\nper_try_timeout = \"1h\"\ndeadline = \"2h\"\n";

fn has_keychain() -> bool {
    std::env::var("DBUS_SESSION_BUS_ADDRESS").is_ok()
}

/// Stores `token` through the control API (the dashboard's token panel does the same).
async fn store_token(weir: &Weir, token: &str) -> bool {
    let r = with_secret(
        reqwest::Client::new()
            .put(format!("{}/_weir/api/token", weir.proxy_url()))
            .body(format!(r#"{{"token":"{token}"}}"#)),
        weir.handle.control_secret(),
    )
    .await;
    r.status() == 200
}

fn list_body(sessions: serde_json::Value) -> String {
    serde_json::json!({ "sessions": sessions }).to_string()
}

fn serve_list(up: &Upstream, sessions: serde_json::Value) {
    let body = list_body(sessions);
    up.set(|b| b.path_bodies = vec![("/agents/sessions".into(), body)]);
}

fn three_running() -> serde_json::Value {
    serde_json::json!([
        {"id": "s-a", "state": "in_progress", "name": "Fix the login bug", "repository": "octo/app", "created_at": "2026-11-30T08:00:00Z"},
        {"id": "s-b", "state": "in_progress", "name": "Add tests", "repository": "octo/app"},
        {"id": "s-c", "state": "queued", "name": "Bump deps", "repository": "octo/lib"}
    ])
}

/// Without a keychain the poller must say why it is off (and send nothing).
async fn off_without_keychain(weir: &Weir, up: &Upstream) {
    tokio::time::sleep(Duration::from_secs(120)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.poller, PollerState::Off);
    assert_eq!(s.reason, Some(PollerReason::NoKeychain));
    assert_eq!(up.total(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_poller_is_off_without_a_token() {
    let up = Upstream::start().await;
    serve_list(&up, three_running());
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    if !has_keychain() {
        return off_without_keychain(&weir, &up).await;
    }
    tokio::time::sleep(Duration::from_secs(300)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.poller, PollerState::Off);
    assert_eq!(s.reason, Some(PollerReason::NoToken));
    assert_eq!(s.polls, 0);
    assert_eq!(up.total(), 0, "no token, no calls");
    let doc = weir.status().await;
    assert_eq!(doc["sessions"]["poller"], "off");
    assert_eq!(doc["sessions"]["summary"], "No active sessions");
}

/// An IDE polls the list every second for two minutes with the token the companion uses: `gh
/// agent-task list`'s exact request (its key headers: go-gh's `Accept`, the CAPI transport's
/// `X-GitHub-Api-Version`, Go's `Accept-Encoding: gzip`), but with `,` unescaped: the
/// encodings are one key.
/// Returns when each list call reached the upstream, and the companion's polls.
async fn ide_polls(with_poller: bool) -> Option<(Vec<tokio::time::Instant>, u64)> {
    let up = Upstream::start().await;
    serve_list(&up, three_running());
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    if !has_keychain() {
        off_without_keychain(&weir, &up).await;
        return None;
    }
    if with_poller {
        assert!(store_token(&weir, TOKEN).await);
    }
    let ide = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(weir.proxy_url()).unwrap())
        .build()
        .unwrap();
    let url = format!("{}{}", up.origin(), LIST.replace("%2C", ","));
    for _ in 0..120 {
        let r = ide
            .get(&url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header(
                "accept",
                "application/vnd.github.merge-info-preview+json, application/vnd.github.nebula-preview",
            )
            .header("accept-encoding", "gzip")
            .header("x-github-api-version", "2026-01-09")
            .header("copilot-integration-id", "copilot-4-cli")
            .header("user-agent", "GitHub CLI 2.83.0")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let polls = weir.handle.sessions().polls;
    let calls = up
        .seen()
        .into_iter()
        .filter(|s| s.path_and_query.starts_with("/agents/sessions?"))
        .map(|s| s.at)
        .collect();
    Some((calls, polls))
}

#[tokio::test(start_paused = true)]
async fn the_poller_adds_no_upstream_calls_while_an_ide_polls() {
    let Some((without, no_polls)) = ide_polls(false).await else {
        return;
    };
    let (with, polls) = ide_polls(true).await.unwrap();
    assert_eq!(no_polls, 0);
    assert!(polls >= 7, "the companion polled {polls} times");
    // At most one upstream list call per 15 s fresh window, whoever asked: the companion's
    // polls are answered from the entry the IDE keeps fresh (and the other way round).
    for calls in [&without, &with] {
        for pair in calls.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= Duration::from_secs(15),
                "two upstream list calls {gap:?} apart"
            );
        }
    }
    assert!(
        with.len() <= 9,
        "{} upstream list calls in 120 s",
        with.len()
    );
    println!(
        "upstream list calls in 120 s, IDE polling every second: IDE alone {}, IDE + companion {} (companion polls: {polls})",
        without.len(),
        with.len()
    );
}

#[tokio::test(start_paused = true)]
async fn the_poller_backs_off_while_the_breaker_is_open() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 500);
    let cfg = "[retry]\nbase = \"1ms\"\ncap = \"5ms\"\njitter = false\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\n[breaker]\njitter = false\nminimum_calls = 2\nopen_wait = \"1h\"\nopen_wait_max = \"1h\"\n[classes.list]\nper_try_timeout = \"1h\"\ndeadline = \"2h\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    if !has_keychain() {
        return off_without_keychain(&weir, &up).await;
    }
    assert!(store_token(&weir, TOKEN).await);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.poller, PollerState::BackingOff);
    assert_eq!(s.reason, Some(PollerReason::BreakerOpen));
    // Polling normally: 41 polls in 600 s. Backing off (no jitter): t = 0, 15, 45, 105, 225,
    // 465 s, then 945 and 1425 s.
    assert!((3..=6).contains(&s.polls), "{} polls in 600 s", s.polls);
    println!("breaker open: {} companion polls in 600 s", s.polls);
    let reached = up.total();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        up.total(),
        reached,
        "nothing reaches an upstream whose breaker is open"
    );
    assert!(weir.handle.sessions().polls <= 7);
    let st = weir.handle.status().await;
    assert_eq!(
        st.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Open
    );
}

#[tokio::test(start_paused = true)]
async fn the_poller_stops_after_repeated_401s_and_says_so() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 401;
        b.body = Some(r#"{"message":"Bad credentials"}"#.into());
    });
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    if !has_keychain() {
        return off_without_keychain(&weir, &up).await;
    }
    assert!(store_token(&weir, TOKEN).await);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.poller, PollerState::StoppedUnauthorized);
    assert_eq!(s.reason, Some(PollerReason::Unauthorized));
    assert_eq!(s.polls, 3);
    assert_eq!(up.count(LIST), 3, "one call per poll, none after the stop");
    let doc = weir.status().await;
    assert_eq!(doc["sessions"]["poller"], "stopped_unauthorized");
    assert!(!doc.to_string().contains(TOKEN));

    // A new token restarts it.
    up.set(|b| {
        b.status = 200;
        b.body = None;
        b.path_bodies = vec![("/agents/sessions".into(), list_body(three_running()))];
    });
    assert!(store_token(&weir, "gho_weirSessionsOtherToken99").await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.poller, PollerState::Polling);
    assert_eq!(s.polls, 4);
    assert_eq!(s.counts.running, 3);
}

#[tokio::test(start_paused = true)]
async fn finished_failed_and_needs_review_sessions_are_announced() {
    let up = Upstream::start().await;
    serve_list(&up, three_running());
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    if !has_keychain() {
        return off_without_keychain(&weir, &up).await;
    }
    let mut events = weir.handle.subscribe();
    assert!(store_token(&weir, TOKEN).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = weir.handle.sessions();
    assert_eq!(s.counts.running, 3);
    assert_eq!(s.summary, "3 running");
    assert_eq!(s.recent[0].title.as_deref(), Some("Fix the login bug"));

    serve_list(
        &up,
        serde_json::json!([
            {"id": "s-a", "state": "completed", "name": "Fix the login bug", "repository": "octo/app",
             "resource_type": "pull", "pull_request": {"number": 12}},
            {"id": "s-b", "state": "failed", "name": "Add tests", "repository": "octo/app"},
            {"id": "s-c", "state": "cancelled", "name": "Bump deps", "repository": "octo/lib"},
            {"id": "s-d", "state": "in_progress", "name": "New one", "repository": "octo/lib"}
        ]),
    );
    // The cached list is fresh for 15 s, then refreshed behind a stale answer: two polls on.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let Event::Session {
            change, session, ..
        } = e
        {
            seen.push((change, session.id.clone(), session.url.clone()));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            (
                SessionChange::Finished,
                "s-c".to_string(),
                "https://github.com/copilot/agents".to_string()
            ),
            (
                SessionChange::Failed,
                "s-b".to_string(),
                "https://github.com/copilot/agents".to_string()
            ),
            (
                SessionChange::NeedsReview,
                "s-a".to_string(),
                "https://github.com/octo/app/pull/12/agent-sessions/s-a".to_string()
            ),
        ]
    );
    let s = weir.handle.sessions();
    assert_eq!(s.summary, "1 running, 1 ready for review, 1 failed");
    assert_eq!(s.recent[0].group, SessionGroup::ReadyForReview);

    // Titles and repositories are private: the status document leaves them out, the sessions
    // API serves them with the secret only.
    let doc = weir.status().await.to_string();
    assert!(!doc.contains("Fix the login bug"), "{doc}");
    let url = format!("{}/_weir/api/sessions", weir.proxy_url());
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 401);
    let v: serde_json::Value = with_secret(
        reqwest::Client::new().get(&url),
        weir.handle.control_secret(),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(v["sessions"][0]["title"], "Fix the login bug");
    assert_eq!(v["sessions"][0]["group"], "ready_for_review");
    assert_eq!(v["counts"]["failed"], 1);
}

#[tokio::test]
async fn a_new_task_goes_through_the_create_path_once() {
    let up = Upstream::start().await;
    up.set(|b| b.body = Some(r#"{"job_id":"job-1","session_id":"s-new"}"#.into()));
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let url = format!("{}/_weir/api/sessions", weir.proxy_url());
    let secret = weir.handle.control_secret().to_string();
    let c = reqwest::Client::new();
    let task = serde_json::json!({
        "repository": "octo/app", "problem_statement": "Fix the flaky test",
        "base_branch": "main", "idempotency_key": "form-0123456789"
    });
    if !has_keychain() {
        let r = with_secret(c.post(&url).json(&task), &secret).await;
        assert_eq!(r.status(), 409, "no token without a keychain");
        return;
    }
    let r = with_secret(c.post(&url).json(&task), &secret).await;
    assert_eq!(r.status(), 409);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "no_token");

    assert!(store_token(&weir, TOKEN).await);
    let bad = serde_json::json!({"repository": "octo", "problem_statement": "x"});
    assert_eq!(
        with_secret(c.post(&url).json(&bad), &secret).await.status(),
        422
    );
    assert_eq!(c.post(&url).json(&task).send().await.unwrap().status(), 401);

    let (a, b) = tokio::join!(
        with_secret(c.post(&url).json(&task), &secret),
        with_secret(c.post(&url).json(&task), &secret)
    );
    let again = with_secret(c.post(&url).json(&task), &secret).await;
    for r in [a, b, again] {
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["outcome"], "created");
        assert_eq!(v["job"]["session_id"], "s-new");
    }
    let creates: Vec<_> = up
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(creates.len(), 1, "three submits, one create");
    assert_eq!(creates[0].path_and_query, "/agents/swe/v1/jobs/octo/app");
    let body: serde_json::Value = serde_json::from_slice(&creates[0].body).unwrap();
    assert_eq!(body["problem_statement"], "Fix the flaky test");
    assert_eq!(body["pull_request"]["base_ref"], "refs/heads/main");
    assert_eq!(
        creates[0].headers["authorization"],
        format!("Bearer {TOKEN}").as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poller_backs_off_while_github_status_shows_a_copilot_incident() {
    const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/status/tests/fixtures/");
    let fixture = |name: &str| std::fs::read_to_string(format!("{FIX}{name}.json")).unwrap();
    let page = Upstream::start().await;
    let (summary, unresolved) = (fixture("summary_incident"), fixture("unresolved_incident"));
    page.set(|b| {
        b.path_bodies = vec![
            ("/api/v2/summary.json".into(), summary),
            ("/api/v2/incidents/unresolved.json".into(), unresolved),
        ]
    });
    let up = Upstream::start().await;
    serve_list(&up, three_running());
    let cfg = format!("{QUIET}[status]\nbase_url = \"{}\"\n", page.origin());
    let weir = Weir::start(&[&up.origin()], &cfg).await;
    let incident = common::eventually_status(&weir.handle, 250, |s| {
        s.github.as_ref().is_some_and(|g| !g.incidents.is_empty())
    })
    .await;
    assert!(incident, "the watcher saw the fixture's Copilot incident");
    if !has_keychain() {
        return;
    }
    assert!(store_token(&weir, TOKEN).await);
    let backing_off = common::eventually_status(&weir.handle, 250, |s| {
        s.sessions.poller == PollerState::BackingOff
            && s.sessions.reason == Some(PollerReason::GithubIncident)
    })
    .await;
    assert!(backing_off, "{:?}", weir.handle.status().await.sessions);
    // It still read the list (from Weir's cache or one upstream call): backing off is about
    // how often, not whether.
    assert_eq!(weir.handle.status().await.sessions.counts.running, 3);
}

#[tokio::test]
async fn a_new_task_is_queued_when_github_cannot_take_it() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 503;
        b.extra_headers = vec![("retry-after".into(), "3600".into())];
    });
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    if !has_keychain() {
        return;
    }
    assert!(store_token(&weir, TOKEN).await);
    let url = format!("{}/_weir/api/sessions", weir.proxy_url());
    let task =
        serde_json::json!({"repository": "octo/app", "problem_statement": "Fix the flaky test"});
    let r = with_secret(
        reqwest::Client::new().post(&url).json(&task),
        weir.handle.control_secret(),
    )
    .await;
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["outcome"], "queued");
    let id = v["queue_id"].as_i64().expect("a queue id");
    let q: serde_json::Value = with_secret(
        reqwest::Client::new().get(format!("{}/_weir/api/queue/{id}", weir.proxy_url())),
        weir.handle.control_secret(),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(q["path"], "/agents/swe/v1/jobs/octo/app", "{q}");
}

/// While Weir is offline (its one upstream refuses connections) the poller sends nothing, not
/// even into Weir's own cache; once a probe finds the upstream back it polls at once.
#[tokio::test(start_paused = true)]
async fn the_poller_waits_while_weir_is_offline_and_polls_once_it_is_back() {
    let up = Upstream::start().await;
    serve_list(&up, three_running());
    let addr = up.addr;
    let cfg =
        format!("{QUIET}[offline]\nprobe_base = \"1s\"\nprobe_cap = \"10s\"\njitter = false\n");
    let weir = Weir::start(&[&up.origin()], &cfg).await;
    if !has_keychain() {
        return off_without_keychain(&weir, &up).await;
    }
    assert!(store_token(&weir, TOKEN).await);
    // (Paused time runs ahead while a loopback exchange is in flight: waits, not sleeps.)
    for _ in 0..50 {
        if up.count(LIST) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up.count(LIST) > 0, "the first poll");

    up.kill();
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The next poll (15 s on: the list's `fresh_ttl`) finds the upstream gone and Weir goes
    // offline; the one after (30 s) finds Weir offline and waits.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let st = weir.handle.status().await;
    assert_eq!(st.mode.mode, weir::mode::ModeKind::Offline, "{:?}", st.mode);
    let s = weir.handle.sessions();
    assert_eq!(s.reason, Some(PollerReason::Offline), "{s:?}");
    let polls = s.polls;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        weir.handle.sessions().polls,
        polls,
        "no poll while offline (each one was a stale copy or an offline miss)"
    );

    let back = Upstream::start_on(tokio::net::TcpListener::bind(addr).await.unwrap()).await;
    serve_list(&back, three_running());
    // A probe within 10 s (the cap) ends offline; the poll follows at once (the next one
    // is an interval, 5 s or more, later).
    let back_at = tokio::time::Instant::now();
    while weir.handle.status().await.mode.mode != weir::mode::ModeKind::Automatic {
        assert!(back_at.elapsed() < Duration::from_secs(11), "back online");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut polled = false;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = weir.handle.sessions();
        if s.polls > polls && s.reason.is_none() && back.count(LIST) > 0 {
            polled = true;
            break;
        }
    }
    let s = weir.handle.sessions();
    assert!(polled, "polled within a second of going back online: {s:?}");
    assert_eq!(s.poller, PollerState::Polling);
}
