//! Resilience, counted at real loopback upstreams that inject faults. No timing assertions:
//! waits are bounded polls for a state, jitter is off.

mod common;
use common::{Seen, Upstream, Weir};
use std::time::Duration;
use weir::events::BreakerState;

/// Retries fast and deterministic, breaker out of the way unless a test sets it.
const QUIET: &str = "[retry]\nbase = \"1ms\"\ncap = \"5ms\"\njitter = false\n[breaker]\njitter = false\nminimum_calls = 1000\nconsecutive_failures = 0\n";

fn view(up: &Upstream, i: usize) -> String {
    format!("{}/agents/sessions/s{i}", up.origin())
}

#[tokio::test]
async fn a_400_is_sent_upstream_exactly_once() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 400);
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let r = weir.client("a").get(view(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 400, "the upstream's answer passes through");
    assert_eq!(up.total(), 1);
    let s = weir.status().await;
    assert_eq!(s["upstreams"][0]["errors_by_kind"]["fatal"], 1);
}

#[tokio::test]
async fn retries_under_total_failure_stay_within_the_budget() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 500);
    let extra = "[retry]\nbase = \"1ms\"\ncap = \"2ms\"\njitter = false\nbudget_ratio = 0.2\nbudget_min_per_sec = 0\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";
    let weir = Weir::start(&[&up.origin()], extra).await;
    let c = weir.client("a");
    for i in 0..50 {
        let r = c.get(view(&up, i)).send().await.unwrap();
        assert_eq!(r.status(), 500);
    }
    let total = up.total();
    assert!(total > 50, "some retries happened: {total}");
    assert!(
        total <= 60,
        "retries ≤ 20% of 50 requests, got {} retries",
        total - 50
    );
}

#[tokio::test]
async fn retry_after_holds_back_every_surface_of_that_identity() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 429;
        b.extra_headers = vec![("retry-after".into(), "2".into())];
    });
    // A short deadline: the 2 s wait does not fit, so Weir does not retry within the call.
    let weir = Weir::start(
        &[&up.origin()],
        &format!("{QUIET}[classes.view]\ndeadline = \"500ms\"\n"),
    )
    .await;
    let r = weir.client("a").get(view(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(up.total(), 1);
    up.set(|b| b.status = 200);
    let proxy = reqwest::Proxy::all(weir.proxy_url()).unwrap();
    let c = reqwest::Client::builder().proxy(proxy).build().unwrap();
    for (i, ua) in ["GitHubCopilotChat/1", "gh/2.60", "Mozilla/5.0"]
        .iter()
        .enumerate()
    {
        let r = c
            .get(view(&up, 10 + i))
            .header("user-agent", *ua)
            .header("authorization", "token a")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429, "{ua}");
        let ra: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=2).contains(&ra), "retry-after {ra}");
        let p: serde_json::Value = r.json().await.unwrap();
        assert_eq!(p["kind"], "rate_limited");
    }
    assert_eq!(
        up.total(),
        1,
        "nothing reached the upstream during the cooldown"
    );
}

/// #31 item 7: a rate limit is answered at once with the upstream's `Retry-After`, never
/// retried while the wait lasts, even when the wait would fit the class deadline (the view
/// class's default, 20 s, leaves room for many 2 s waits). Counted at the upstream.
#[tokio::test]
async fn a_rate_limit_reaches_the_upstream_once_and_is_answered_at_once() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 429;
        b.extra_headers = vec![("retry-after".into(), "2".into())];
    });
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let c = weir.client("a");
    let r = c.get(view(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2", "the upstream's own wait");
    assert_eq!(up.total(), 1, "one request, one attempt");
    // GitHub's secondary rate limit: a 403 that says so, from another identity (the first
    // one's cooldown does not hold it back).
    up.set(|b| {
        b.status = 403;
        b.body = Some(r#"{"message":"You have exceeded a secondary rate limit."}"#.into());
    });
    let r = weir.client("b").get(view(&up, 2)).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(up.total(), 2, "the secondary limit was not retried either");
    let s = weir.status().await;
    assert_eq!(s["upstreams"][0]["errors_by_kind"]["rate_limited"], 2);
}

/// A secondary-limit 403 (like a 429) is beaten by a stale copy of a cacheable answer.
#[tokio::test]
async fn a_secondary_rate_limit_is_answered_from_a_stale_copy() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        &format!("{QUIET}[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"1h\"\n"),
    )
    .await;
    let c = weir.client("a");
    let first = c.get(view(&up, 1)).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let body = first.text().await.unwrap();
    up.set(|b| {
        b.status = 403;
        b.extra_headers = vec![("retry-after".into(), "60".into())];
        b.body = Some(r#"{"message":"You have exceeded a secondary rate limit."}"#.into());
    });
    let r = c.get(view(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 200, "the stale copy, not the 403");
    let cs = r.headers()["cache-status"].to_str().unwrap().to_string();
    assert!(cs.contains("fwd=stale"), "{cs}");
    assert_eq!(r.text().await.unwrap(), body);
    assert_eq!(up.total(), 2);
}

async fn wait_state(weir: &Weir, state: BreakerState) -> bool {
    for _ in 0..250 {
        if weir.handle.status().await.upstreams[0].guard.breaker.state == state {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_run_of_5xx_opens_the_breaker_with_an_event() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 502);
    let cfg = "[retry]\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\njitter = false\n[breaker]\nminimum_calls = 5\njitter = false\nopen_wait = \"1h\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let mut events = weir.handle.subscribe();
    let c = weir.client("a");
    for i in 0..5 {
        c.get(view(&up, i)).send().await.unwrap();
    }
    assert!(wait_state(&weir, BreakerState::Open).await);
    let s = weir.status().await;
    assert_eq!(s["upstreams"][0]["breaker"]["state"], "open");
    // Five in a row: the consecutive-failure trigger speaks first.
    assert!(s["upstreams"][0]["breaker"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("5 consecutive failures"));
    let ev = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    let v = serde_json::to_value(&ev).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["to"].as_str()),
        (Some("breaker"), Some("open"))
    );
    // Open: fail fast, nothing more upstream.
    let before = up.total();
    let r = c.get(view(&up, 99)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "breaker_open");
    assert_eq!(p["breaker"], "open");
    assert_eq!(up.total(), before);
}

/// #31 item 6: a client that reuses its socket across a breaker-open POST is told when Weir
/// closes it. The POST's body is still on its way when Weir answers (it never reads it), so
/// hyper cannot keep the connection: the answer must say `Connection: close`, or the next
/// request on the socket must be answered.
#[tokio::test]
async fn a_breaker_open_post_says_when_it_closes_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::start().await;
    up.set(|b| b.status = 502);
    let cfg = "[retry]\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\njitter = false\n[breaker]\nminimum_calls = 5\njitter = false\nopen_wait = \"1h\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let c = weir.client("a");
    for i in 0..5 {
        c.get(view(&up, i)).send().await.unwrap();
    }
    assert!(wait_state(&weir, BreakerState::Open).await);
    let before = up.total();
    let mut s = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let host = up.addr;
    let body = vec![b'x'; 64 * 1024];
    let head = format!(
        "POST http://{host}/agents/sessions/s1/notes HTTP/1.1\r\nHost: {host}\r\nAuthorization: token a\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body[..100]).await.unwrap();
    let (status, headers) = read_head(&mut s).await;
    assert_eq!(status, 503, "{headers}");
    assert!(headers.contains("application/problem+json"), "{headers}");
    let says_close = headers.to_ascii_lowercase().contains("connection: close");
    // The rest of the body, then the next request on the same socket.
    let _ = s.write_all(&body[100..]).await;
    let next = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nAuthorization: token a\r\n\r\n",
        view(&up, 0)
    );
    let _ = s.write_all(next.as_bytes()).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    let answered = String::from_utf8_lossy(&rest).contains("HTTP/1.1 ");
    assert!(
        says_close || answered,
        "the connection was closed without a word: {headers}"
    );
    assert_eq!(up.total(), before, "the open breaker sent nothing upstream");
}

/// Reads one response head and its `Content-Length` body; gives the status and the head.
async fn read_head(s: &mut tokio::net::TcpStream) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "EOF in the head");
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status = text[9..12].parse().unwrap();
    let len: usize = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (status, text)
}

#[tokio::test]
async fn slow_successes_open_the_breaker() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(120));
    let cfg = "[retry]\njitter = false\n[breaker]\njitter = false\nminimum_calls = 4\nopen_wait = \"1h\"\n[classes.view]\nslow_call = \"50ms\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let c = weir.client("a");
    for i in 0..4 {
        assert_eq!(c.get(view(&up, i)).send().await.unwrap().status(), 200);
    }
    assert!(wait_state(&weir, BreakerState::Open).await);
    let reason = weir.handle.status().await.upstreams[0]
        .guard
        .breaker
        .reason
        .clone();
    assert!(reason.contains("slow"), "{reason}");
}

#[tokio::test]
async fn half_open_lets_exactly_the_configured_probes_through() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 500);
    let cfg = "[retry]\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\njitter = false\n[breaker]\nminimum_calls = 3\njitter = false\nopen_wait = \"300ms\"\nhalf_open_probes = 2\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let c = weir.client("a");
    for i in 0..3 {
        c.get(view(&up, i)).send().await.unwrap();
    }
    assert!(wait_state(&weir, BreakerState::Open).await);
    assert!(wait_state(&weir, BreakerState::HalfOpen).await);
    let before = up.total();
    up.set(|b| {
        b.status = 200;
        b.delay = Duration::from_millis(300);
    });
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let (c, u) = (c.clone(), view(&up, 100 + i));
            tokio::spawn(async move { c.get(u).send().await.unwrap().status().as_u16() })
        })
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(up.total() - before, 2, "exactly two probes: {codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 2);
    assert_eq!(codes.iter().filter(|c| **c == 503).count(), 4);
    assert!(
        wait_state(&weir, BreakerState::Closed).await,
        "two good probes close it"
    );
}

#[tokio::test]
async fn while_open_list_is_served_stale_others_fail_fast_and_creates_are_queued() {
    let up = Upstream::start().await;
    let cfg = "[retry]\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\njitter = false\n[breaker]\nminimum_calls = 3\njitter = false\nopen_wait = \"1h\"\n[classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n[queue]\ncredentials = \"memory\"\n";
    let weir = Weir::start(&[&up.origin()], cfg).await;
    let c = weir.client("a");
    let list = format!("{}/agents/sessions", up.origin());
    assert_eq!(c.get(&list).send().await.unwrap().status(), 200);
    up.set(|b| b.status = 503);
    for i in 0..3 {
        c.get(view(&up, i)).send().await.unwrap();
    }
    assert!(wait_state(&weir, BreakerState::Open).await);
    let before = up.total();
    let r = c.get(&list).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; detail=breaker_open"
    );
    // A non-cacheable call (the session log stream) fails fast with 503 + Retry-After.
    let r = c
        .get(format!("{}/agents/sessions/s1/logs", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let ra: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(ra > 0);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "breaker_open");
    // A create is kept for later instead (see tests/queue.rs for the replay).
    let r = c
        .post(format!("{}/agents/swe/v1/jobs/o/r", up.origin()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        up.total(),
        before,
        "nothing reached the upstream while open"
    );
}

#[tokio::test]
async fn the_fallback_gets_one_attempt() {
    let primary = Upstream::start().await;
    let fallback = Upstream::start().await;
    primary.set(|b| b.status = 503);
    let extra = format!(
        "fallback = \"{}\"\n{QUIET}[classes.view]\ndeadline = \"200ms\"\n",
        fallback.origin()
    );
    let weir = Weir::start(&[&primary.origin()], &extra).await;
    let r = weir
        .client("a")
        .get(view(&primary, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["weir-fallback"], fallback.origin().as_str());
    assert_eq!(fallback.total(), 1);
    assert!(primary.total() >= 1);
    // Fatal answers never go to the fallback.
    primary.set(|b| b.status = 404);
    let r = weir
        .client("a")
        .get(view(&primary, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(fallback.total(), 1);
    assert_eq!(weir.status().await["upstreams"][0]["fallback_attempts"], 1);
}

#[tokio::test]
async fn the_bulkhead_sheds_beyond_its_limit() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(400));
    let weir = Weir::start(
        &[&up.origin()],
        &format!("{QUIET}[bulkhead]\nmax_in_flight = 1\nmax_queue = 0\n"),
    )
    .await;
    let c = weir.client("a");
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let (c, u) = (c.clone(), view(&up, i));
            tokio::spawn(async move {
                let r = c.get(u).send().await.unwrap();
                let s = r.status().as_u16();
                let body: serde_json::Value = r.json().await.unwrap();
                (s, body)
            })
        })
        .collect();
    let mut shed = 0;
    for t in tasks {
        let (s, body) = t.await.unwrap();
        if s == 503 {
            assert_eq!(body["kind"], "overloaded");
            shed += 1;
        }
    }
    assert_eq!(shed, 2);
    assert_eq!(up.total(), 1);
}

#[tokio::test]
async fn client_rate_limits_answer_429_with_ratelimit_headers() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        &format!("{QUIET}[rate_limit]\nburst = 2\nper = \"10s\"\n"),
    )
    .await;
    let c = weir.client("a");
    for i in 0..2 {
        assert_eq!(c.get(view(&up, i)).send().await.unwrap().status(), 200);
    }
    let r = c.get(view(&up, 3)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let h = r.headers();
    assert!(h.contains_key("retry-after"));
    assert!(
        h["ratelimit-policy"].to_str().unwrap().contains("q=2"),
        "{:?}",
        h["ratelimit-policy"]
    );
    assert!(
        h["ratelimit"].to_str().unwrap().contains("r=0"),
        "{:?}",
        h["ratelimit"]
    );
    assert_eq!(up.total(), 2);
    // Another identity has its own allowance.
    assert_eq!(
        weir.client("b")
            .get(view(&up, 4))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Cache hits are never limited.
    assert_eq!(c.get(view(&up, 0)).send().await.unwrap().status(), 200);
}

/// A client over its rate limit that has a copy still gets it: a session view's refresh wait
/// is never limited (like the stale hit it replaced), and a session's logs (class `stream`,
/// whose wait is admitted because its fallback may reach the upstream) answer with the copy.
#[tokio::test]
async fn over_the_rate_limit_a_copy_in_hand_still_answers() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        &format!("{QUIET}[rate_limit]\nburst = 3\nper = \"1h\"\n[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"1h\"\nrevalidate_wait = \"5s\"\n[classes.stream]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"1h\"\nrevalidate_wait = \"5s\"\n"),
    )
    .await;
    let c = weir.client("a");
    let logs = format!("{}/agents/sessions/s1/logs", up.origin());
    let v = view(&up, 0);
    // Three fetches spend the allowance: the logs' miss and its first refresh wait, the view's
    // miss.
    for url in [&logs, &logs, &v] {
        assert_eq!(c.get(url).send().await.unwrap().status(), 200, "{url}");
    }
    let r = c.get(&logs).send().await.unwrap();
    assert_eq!(r.status(), 200, "the copy, not a 429");
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit; fwd=stale; detail=client-rate-limited"
    );
    // The view with a copy: its refresh wait is not limited, and answers the current data.
    let r = c.get(&v).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-status"], "weir; fwd=stale; stored");
    let second: serde_json::Value = r.json().await.unwrap();
    assert_eq!(second["n"], 2, "refreshed");
    // Nothing else is: a view it has no copy of is limited.
    assert_eq!(c.get(view(&up, 9)).send().await.unwrap().status(), 429);
}

/// The figure for the issue note: a naive client (5 immediate retries per failed call) against
/// an always-failing upstream, directly and through Weir.
#[tokio::test]
async fn naive_retries_reach_the_upstream_far_less_through_weir() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let direct = reqwest::Client::new();
    let calls = 20;
    let naive = |c: reqwest::Client, url: String| async move {
        for _ in 0..6 {
            if c.get(&url)
                .send()
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false)
            {
                break;
            }
        }
    };
    for i in 0..calls {
        naive(direct.clone(), view(&up, i)).await;
    }
    let without = up.total();
    let up2 = Upstream::start().await;
    up2.set(|b| b.status = 503);
    let weir = Weir::start(&[&up2.origin()], "[retry]\nbase = \"1ms\"\ncap = \"5ms\"\n").await;
    for i in 0..calls {
        naive(weir.client("a"), view(&up2, i)).await;
    }
    let with = up2.total();
    println!("naive client, {calls} calls, always-503 upstream: {without} upstream requests direct, {with} through Weir");
    assert_eq!(without, calls * 6);
    assert!(with < without / 2, "with Weir {with}, without {without}");
}

fn list(up: &Upstream, i: usize) -> String {
    format!("{}/agents/sessions/nwo/o/r{i}", up.origin())
}

/// Issue 22 item 9: a Weir started during a slowdown has no good calls to learn "normal" from.
/// Every list takes 3 s from the first call (under the 5 s absolute `slow_call`): the class's
/// documented normal latency is the baseline until enough good calls are seen, so the breaker
/// leaves `closed` within a bounded number of calls instead of never.
#[tokio::test]
async fn a_weir_started_during_a_slowdown_sees_it_as_slow() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_secs(3));
    let weir = Weir::start(&[&up.origin()], "[breaker]\njitter = false\n").await;
    let c = weir.client("a");
    // Batches of 5 concurrent distinct lists (nothing coalesced or cached), at most 3 batches.
    let mut calls = 0;
    for batch in 0..3 {
        let replies =
            futures_util::future::join_all((0..5).map(|i| c.get(list(&up, batch * 5 + i)).send()))
                .await;
        for r in replies {
            assert_eq!(r.unwrap().status(), 200);
        }
        calls += 5;
        let state = weir.handle.status().await.upstreams[0].guard.breaker.state;
        if state != BreakerState::Closed {
            break;
        }
    }
    let b = weir.handle.status().await.upstreams[0]
        .guard
        .breaker
        .clone();
    assert_ne!(
        b.state,
        BreakerState::Closed,
        "still closed after {calls} calls of 3 s"
    );
    assert!(calls <= 5, "{calls} calls before it noticed");
    assert!(b.reason.contains("slower than usual"), "{}", b.reason);
    let l = b.latency.iter().find(|l| l.class == "list").unwrap();
    assert!(l.prior, "judged against the documented normal latency");
    assert_eq!(l.samples, 0, "3 s calls are not learned as normal");
}

/// Baselines learned in one run are the next run's from its first call: kept in the data dir,
/// in a small file only the user can read.
#[tokio::test]
async fn latency_baselines_survive_a_restart() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(20));
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n[network]\ndetect_os = false\n",
        up.origin()
    );
    let start = || async {
        let settings = weir::config::parse_str(&toml, "test.toml").unwrap();
        weir::start(weir::EngineOptions::new(settings, dir.path().to_path_buf()))
            .await
            .unwrap()
    };
    let first = start().await;
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", first.local_addr())).unwrap())
        .build()
        .unwrap();
    for i in 0..12 {
        let r = c
            .get(list(&up, i))
            .header("authorization", "token a")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let learned = first.status().await.upstreams[0]
        .guard
        .breaker
        .latency
        .clone();
    let l = learned.iter().find(|l| l.class == "list").unwrap().clone();
    assert_eq!(l.samples, 12);
    assert!(!l.prior);
    first.shutdown().await;
    let file = dir.path().join("baselines.json");
    let meta = std::fs::metadata(&file).expect("baselines written on shutdown");
    assert!(meta.len() < 4096, "{} bytes", meta.len());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
    let second = start().await;
    let again = second.status().await.upstreams[0]
        .guard
        .breaker
        .latency
        .clone();
    let r = again.iter().find(|l| l.class == "list").expect("restored");
    assert_eq!((r.samples, r.prior), (12, false));
    // Kept to the microsecond.
    let (was, is) = (l.p50_ms.unwrap(), r.p50_ms.unwrap());
    assert!((was - is).abs() < 0.001, "{was} ms before, {is} ms after");
    second.shutdown().await;
}

/// Every attempt carries the client's own head (#32): the first attempt sends it (moved), a
/// retry and the fallback a copy kept for them; a request that cannot be sent again keeps no
/// copy and is sent once. Each origin gets its own `Host`, and every attempt the same request id.
#[tokio::test]
async fn every_attempt_carries_the_clients_head() {
    let primary = Upstream::start().await;
    let fallback = Upstream::start().await;
    primary.set(|b| b.status = 500);
    let extra = format!(
        "fallback = \"{}\"\n{QUIET}[classes.other]\ndeadline = \"300ms\"\n",
        fallback.origin()
    );
    let weir = Weir::start(&[&primary.origin()], &extra).await;
    let c = weir.client("a");
    let get = format!("{}/repos/o/r/branches?x=1", primary.origin());
    let r = c.get(&get).header("x-probe", "get").send().await.unwrap();
    assert_eq!(r.status(), 200, "the fallback answered");
    let primary_saw = primary.seen();
    assert!(primary_saw.len() >= 2, "retried: {}", primary_saw.len());
    let fallback_saw = fallback.seen();
    assert_eq!(fallback_saw.len(), 1);
    let id = &primary_saw[0].headers["x-request-id"];
    for (s, up) in primary_saw
        .iter()
        .map(|s| (s, &primary))
        .chain(fallback_saw.iter().map(|s| (s, &fallback)))
    {
        assert_eq!(s.method, "GET");
        assert_eq!(s.path_and_query, "/repos/o/r/branches?x=1");
        assert_eq!(s.headers["x-probe"], "get");
        assert_eq!(s.headers["authorization"], "token a");
        assert_eq!(s.headers["host"], up.addr.to_string().as_str());
        assert_eq!(&s.headers["x-request-id"], id, "one request, one id");
    }

    // Not idempotent, empty body, refused outright: the primary once, then the fallback.
    primary.set(|b| b.status = 503);
    let patch = format!("{}/repos/o/r/branches/b", primary.origin());
    let r = c
        .patch(&patch)
        .header("x-probe", "patch")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let patched = |up: &Upstream| -> Vec<Seen> {
        up.seen()
            .into_iter()
            .filter(|s| s.method == "PATCH")
            .collect()
    };
    assert_eq!(patched(&primary).len(), 1);
    let f = patched(&fallback);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].headers["x-probe"], "patch");
    assert_eq!(f[0].path_and_query, "/repos/o/r/branches/b");

    // No fallback: a failed PATCH is sent once, with its head, and answered.
    let lone = Upstream::start().await;
    lone.set(|b| b.status = 500);
    let weir = Weir::start(&[&lone.origin()], QUIET).await;
    let r = weir
        .client("b")
        .patch(format!("{}/repos/o/r/branches/b", lone.origin()))
        .header("x-probe", "lone")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let s = lone.seen();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].headers["x-probe"], "lone");
    assert_eq!(&s[0].body[..], b"{}");
}

/// A request whose streamed body went with a first attempt that never reached the primary (a
/// refused connection) is not sent to the fallback: its body is gone, and the head alone (with
/// the client's `Content-Length`) would be a different request. The client gets the primary's
/// failure; the fallback sees nothing.
#[tokio::test]
async fn a_body_sent_with_a_failed_first_attempt_is_never_sent_empty_to_the_fallback() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let primary = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let fallback = Upstream::start().await;
    let extra = format!(
        "fallback = \"{}\"\n{QUIET}[classes.other]\ndeadline = \"2s\"\n",
        fallback.origin()
    );
    let weir = Weir::start(&[&primary], &extra).await;
    let r = weir
        .client("a")
        .patch(format!("{primary}/repos/o/r/branches/b"))
        .body(reqwest::Body::wrap_stream(futures::stream::iter(vec![
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"name\":")),
            Ok(bytes::Bytes::from_static(b"\"b\"}")),
        ])))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_server_error(), "{}", r.status());
    let seen: Vec<Seen> = fallback
        .seen()
        .into_iter()
        .filter(|s| s.method == "PATCH")
        .collect();
    assert!(
        seen.is_empty(),
        "the fallback got the head without its body: {:?}",
        seen.iter()
            .map(|s| (&s.headers, &s.body))
            .collect::<Vec<_>>()
    );
    assert_eq!(weir.status().await["upstreams"][0]["fallback_attempts"], 0);
}
