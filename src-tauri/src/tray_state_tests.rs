//! Tests for [`super::tray_view`] whose input is a real engine's output: each test starts a
//! `weir` engine on 127.0.0.1:0 (queue credentials in memory, so no keychain is needed) and
//! reads its typed [`StatusSnapshot`]. Where a state is hard to provoke (an incident, a
//! database that does not answer), the real snapshot's typed fields are changed, never a
//! hand-written document.

use super::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_status::{GithubStatus, Incident, Reachability};

/// A create route (Copilot cloud agent jobs): POSTs to it are queued when the upstream is down.
const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

struct Engine {
    handle: EngineHandle,
    _dir: tempfile::TempDir,
}

/// A real engine in front of `upstreams` (name, origin), GitHub Status not watched, queue
/// credentials in memory and a breaker that only opens when a test says so.
async fn engine(upstreams: &[(&str, &str)]) -> Engine {
    let mut toml = String::from(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n",
    );
    for (name, origin) in upstreams {
        toml.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\norigin = \"{origin}\"\n"
        ));
    }
    // Offline detection off: tests with one dead upstream check the queue, not the mode.
    toml.push_str("[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n[offline]\ndetect = false\n");
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let dir = tempfile::tempdir().unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    Engine { handle, _dir: dir }
}

/// An origin nothing listens on: its port was reserved, then closed (connection refused).
fn dead_origin() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// The engine's real snapshot with two quiet upstreams.
async fn snapshot() -> StatusSnapshot {
    let e = engine(&[
        ("copilot-api", "http://127.0.0.1:9"),
        ("github-api", "http://127.0.0.1:9"),
    ])
    .await;
    let s = e.handle.status().await;
    e.handle.shutdown().await;
    s
}

/// POSTs a create through the proxy as a client with `HTTPS_PROXY` would (absolute-form
/// request line); returns the status code.
async fn post_create(proxy: SocketAddr, origin: &str) -> u16 {
    let authority = origin.strip_prefix("http://").unwrap();
    let body = r#"{"problem_statement":"tray test","event_type":"weir-tray-test"}"#;
    let request = format!(
        "POST {origin}{JOBS} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: token tray-test\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
}

fn utc_clock(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%H:%M")
        .to_string()
}

fn view(status: &StatusSnapshot, recent: &Recent) -> TrayView {
    tray_view(status, recent, &utc_clock)
}

/// 2026-11-30T10:02:00Z
fn t1002() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_032_920)
}

fn github_ok() -> GithubStatus {
    let mut g = GithubStatus::initial("https://www.githubstatus.com");
    g.reachability = Reachability::Ok;
    g.last_ok_at = Some(t1002());
    g.checked_at = Some(t1002());
    g.indicator = Some("none".into());
    g.description = Some("All Systems Operational".into());
    g
}

fn incident(name: &str) -> Incident {
    Incident {
        id: "abc".into(),
        name: name.into(),
        status: "investigating".into(),
        impact: "minor".into(),
        shortlink: Some("https://stspg.io/abc".into()),
        created_at: None,
        updated_at: None,
        latest_update: None,
        latest_update_at: None,
        components: vec!["Copilot".into()],
    }
}

fn breaker(at: SystemTime, from: BreakerState, to: BreakerState) -> Event {
    Event::Breaker {
        upstream: "copilot-api".into(),
        from,
        to,
        at,
        reason: weir::events::BreakerReason::New,
    }
}

/// The bug this replaces: the tray read a status without queue counts and always said "No
/// creates queued". Here the engine really queues a create and the tray must count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_queued_by_a_real_engine_shows_as_one_queued() {
    let origin = dead_origin();
    let e = engine(&[("copilot-api", &origin)]).await;
    let before = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert_eq!(before.queue_line, "No creates queued");

    assert_eq!(
        post_create(e.handle.local_addr(), &origin).await,
        201,
        "upstream down: the create is queued (answered as a queued job)"
    );
    let after = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert_eq!(after.queue_line, "1 create queued", "{after:?}");
    assert!(
        after.tooltip.contains("\n1 create queued\n"),
        "{}",
        after.tooltip
    );
    // Waiting to be replayed is normal operation, not trouble.
    assert_eq!(after.overall, Overall::Healthy, "{after:?}");
    e.handle.shutdown().await;
}

#[tokio::test]
async fn a_fresh_engine_is_healthy_with_since_times() {
    let s = snapshot().await;
    let v = tray_view(&s, &Recent::default(), &|_| "T".to_string());
    assert_eq!(v.overall, Overall::Healthy);
    assert_eq!(v.overall_line, "Weir: healthy");
    assert_eq!(
        v.upstream_lines,
        vec!["copilot-api: closed since T", "github-api: closed since T"]
    );
    assert_eq!(v.queue_line, "No creates queued");
    assert_eq!(v.github_line, "GitHub Status: not watched");
    assert_eq!(v.github_url, None);
    assert_eq!(
        v.tooltip,
        "Weir: healthy\ncopilot-api: closed since T\ngithub-api: closed since T\n\
         No creates queued\nGitHub Status: not watched"
    );
}

#[tokio::test]
async fn pausing_the_real_engine_wins_over_everything() {
    let e = engine(&[("copilot-api", "http://127.0.0.1:9")]).await;
    e.handle.set_paused(true);
    let mut s = e.handle.status().await;
    s.upstreams[0].guard.breaker.state = BreakerState::Open;
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::Paused);
    assert!(v.paused);
    e.handle.set_paused(false);
    let v = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert_eq!((v.overall, v.paused), (Overall::Healthy, false));
    e.handle.shutdown().await;
}

#[tokio::test]
async fn an_open_breaker_wins_over_degraded_and_is_named() {
    let mut s = snapshot().await;
    s.upstreams[0].guard.breaker.state = BreakerState::Open;
    s.upstreams[0].guard.breaker.since = "2026-11-30T10:05:00Z".into();
    let counts = s.queue.counts.as_mut().expect("the engine reports counts");
    counts.queued = 3;
    counts.in_doubt = 1;
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::BreakerOpen);
    assert_eq!(v.overall_line, "Weir: circuit open for copilot-api");
    assert_eq!(v.upstream_lines[0], "copilot-api: OPEN since 10:05");
    assert_eq!(v.queue_line, "3 creates queued, 1 in doubt");
}

#[tokio::test]
async fn half_open_creates_in_doubt_unavailable_queue_and_incidents_are_degraded() {
    let base = snapshot().await;

    let mut s = base.clone();
    s.upstreams[1].guard.breaker.state = BreakerState::HalfOpen;
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall_line, "Weir: degraded (github-api probing)");
    assert!(v.upstream_lines[1].starts_with("github-api: half-open (probing)"));

    let mut s = base.clone();
    s.queue.counts.as_mut().unwrap().in_doubt = 2;
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Degraded, "No creates queued, 2 in doubt")
    );

    let mut s = base.clone();
    s.queue.available = false;
    s.queue.error = Some("disk full".into());
    s.queue.counts = None;
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Degraded, "Create queue unavailable: disk full")
    );

    let mut s = base;
    let mut g = github_ok();
    g.indicator = Some("minor".into());
    g.incidents.push(incident("Copilot is slow"));
    s.github = Some(g);
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::Degraded);
    assert_eq!(v.github_line, "GitHub incident: Copilot is slow");
    assert_eq!(v.github_url.as_deref(), Some("https://stspg.io/abc"));
}

#[tokio::test]
async fn counts_the_database_did_not_give_read_as_unknown_not_as_zero() {
    let mut s = snapshot().await;
    s.queue.counts = None;
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Unknown, "Create queue: counts unknown")
    );
}

#[tokio::test]
async fn queue_wording_counts_replaying_and_ignores_finished() {
    let mut s = snapshot().await;
    s.queue.counts.as_mut().unwrap().queued = 1;
    assert_eq!(view(&s, &Recent::default()).queue_line, "1 create queued");
    let counts = s.queue.counts.as_mut().unwrap();
    counts.replaying = 1;
    counts.failed = 3;
    counts.done = 9;
    let v = view(&s, &Recent::default());
    // Failed creates are final and were notified: history, not a standing alarm.
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Healthy, "2 creates queued")
    );
}

#[tokio::test]
async fn a_breaker_event_supplies_the_time_only_for_the_state_the_snapshot_has() {
    let mut s = snapshot().await;
    s.upstreams[0].guard.breaker.state = BreakerState::Open;
    s.upstreams[0].guard.breaker.since = String::new();
    let mut recent = Recent::default();
    recent.record(&breaker(t1002(), BreakerState::Closed, BreakerState::Open));
    assert_eq!(
        view(&s, &recent).upstream_lines[0],
        "copilot-api: OPEN since 10:02"
    );
    // The snapshot is the truth: an event for another state adds nothing.
    s.upstreams[0].guard.breaker.state = BreakerState::HalfOpen;
    let v = view(&s, &recent);
    assert_eq!(v.upstream_lines[0], "copilot-api: half-open (probing)");
    assert_eq!(v.overall, Overall::Degraded);
}

#[tokio::test]
async fn github_lines_follow_the_watchers_snapshot_and_resolved_incidents() {
    let mut s = snapshot().await;
    s.github = Some(GithubStatus::initial("https://www.githubstatus.com"));
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.github_line.as_str()),
        (Overall::Healthy, "GitHub Status: unknown")
    );

    s.github = Some(github_ok());
    let v = view(&s, &Recent::default());
    assert_eq!(v.github_line, "GitHub Status: All Systems Operational");
    assert_eq!(
        v.github_url.as_deref(),
        Some("https://www.githubstatus.com")
    );

    // A resolved incident is gone from the snapshot; the event keeps a line for it.
    let mut recent = Recent::default();
    let at = t1002();
    let github = |change, title: &str, url: Option<&str>| Event::Github {
        change,
        title: title.into(),
        url: url.map(str::to_string),
        at,
    };
    recent.record(&github(
        GithubChange::IncidentResolved,
        "Actions down",
        Some("https://stspg.io/x"),
    ));
    // A component blip does not replace it.
    recent.record(&github(GithubChange::ComponentChanged, "Git ops", None));
    let v = view(&s, &recent);
    assert_eq!(
        (v.overall, v.github_line.as_str()),
        (Overall::Healthy, "GitHub: resolved: Actions down")
    );
    assert_eq!(v.github_url.as_deref(), Some("https://stspg.io/x"));

    // A new incident in the snapshot wins over the old resolution.
    s.github
        .as_mut()
        .unwrap()
        .incidents
        .push(incident("Copilot is slow"));
    assert_eq!(
        view(&s, &recent).github_line,
        "GitHub incident: Copilot is slow"
    );
}

#[test]
fn statuspage_indicators_map_to_trouble() {
    for (word, trouble) in [
        ("none", false),
        ("maintenance", false),
        ("minor", true),
        ("major", true),
        ("critical", true),
        ("sideways", false),
    ] {
        assert_eq!(
            Indicator::from_statuspage(word).is_trouble(),
            trouble,
            "{word}"
        );
    }
}

#[tokio::test]
async fn cache_only_chosen_on_the_real_engine_shows_in_the_overall_line_and_the_toggle() {
    use weir::mode::{ChosenBy, Mode};
    let e = engine(&[("copilot-api", "http://127.0.0.1:9")]).await;
    e.handle.set_mode(Mode::CacheOnly, ChosenBy::Tray);
    let v = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert_eq!(v.overall, Overall::Degraded);
    assert!(v.overall_line.starts_with("Weir: cache only"), "{v:?}");
    assert!(v.cache_only && !v.paused);
    e.handle.set_mode(Mode::Automatic, ChosenBy::Tray);
    let v = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert_eq!((v.overall, v.cache_only), (Overall::Healthy, false));
    e.handle.shutdown().await;
}

#[tokio::test]
async fn without_a_token_the_sessions_line_says_how_to_see_them_and_restart_names_nothing() {
    let s = snapshot().await;
    let v = view(&s, &Recent::default());
    assert_eq!(
        v.sessions_line,
        "Agent sessions: store a GitHub token to see them"
    );
    assert_eq!(v.restart_line, "Restart engine");
    // The real snapshot with the companion polling: its own summary line.
    let mut s = s;
    s.sessions.poller = weir::status::PollerState::Polling;
    let v = view(&s, &Recent::default());
    assert_eq!(
        v.sessions_line,
        format!("Agent sessions: {}", s.sessions.summary)
    );
    // A changed listen address waits for a restart: the item says so.
    s.settings.restart_required = vec![weir::config::RestartKey::Listen];
    assert_eq!(
        view(&s, &Recent::default()).restart_line,
        "Restart engine (to apply listen)"
    );
}

/// A loopback agents API answering every request with `body` (JSON), one request per
/// connection; returns its origin.
async fn agents_api(body: String) -> String {
    fake_api(move |_| (200, body.clone())).await
}

/// A loopback API whose answer (status, JSON body) `answer` picks from the whole request
/// (head and body), one request per connection; returns its origin.
async fn fake_api(answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static) -> String {
    let answer = std::sync::Arc::new(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as many body bytes as Content-Length says.
                let complete = |r: &[u8]| {
                    let text = String::from_utf8_lossy(r).to_ascii_lowercase();
                    let Some(end) = text.find("\r\n\r\n") else {
                        return false;
                    };
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    r.len() >= end + 4 + len
                };
                while !complete(&req) {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = answer(&String::from_utf8_lossy(&req));
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    origin
}

/// Stores `token` through the engine's control API, as the dashboard's token panel does.
async fn store_token(e: &Engine, token: &str) -> u16 {
    let body = format!(r#"{{"token":"{token}"}}"#);
    let addr = e.handle.local_addr();
    let request = format!(
        "PUT /_weir/api/token HTTP/1.1\r\nHost: {addr}\r\nX-Weir-Secret: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        e.handle.control_secret(),
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn the_recent_sessions_submenu_shows_what_the_real_poller_listed_and_opens_their_pages() {
    if std::env::var("DBUS_SESSION_BUS_ADDRESS").is_err() {
        eprintln!("no session bus (keychain): run under scripts/with-keychain.sh");
        return;
    }
    let sessions = serde_json::json!({ "sessions": [
        {"id": "s-a", "state": "in_progress", "name": "Fix the login bug", "repository": "octo/app",
         "updated_at": "2026-11-30T09:00:00Z"},
        {"id": "s-b", "state": "completed", "name": "A title much longer than a tray menu should ever be, so it has to be cut short somewhere",
         "repository": "octo/lib", "updated_at": "2026-11-30T08:00:00Z",
         "pull_request": {"html_url": "https://github.com/octo/lib/pull/7"}}
    ]});
    let origin = agents_api(sessions.to_string()).await;
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"{origin}\"\n[offline]\ndetect = false\n"
    );
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let dir = tempfile::tempdir().unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    let e = Engine { handle, _dir: dir };
    // Before a token: an empty submenu (the menu shows "No recent sessions").
    let v = view_of(&e.handle, &Recent::default(), &utc_clock).await;
    assert!(v.recent_sessions.is_empty(), "{v:?}");
    assert_eq!(
        store_token(&e, "gho_trayRecentSessions0123456789").await,
        200
    );
    let mut v = v;
    for _ in 0..300 {
        v = view_of(&e.handle, &Recent::default(), &utc_clock).await;
        if v.recent_sessions.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(v.recent_sessions.len(), 2, "the poller never listed: {v:?}");
    let first = &v.recent_sessions[0];
    assert_eq!(first.label, "Running · octo/app: Fix the login bug");
    assert!(first.url.starts_with("https://github.com/"), "{first:?}");
    let second = &v.recent_sessions[1];
    assert!(
        second
            .label
            .starts_with("Ready for review · octo/lib: A title much longer"),
        "{second:?}"
    );
    assert!(second.label.ends_with('…') && second.label.chars().count() < 90);
    assert!(second.url.contains("/octo/lib/pull/7"), "{second:?}");
    // The sessions line counts what the submenu lists.
    assert!(v.sessions_line.contains("1 running"), "{}", v.sessions_line);
    e.handle.shutdown().await;
}

#[tokio::test]
async fn the_teammates_line_follows_the_real_team_status() {
    // No team configured: no line at all.
    assert_eq!(view(&snapshot().await, &Recent::default()).team_line, None);
    // [team] with a NATS server nothing listens on: the real engine says it is not connected.
    let nats = dead_origin().replace("http://", "nats://");
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n[queue]\ncredentials = \"memory\"\n[offline]\ndetect = false\n[team]\nnats_url = \"{nats}\"\n"
    );
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.team_secrets = Some(weir::team::TeamSecrets {
        key: weir::team::TeamKey::from_hex(
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        ),
        auth: None,
    });
    let handle = weir::start(opts).await.expect("engine starts");
    let mut s = handle.status().await;
    for _ in 0..100 {
        if s.team.as_ref().is_some_and(|t| t.error.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        s = handle.status().await;
    }
    handle.shutdown().await;
    let line = view(&s, &Recent::default()).team_line.expect("a team line");
    assert!(line.starts_with("Team signals: "), "{line}");
    assert!(!s.team.as_ref().unwrap().connected);
    // Connected, then teammates reporting an upstream failing: their summary is the line.
    let t = s.team.as_mut().unwrap();
    t.connected = true;
    t.error = None;
    t.peers_seen = 3;
    assert_eq!(
        view(&s, &Recent::default()).team_line.as_deref(),
        Some("Teammates: 3 heard, no one sees trouble")
    );
    s.team.as_mut().unwrap().summary = Some("3 teammates see copilot-api failing".into());
    assert_eq!(
        view(&s, &Recent::default()).team_line.as_deref(),
        Some("3 teammates see copilot-api failing")
    );
}

#[tokio::test]
async fn a_user_rule_the_org_policy_refuses_is_named_in_the_tooltip() {
    let dir = tempfile::tempdir().unwrap();
    let org = dir.path().join("org-policy.toml");
    std::fs::write(&org, "[[policy]]\nrepo = \"acme/*\"\ncreate = \"fail\"\n").unwrap();
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\npolicy_file = \"{}\"\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n[queue]\ncredentials = \"memory\"\n[offline]\ndetect = false\n[[policy]]\nrepo = \"acme/app\"\ncreate = \"queue\"\n",
        org.display()
    );
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    let s = handle.status().await;
    handle.shutdown().await;
    assert_eq!(s.policy.refused.len(), 1, "{:?}", s.policy);
    let v = view(&s, &Recent::default());
    let line = v
        .tooltip
        .lines()
        .find(|l| l.starts_with("Policy: "))
        .unwrap_or_else(|| panic!("no policy line in {:?}", v.tooltip));
    assert_eq!(line, format!("Policy: {}", s.policy.refused[0].message));
    assert!(line.contains("org-policy.toml:1"), "{line}");
    // Without refusals there is no policy line.
    assert!(!view(&snapshot().await, &Recent::default())
        .tooltip
        .contains("Policy: "));
}

#[tokio::test]
async fn a_model_fallback_episode_from_the_real_engine_is_a_tooltip_line_and_one_notice() {
    let origin = fake_api(|req| {
        if req.contains("\"claude-x\"") {
            (529, r#"{"error":"overloaded"}"#.to_string())
        } else {
            (200, r#"{"model":"gpt-5","choices":[]}"#.to_string())
        }
    })
    .await;
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"{origin}\"\n[queue]\ncredentials = \"memory\"\n[offline]\ndetect = false\n[[model_fallback]]\nfrom = \"claude-*\"\nto = \"gpt-5\"\n"
    );
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let dir = tempfile::tempdir().unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    let mut events = handle.subscribe();
    let authority = origin.strip_prefix("http://").unwrap();
    let body = r#"{"model":"claude-x","messages":[]}"#;
    let request = format!(
        "POST {origin}/chat/completions HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer tray-test\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(handle.local_addr())
        .await
        .unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(
        answer.contains("weir-model-fallback: claude-x -> gpt-5"),
        "{answer}"
    );
    let status = handle.status().await;
    let v = view(&status, &Recent::default());
    assert!(
        v.tooltip
            .lines()
            .any(|l| l == "Models: claude-x → gpt-5 (1 fallback)"),
        "{}",
        v.tooltip
    );
    // The agent-sessions line and state are not the model's business.
    assert_eq!(v.overall, Overall::Healthy, "{v:?}");
    let mut notices = Vec::new();
    while let Ok(e) = events.try_recv() {
        notices.extend(crate::notify::notice_for(&e));
    }
    handle.shutdown().await;
    let started: Vec<_> = notices
        .iter()
        .filter(|n| n.summary == "Model fallback")
        .collect();
    assert_eq!(started.len(), 1, "{notices:?}");
    assert!(
        started[0]
            .body
            .starts_with("Model claude-x is failing on copilot-api"),
        "{:?}",
        started[0]
    );
}

#[tokio::test]
async fn a_local_agent_offer_from_the_real_engine_is_a_submenu_entry_and_a_notice() {
    let dir = tempfile::tempdir().unwrap();
    let checkout = dir.path().join("src/app");
    std::fs::create_dir_all(checkout.join(".git")).unwrap();
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n[queue]\ncredentials = \"memory\"\n[offline]\ndetect = false\n[local_agent]\ncommand = [\"true\"]\ncheckouts = {{ \"octo/app\" = \"{}\" }}\n",
        checkout.display()
    );
    let settings = weir::config::parse_str(&toml, "tray-test.toml").expect("test config");
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    let h = v.handoffs.clone().expect("[local_agent] is configured");
    assert_eq!(h.title, "Local agent: no offers waiting");
    assert!(h.offers.is_empty());
    let mut events = handle.subscribe();
    let offer = handle
        .handoffs()
        .offer(weir::handoff::HandoffRequest {
            upstream: "copilot-api".into(),
            repo: "octo/app".into(),
            problem_statement: "Fix the flaky login test that fails on Mondays".into(),
            base_branch: None,
            rule: "user:1 create=local".into(),
            create: None,
        })
        .await
        .expect("offered");
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    let h = v.handoffs.clone().unwrap();
    assert_eq!(h.title, "Local agent: 1 offer waiting");
    assert_eq!(h.offers.len(), 1);
    assert_eq!(h.offers[0].id.to_string(), offer.id);
    assert_eq!(
        h.offers[0].label,
        "octo/app: Fix the flaky login test that fails on…"
    );
    assert!(v.tooltip.contains("Local agent: 1 offer waiting"));
    // The engine's own event becomes the notice asking for a decision.
    let mut asked = None;
    while let Ok(e) = events.try_recv() {
        if let Some(n) = crate::notify::notice_for(&e) {
            asked = Some(n);
        }
    }
    let asked = asked.expect("a notice for the offer");
    assert_eq!(asked.summary, "Hand to your local agent?");
    assert!(
        asked.body.starts_with("octo/app: Fix the flaky"),
        "{asked:?}"
    );
    // Declining (the offer view's Decline, opened from the submenu) empties the submenu.
    handle
        .handoffs()
        .decline(h.offers[0].id)
        .await
        .expect("declined");
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    assert!(v.handoffs.unwrap().offers.is_empty());
    handle.shutdown().await;
    // Without [local_agent] there is no submenu at all.
    assert_eq!(view(&snapshot().await, &Recent::default()).handoffs, None);
}

#[tokio::test]
async fn the_network_override_from_the_tray_shows_in_the_submenu_title_marks_and_tooltip() {
    use weir::mode::ChosenBy;
    // The OS is not asked, so the answer does not depend on this machine's NetworkManager.
    let toml = "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n[queue]\ncredentials = \"memory\"\n[offline]\ndetect = false\n[network]\ndetect_os = false\n";
    let settings = weir::config::parse_str(toml, "tray-test.toml").expect("test config");
    let dir = tempfile::tempdir().unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("engine starts");
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    assert_eq!(v.network_forced, None);
    assert!(v.network_line.starts_with("Network: not metered"), "{v:?}");
    assert!(!v.tooltip.contains("Network:"), "{}", v.tooltip);

    let mut events = handle.subscribe();
    let now = handle.set_network_metered(Some(true), ChosenBy::Tray);
    assert_eq!(now.persist_error, None);
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    assert_eq!(v.network_forced, Some(true));
    assert_eq!(v.network_line, format!("Network: {}", now.label));
    assert!(v.network_line.contains("metered") && v.network_line.contains("forced"));
    assert!(
        v.tooltip.lines().any(|l| l == v.network_line),
        "{}",
        v.tooltip
    );
    // The developer's own choice changes the answer, and the engine says so, but the tray
    // does not notify about what the developer just did.
    let mut changes = 0;
    while let Ok(e) = events.try_recv() {
        if let Event::Network { to, .. } = &e {
            changes += 1;
            assert!(*to);
            assert_eq!(crate::notify::notice_for(&e), None);
        }
    }
    assert_eq!(changes, 1);

    // "Follow the OS" clears the override; the choice was kept in the data dir meanwhile.
    assert!(dir.path().join("data/network.json").exists());
    handle.set_network_metered(None, ChosenBy::Tray);
    let v = view_of(&handle, &Recent::default(), &utc_clock).await;
    assert_eq!(v.network_forced, None);
    assert!(!v.tooltip.contains("Network:"), "{}", v.tooltip);
    handle.shutdown().await;
}
