//! Per-identity cache: fresh hits, stale-while-revalidate, stale-if-error, tokens until due.
//! Lifetimes are set so no time has to pass (0 s fresh, long stale windows); the transitions
//! over time are unit-tested with paused time in `src/cache/entry.rs`.

mod common;
use common::{eventually, eventually_status, Upstream, Weir};

const VIEW: &str = "/agents/sessions/abc123";

#[tokio::test]
async fn fresh_copy_is_served_with_cache_status_and_age() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    let first = c.get(&url).send().await.unwrap();
    assert_eq!(first.headers()["cache-status"], "weir; fwd=miss; stored");
    let second = c.get(&url).send().await.unwrap();
    assert_eq!(second.headers()["cache-status"], "weir; hit");
    assert!(second.headers().contains_key("age"));
    assert!(second.headers().contains_key("x-request-id"));
    assert_eq!(up.count(VIEW), 1);
}

#[tokio::test]
async fn stale_is_served_while_one_background_refresh_runs() {
    let up = Upstream::start().await;
    // `revalidate_wait = "0s"`: the stale copy answers at once (the wait is tested below).
    let weir = Weir::start(
        &[&up.origin()],
        "[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"1h\"\nrevalidate_wait = \"0s\"\n",
    )
    .await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    let v: serde_json::Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["n"], 1);
    up.set(|b| b.delay = std::time::Duration::from_millis(300));
    // Three requests while the refresh is slow: all stale at once, one refresh upstream.
    for _ in 0..3 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.headers()["cache-status"], "weir; hit; fwd=stale");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["n"], 1, "the stale copy, not a new fetch");
    }
    assert!(eventually(100, || up.count(VIEW) == 2).await);
    assert!(eventually_status(&weir.handle, 100, |s| s.cache.in_flight == 0).await);
    // The refreshed copy replaces the old one.
    let v: serde_json::Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["n"], 2);
    assert!(
        eventually(100, || up.count(VIEW) == 3).await,
        "each stale hit refreshes once"
    );
}

/// The default path: a request that finds a stale copy waits (up to `revalidate_wait`) for the
/// refresh, so a poll just past the TTL gets the current answer, one upstream call each, as it
/// would direct. The wait is long here so that the machine's load cannot decide the outcome.
#[tokio::test]
async fn a_stale_copy_waits_for_a_healthy_refresh_and_answers_current_data() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        "[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"1h\"\nrevalidate_wait = \"10s\"\n",
    )
    .await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    for n in 2..=4 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["cache-status"], "weir; fwd=stale; stored");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["n"], n, "the refreshed answer, not the copy");
    }
    assert_eq!(up.count(VIEW), 4, "one upstream call per poll");

    // A refresh that fails within the wait: the copy covers it, with the upstream's status.
    up.set(|b| b.status = 500);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; fwd-status=500"
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["n"], 4);
}

/// A refresh slower than `revalidate_wait`: the stale copy answers when the wait ends, the
/// refresh goes on detached and its answer is what the next request finds.
#[tokio::test]
async fn a_refresh_slower_than_the_wait_leaves_the_copy_to_answer_and_lands_later() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        "[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"1h\"\nrevalidate_wait = \"50ms\"\n",
    )
    .await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    let v: serde_json::Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["n"], 1);
    up.set(|b| b.delay = std::time::Duration::from_secs(3));
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; hit; fwd=stale");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["n"], 1, "the copy, when the wait ran out");
    assert!(eventually(500, || up.count(VIEW) == 2).await);
    assert!(eventually_status(&weir.handle, 500, |s| s.cache.in_flight == 0).await);
    // The next request's own refresh is slow too: the copy it finds is the landed one.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; hit; fwd=stale");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["n"], 2, "the slow refresh landed in the cache");
}

#[tokio::test]
async fn stale_is_served_when_the_upstream_fails_or_is_down() {
    let up = Upstream::start().await;
    // Offline detection off: this is about stale-if-error in automatic (a refused connection
    // would otherwise take Weir offline, which tests/modes.rs covers).
    let weir = Weir::start(&[&up.origin()], "[offline]\ndetect = false\n[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"1h\"\ndeadline = \"300ms\"\n[retry]\nbase = \"10ms\"\njitter = false\n[breaker]\nminimum_calls = 100\nconsecutive_failures = 0\n").await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);

    up.set(|b| b.status = 500);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "stale copy instead of the 500");
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; fwd-status=500"
    );

    up.kill();
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; detail=connection"
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["n"], 1);

    // Another identity has no copy: it gets a problem, never alice's answer.
    let r = weir.client("bob").get(&url).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "connection");
    assert_eq!(p["upstream"], "up0");
}

#[tokio::test]
async fn client_errors_are_not_cached_or_hidden() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    up.set(|b| b.status = 404);
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    for _ in 0..2 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.headers()["cache-status"],
            "weir; fwd=miss; fwd-status=404"
        );
    }
    assert_eq!(up.count(VIEW), 2);
}

#[tokio::test]
async fn tokens_are_cached_until_due() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    up.set(|b| {
        b.body = Some(format!(
            r#"{{"token":"tid=1","expires_at":{},"refresh_in":1500}}"#,
            now + 1800
        ))
    });
    let c = weir.client("alice");
    let url = format!("{}/copilot_internal/v2/token", up.origin());
    for _ in 0..5 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(up.count("/copilot_internal/v2/token"), 1);

    // A token that is already due (refresh_in within the safety margin) is fetched again.
    let weir2 = Weir::start(&[&up.origin()], "").await;
    up.set(|b| {
        b.body = Some(format!(
            r#"{{"token":"tid=2","expires_at":{},"refresh_in":30}}"#,
            now + 1800
        ))
    });
    let c2 = weir2.client("alice");
    for _ in 0..3 {
        c2.get(&url).send().await.unwrap();
    }
    assert_eq!(up.count("/copilot_internal/v2/token"), 4);
}

/// A 429 (or 503) with `Retry-After` while a stale copy may answer on error: the stale copy
/// is served at once, not after waiting out the hint and asking again (before: one request
/// sent 4 upstream calls and waited 15 s for the same 429s).
#[tokio::test]
async fn a_retry_after_with_a_stale_copy_in_hand_serves_the_copy_without_retrying() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        "[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"1h\"\n",
    )
    .await;
    let c = weir.client("ra");
    let url = format!("{}/agents/sessions/s1", up.origin());
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    up.set(|b| {
        b.status = 429;
        b.extra_headers = vec![("retry-after".into(), "5".into())];
    });
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; fwd-status=429"
    );
    assert_eq!(
        up.total(),
        2,
        "one upstream call for the stale answer, no retries"
    );
}
