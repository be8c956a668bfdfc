//! Acceptance for the breaker sized for one developer's traffic (#13, part 1): one IDE window
//! polling two running sessions every 5 s, its session list every 5 minutes, and a CLI list
//! every minute, through a real Weir to a loopback upstream that turns bad.
//!
//! The schedule runs on tokio's paused clock (simulated seconds, zero jitter); the assertions
//! are breaker states and counts of calls that reached the upstream, never wall-clock time.
//! The GitHub Status test runs on the real clock (the watcher polls a loopback status page)
//! and waits only for states, within bounds.

mod common;
use common::Upstream;
use std::time::Duration;
use weir::events::{BreakerReason, BreakerState, Event};
use weir::status::CautionSource;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/status/tests/fixtures/");

/// Weir as shipped, except: no real GitHub Status, zero jitter, and the upstream named like
/// the real one so the reasons read as the tray will show them.
fn config(origin: &str, breaker: &str, extra: &str) -> String {
    let mut toml = String::from("default_upstreams = false\nlisten = \"127.0.0.1:0\"\n");
    if !extra.contains("[status]") {
        toml.push_str("watch_github_status = false\n");
    }
    toml.push_str(&format!(
        "[[upstream]]\nname = \"copilot-api\"\norigin = \"{origin}\"\nstatus_components = [\"Copilot\"]\n\
         [breaker]\njitter = false\n{breaker}[retry]\njitter = false\n[queue]\ncredentials = \"memory\"\n{extra}"
    ));
    toml
}

/// One developer's laptop: Weir, the IDE and the CLI.
struct Laptop {
    weir: weir::EngineHandle,
    ide: reqwest::Client,
    cli: reqwest::Client,
    origin: String,
    /// Simulated milliseconds since the day began (`t0`), by the schedule.
    now_ms: u64,
    t0: tokio::time::Instant,
    ticker: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Laptop {
    fn drop(&mut self) {
        self.ticker.abort();
    }
}

/// Paused time jumps to the next timer whenever the runtime is idle, and a loopback exchange
/// in flight can look idle for a moment; with a timer always due within a tick, such a jump
/// is one tick, not a connection pool's 90 s idle timeout.
const TICK: Duration = Duration::from_millis(5);

/// The schedule's resolution: fine enough that the opening is seen before any half-open probe
/// could go out (the shortest open wait is 5 s).
const STEP_MS: u64 = 250;

impl Laptop {
    async fn start(up: &Upstream, extra: &str) -> Laptop {
        let settings = weir::config::parse_str(&config(&up.origin(), "", extra), "laptop.toml")
            .expect("config");
        let dir = tempfile::tempdir().unwrap();
        let weir = weir::start(weir::EngineOptions::new(settings, dir.path().to_path_buf()))
            .await
            .expect("weir starts");
        let client = |ua: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("authorization", "token dev".parse().unwrap());
            h.insert("user-agent", ua.parse().unwrap());
            reqwest::Client::builder()
                .proxy(reqwest::Proxy::all(format!("http://{}", weir.local_addr())).unwrap())
                .default_headers(h)
                .build()
                .unwrap()
        };
        let ticker = tokio::spawn(async {
            loop {
                tokio::time::sleep(TICK).await;
            }
        });
        Laptop {
            ticker,
            ide: client("GitHubCopilotChat/0.22.4"),
            cli: client("gh/2.60.1"),
            weir,
            origin: up.origin(),
            now_ms: 0,
            t0: tokio::time::Instant::now(),
            _dir: dir,
        }
    }

    async fn get(&self, c: &reqwest::Client, path: &str) {
        let r = c.get(format!("{}{path}", self.origin)).send().await;
        // Whatever Weir answers (fresh, stale, a problem) is fine here: the breaker is under
        // test, and every request must at least be answered.
        let r = r.expect("Weir answers");
        r.bytes().await.expect("a whole body");
    }

    /// Runs the schedule for one step, then lets the step's time pass.
    async fn step(&mut self) {
        let t = self.now_ms;
        if t.is_multiple_of(5_000) {
            self.get(&self.ide, "/agents/sessions/s1").await;
            self.get(&self.ide, "/agents/sessions/s2").await;
        }
        if t.is_multiple_of(60_000) {
            self.get(&self.cli, "/agents/sessions?limit=10").await;
        }
        if t.is_multiple_of(300_000) {
            self.get(&self.ide, "/agents/sessions").await;
        }
        // A request that waited on the upstream took part of the step: the schedule keeps to
        // its own clock.
        self.now_ms += STEP_MS;
        tokio::time::sleep_until(self.t0 + Duration::from_millis(self.now_ms)).await;
    }

    async fn run_for(&mut self, d: Duration) {
        let end = self.now_ms + d.as_millis() as u64;
        while self.now_ms < end {
            self.step().await;
        }
    }

    /// The breaker as the status shows it (read without SQLite, so paused time stays put).
    async fn breaker(&self) -> weir::status::BreakerView {
        self.weir.status_now().upstreams[0].guard.breaker.clone()
    }
}

fn breaker_events(
    rx: &mut tokio::sync::broadcast::Receiver<Event>,
) -> Vec<(BreakerState, BreakerReason)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let Event::Breaker {
            upstream,
            to,
            reason,
            ..
        } = e
        {
            assert_eq!(upstream, "copilot-api");
            out.push((to, reason));
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_failing_upstream_opens_the_breaker_within_five_calls() {
    let up = Upstream::start().await;
    let mut l = Laptop::start(&up, "").await;
    // Ten healthy minutes: the cache is warm and the breaker has seen only successes.
    l.run_for(Duration::from_secs(600)).await;
    let b = l.breaker().await;
    assert_eq!(b.state, BreakerState::Closed);
    // What one laptop sends through Weir's cache in 30 s: far below the window's 20 calls.
    assert!(b.calls_in_window < 20, "{}", b.calls_in_window);
    let healthy = up.total();
    assert!(healthy > 100, "{healthy} healthy calls");

    up.set(|b| b.status = 500);
    let mut events = l.weir.subscribe();
    let mut steps = 0;
    while l.breaker().await.state != BreakerState::Open {
        l.step().await;
        steps += 1;
        assert!(steps < 4 * 120, "still not open after 2 simulated minutes");
    }
    let failing = up.total() - healthy;
    assert!(
        (1..=5).contains(&failing),
        "opened after {failing} failing upstream calls"
    );
    // Four refreshes failed together at minute 10 and each wanted a retry: only one retry
    // went (the breaker holds retries that could not change the verdict).
    let b = l.breaker().await;
    assert_eq!(failing, 5);
    assert!(
        b.reason.starts_with("5 consecutive failures"),
        "{}",
        b.reason
    );
    let seen = breaker_events(&mut events);
    assert_eq!(
        seen.last().map(|e| e.0),
        Some(BreakerState::Open),
        "{seen:?}"
    );
    assert!(
        matches!(&seen.last().unwrap().1, BreakerReason::Opened { cause, .. } if cause == "5 consecutive failures"),
        "{seen:?}"
    );
    // Open: the IDE keeps polling, nothing reaches the upstream while it stays open.
    let mut open_steps = 0;
    loop {
        let before = up.total();
        l.step().await;
        if l.breaker().await.state != BreakerState::Open {
            break; // the wait is over: probes may go now
        }
        assert_eq!(up.total(), before, "a call went out while open");
        open_steps += 1;
    }
    assert!(open_steps >= 4, "open for {open_steps} steps only");
}

#[tokio::test(start_paused = true)]
async fn the_oct_29_profile_reports_degraded_within_a_minute() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(100));
    // The breaker's own judgement, fed by every poll: with degradation-aware freshness on
    // (`degraded_refresh`, the default), the first slow refresh makes Weir hold its cached
    // copies and the window empties, which is the point of it but leaves the breaker nothing
    // to judge (`tests/degraded_freshness.rs` tests that side).
    let paced_off =
        "[classes.list]\ndegraded_refresh = \"0s\"\n[classes.view]\ndegraded_refresh = \"0s\"\n";
    let mut l = Laptop::start(&up, paced_off).await;
    // A healthy baseline: ten minutes at 100 ms.
    l.run_for(Duration::from_secs(600)).await;
    let b = l.breaker().await;
    assert_eq!(b.state, BreakerState::Closed);
    let view = b
        .latency
        .iter()
        .find(|c| c.class == "view")
        .expect("a view baseline");
    let p50 = view.p50_ms.expect("learned");
    assert!((100.0..110.0).contains(&p50), "view p50 {p50} ms");
    // 4 × 100 ms is under the 1 s floor.
    assert_eq!(view.slow_after_ms, Some(1000.0));

    // Oct 29: every call takes 1.2 s (under the list/view `slow_call` of 5 s), 2 % fail.
    let mut events = l.weir.subscribe();
    up.set(|b| {
        b.delay = Duration::from_millis(1200);
        b.fail_one_in = 50;
    });
    // Simulated time (the paused clock), not wall-clock time.
    let changed_at = tokio::time::Instant::now();
    while l.breaker().await.state != BreakerState::Degraded {
        l.step().await;
        assert!(
            changed_at.elapsed() <= Duration::from_secs(60),
            "not degraded 60 simulated seconds after the change: {:?}",
            l.breaker().await
        );
    }
    println!(
        "Oct 29 profile: degraded {:.1} simulated seconds after the change",
        changed_at.elapsed().as_secs_f64()
    );
    let seen = breaker_events(&mut events);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, BreakerState::Degraded);
    assert!(
        matches!(&seen[0].1, BreakerReason::Degraded(why) if why.contains("slower than usual")),
        "{}",
        seen[0].1
    );

    // It stays degraded while the slowdown lasts, and never opens: the calls still succeed.
    l.run_for(Duration::from_secs(300)).await;
    let b = l.breaker().await;
    assert_eq!(b.state, BreakerState::Degraded, "{}", b.reason);
    assert_eq!(b.opens_total, 0);
    assert!(breaker_events(&mut events).is_empty());

    // The slowdown ends: healthy again.
    up.set(|b| {
        b.delay = Duration::from_millis(100);
        b.fail_one_in = 0;
    });
    l.run_for(Duration::from_secs(60)).await;
    let b = l.breaker().await;
    assert_eq!(b.state, BreakerState::Closed, "{}", b.reason);
    let seen = breaker_events(&mut events);
    assert_eq!(seen.len(), 1, "{seen:?}");
    // The tray says "back to normal" for exactly this variant.
    assert!(
        matches!(seen[0].1, BreakerReason::Recovered(_)),
        "{}",
        seen[0].1
    );
}

/// Serves the recorded status page `summary` + `unresolved` fixtures.
fn serve_status(page: &Upstream, summary: &str, unresolved: &str) {
    let fixture = |name: &str| std::fs::read_to_string(format!("{FIX}{name}.json")).unwrap();
    let (s, u) = (fixture(summary), fixture(unresolved));
    page.set(|b| {
        b.path_bodies = vec![
            ("/api/v2/summary.json".into(), s),
            ("/api/v2/incidents/unresolved.json".into(), u),
        ]
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_incident_makes_it_cautious_but_never_opens_it_alone() {
    let page = Upstream::start().await;
    serve_status(&page, "summary_incident", "unresolved_incident");
    let up = Upstream::start().await;
    // Opened once, it stays open: the test is about what opens it.
    let toml = config(
        &up.origin(),
        "open_wait = \"1h\"\n",
        &format!(
            "[status]\nbase_url = \"{}\"\n[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n",
            page.origin()
        ),
    );
    let settings = weir::config::parse_str(&toml, "laptop.toml").expect("config");
    let dir = tempfile::tempdir().unwrap();
    let weir = weir::start(weir::EngineOptions::new(settings, dir.path().to_path_buf()))
        .await
        .unwrap();
    let cautious = common::eventually_status(&weir, 250, |s| {
        !s.upstreams[0].guard.breaker.caution.is_empty()
    })
    .await;
    let b = weir.status().await.upstreams[0].guard.breaker.clone();
    assert!(cautious, "no caution from the incident: {b:?}");
    assert_eq!(b.caution[0].source, CautionSource::GithubStatus);
    assert_eq!(
        b.caution[0].detail.as_deref(),
        Some("incident: Disruption with some GitHub services: Copilot")
    );
    assert_eq!((b.minimum_calls, b.consecutive_threshold), (5, 3));
    // The dashboard reads the same through the JSON API.
    let json: serde_json::Value =
        reqwest::get(format!("http://{}/_weir/api/status", weir.local_addr()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(
        json["upstreams"][0]["breaker"]["caution"][0]["source"],
        "github_status"
    );

    // A healthy upstream during the incident: caution alone never opens the breaker.
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", weir.local_addr())).unwrap())
        .build()
        .unwrap();
    let view = |i: usize| format!("{}/agents/sessions/s{i}", up.origin());
    for i in 0..30 {
        let r = c
            .get(view(i))
            .header("authorization", "token dev")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let b = weir.status().await.upstreams[0].guard.breaker.clone();
    assert_eq!(b.state, BreakerState::Closed);
    assert_eq!(b.opens_total, 0);

    // Failing now: three failures in a row open it (five without the incident).
    up.set(|b| b.status = 500);
    let healthy = up.total();
    let mut i = 100;
    while weir.status().await.upstreams[0].guard.breaker.state != BreakerState::Open {
        c.get(view(i))
            .header("authorization", "token dev")
            .send()
            .await
            .unwrap();
        i += 1;
        assert!(i < 120, "never opened");
    }
    assert_eq!(up.total() - healthy, 3, "failing calls before opening");
    let b = weir.status().await.upstreams[0].guard.breaker.clone();
    assert!(
        b.reason.starts_with(
            "3 consecutive failures (cautious: GitHub Status: incident: Disruption with some GitHub services: Copilot)"
        ),
        "{}",
        b.reason
    );

    // The incident is resolved: the caution goes, the normal thresholds come back.
    serve_status(&page, "summary_operational", "unresolved_none");
    weir.refresh_github_status();
    let cleared = common::eventually_status(&weir, 250, |s| {
        s.upstreams[0].guard.breaker.caution.is_empty()
    })
    .await;
    assert!(cleared);
    let b = weir.status().await.upstreams[0].guard.breaker.clone();
    assert_eq!((b.minimum_calls, b.consecutive_threshold), (20, 5));
}
