//! Degradation-aware freshness (#20): while the upstream is slow or failing, each list/view key
//! is refreshed at most once per `degraded_refresh` (2 min by default) and answered from the
//! cache in between (every 4 min once the strain has lasted 4); a key first asked less than a
//! quarter of an interval ago keeps the normal pace; three slow or failed refreshes in a row
//! strain the upstream, the next fast one ends it.
//!
//! A VS Code window polls one running session every 5 s (its source:
//! `ACTIVE_SESSION_POLL_INTERVAL_MS`) through a real Weir to a loopback upstream. Paused time,
//! zero jitter; the assertions are counts at the upstream and answer statuses, never timings.

mod common;
use common::{Upstream, Weir};
use std::time::Duration;

const SESSION: &str = "/agents/sessions/s1";
const TICK: Duration = Duration::from_millis(5);
const POLL: Duration = Duration::from_secs(5);

/// Weir as shipped (view fresh 3 s, `degraded_refresh` 2 min, `slow_floor` 1 s), zero jitter.
async fn weir(up: &Upstream) -> Weir {
    Weir::start(
        &[&up.origin()],
        "[breaker]\njitter = false\n[retry]\njitter = false\n[queue]\ncredentials = \"memory\"\n",
    )
    .await
}

/// Paused time jumps to the next timer when the runtime looks idle, and a loopback exchange in
/// flight can look idle for a moment: a timer always due within a tick keeps each jump small.
fn ticker() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        loop {
            tokio::time::sleep(TICK).await;
        }
    })
}

/// Polls `path` every 5 s for `d` (simulated); returns the statuses VS Code saw and the
/// `Cache-Status` of each answer.
async fn poll(w: &Weir, origin: &str, path: &str, d: Duration) -> (Vec<u16>, Vec<String>) {
    let c = w.client("vscode");
    let t0 = tokio::time::Instant::now();
    let (mut statuses, mut cache) = (Vec::new(), Vec::new());
    let mut n = 0u32;
    while POLL * n < d {
        tokio::time::sleep_until(t0 + POLL * n).await;
        let r = c
            .get(format!("{origin}{path}"))
            .send()
            .await
            .expect("answered");
        statuses.push(r.status().as_u16());
        cache.push(
            r.headers()
                .get("cache-status")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
        );
        r.bytes().await.expect("a whole body");
        n += 1;
    }
    // Let a background refresh started by the last poll finish before counting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    (statuses, cache)
}

#[tokio::test(start_paused = true)]
async fn healthy_upstream_every_poll_refreshes_as_direct_would() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(20));
    let w = weir(&up).await;
    let t = ticker();
    let (statuses, cache) = poll(&w, &up.origin(), SESSION, Duration::from_secs(600)).await;
    t.abort();
    assert_eq!(statuses.len(), 120);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // The 5 s polls outlive the 3 s TTL: one upstream call per poll, never more.
    assert_eq!(up.count(SESSION), 120);
    assert!(!cache.iter().any(|c| c.contains("degraded")), "{cache:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_upstream_is_asked_once_per_interval_and_the_pace_returns_when_fast() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(1200));
    let w = weir(&up).await;
    let t = ticker();
    // Ten slow minutes: the first 30 s at the normal pace (a young key; it takes three slow
    // refreshes to strain the upstream), then one refresh per two minutes, and per four once
    // the strain has lasted four (the refresh that comes due is made in the background).
    let (statuses, cache) = poll(&w, &up.origin(), SESSION, Duration::from_secs(600)).await;
    assert_eq!(statuses.len(), 120);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let slow = up.count(SESSION);
    // Young: 6 polls in 30 s, each a refresh; then one at ~2.5 min (2 min after the last young
    // one) and one at ~6.5 min (4 min later: the strain has lasted 4 min). One more of slack.
    assert!(
        (8..=9).contains(&slow),
        "{slow} upstream calls for 120 polls"
    );
    let held = cache
        .iter()
        .filter(|c| *c == "weir; hit; detail=degraded")
        .count();
    assert!(
        held >= 100,
        "{held} polls answered from the cache with no call"
    );

    // Fast again: the next refresh that comes due is fast, and from then on every poll
    // refreshes again.
    up.set(|b| b.delay = Duration::from_millis(20));
    let (statuses, cache) = poll(&w, &up.origin(), SESSION, Duration::from_secs(400)).await;
    t.abort();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let fast = up.count(SESSION) - slow;
    // At most 4 min until the due refresh (the stretched interval), then ≥ 160 s at one per
    // poll: ≥ 32 of the 80 polls.
    assert!(fast >= 32, "{fast} upstream calls in 400 fast seconds");
    assert!(
        cache.last().is_some_and(|c| !c.contains("degraded")),
        "{cache:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failing_refreshes_strain_too_and_clients_still_get_answers() {
    let up = Upstream::start().await;
    let w = weir(&up).await;
    let t = ticker();
    // Warm, healthy, past the young period.
    let (_, _) = poll(&w, &up.origin(), SESSION, Duration::from_secs(150)).await;
    let healthy = up.count(SESSION);
    assert_eq!(healthy, 30);
    // Every second request fails fast (500): the first failing refresh strains the upstream.
    up.set(|b| b.fail_one_in = 2);
    let (statuses, _) = poll(&w, &up.origin(), SESSION, Duration::from_secs(600)).await;
    t.abort();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let failing = up.count(SESSION) - healthy;
    // Without pacing: 120 polls, each a refresh plus its retries. With it: a few per 2 min.
    assert!(
        failing <= 20,
        "{failing} upstream calls in 10 failing minutes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_young_key_keeps_the_normal_pace_under_strain() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(1200));
    let w = weir(&up).await;
    let t = ticker();
    // Strained already (the session has been polled slowly for 3 minutes).
    let (_, _) = poll(&w, &up.origin(), SESSION, Duration::from_secs(180)).await;
    // A job just created: VS Code asks it every 2 s (plus the call's time) for up to 30 s,
    // waiting for its pull request. Each ask past the 3 s TTL must still reach the upstream.
    let job = "/agents/swe/v1/jobs/octo/lab/job-1";
    let c = w.client("vscode");
    let t0 = tokio::time::Instant::now();
    let mut asks = 0;
    while t0.elapsed() < Duration::from_secs(30) {
        let r = c.get(format!("{}{job}", up.origin())).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let cs = r
            .headers()
            .get("cache-status")
            .and_then(|v| v.to_str().ok());
        assert!(!cs.unwrap_or("").contains("degraded"), "{cs:?}");
        r.bytes().await.unwrap();
        asks += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    t.abort();
    // Young: the normal pace, as on a healthy day (a copy is fresh for 3 s, then each ask
    // refreshes it), never an answer held back for the degraded interval.
    assert!(asks >= 10, "{asks}");
    assert!(
        up.count(job) >= asks / 3,
        "{} calls for {asks} asks",
        up.count(job)
    );
}
