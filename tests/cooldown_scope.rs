//! Cooldowns are scoped to whoever earned them: GitHub's rate limits are per user, so one
//! identity's 429 holds back that identity only; upstream-wide signals (503/529, or a 429 to a
//! request without a credential) hold back everyone. Counted at a real loopback upstream.

mod common;
use common::{Upstream, Weir};

/// Retries out of the way (the 30 s wait never fits a 500 ms deadline), breaker quiet.
const QUIET: &str = "[retry]\nbase = \"1ms\"\ncap = \"5ms\"\njitter = false\n[breaker]\njitter = false\nminimum_calls = 1000\nconsecutive_failures = 0\n[classes.list]\ndeadline = \"500ms\"\n";

fn list(up: &Upstream, i: usize) -> String {
    format!("{}/agents/sessions?page={i}", up.origin())
}

fn throttle(up: &Upstream, status: u16) {
    up.set(|b| {
        b.status = status;
        b.extra_headers = vec![("retry-after".into(), "30".into())];
    });
}

fn heal(up: &Upstream) {
    up.set(|b| {
        b.status = 200;
        b.extra_headers.clear();
    });
}

#[tokio::test]
async fn one_identitys_429_does_not_hold_back_another_identity() {
    let up = Upstream::start().await;
    throttle(&up, 429);
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let r = weir.client("alice").get(list(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(up.total(), 1);
    heal(&up);

    // Alice is held back: her next list never reaches the upstream.
    let r = weir.client("alice").get(list(&up, 2)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "rate_limited");
    assert_eq!(up.count("/agents/sessions?page=2"), 0);

    // Bob's quota is his own: his request reaches the upstream.
    let r = weir.client("bob").get(list(&up, 3)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.count("/agents/sessions?page=3"), 1);
}

#[tokio::test]
async fn a_403_rate_limit_is_scoped_to_its_identity_too() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 403;
        b.extra_headers = vec![
            ("x-ratelimit-remaining".into(), "0".into()),
            ("retry-after".into(), "30".into()),
        ];
    });
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let r = weir.client("alice").get(list(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 403);
    heal(&up);
    let r = weir.client("alice").get(list(&up, 2)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(up.count("/agents/sessions?page=2"), 0);
    let r = weir.client("bob").get(list(&up, 3)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.count("/agents/sessions?page=3"), 1);
}

#[tokio::test]
async fn an_overloaded_upstream_holds_back_everyone() {
    let up = Upstream::start().await;
    throttle(&up, 503);
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let r = weir.client("alice").get(list(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let before = up.total();
    heal(&up);
    let r = weir.client("bob").get(list(&up, 2)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "overloaded");
    assert_eq!(up.total(), before, "nothing reached the upstream");
}

#[tokio::test]
async fn an_anonymous_429_holds_back_everyone() {
    let up = Upstream::start().await;
    throttle(&up, 429);
    let weir = Weir::start(&[&up.origin()], QUIET).await;
    let proxy = reqwest::Proxy::all(weir.proxy_url()).unwrap();
    let anon = reqwest::Client::builder().proxy(proxy).build().unwrap();
    let r = anon.get(list(&up, 1)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    heal(&up);
    let r = weir.client("bob").get(list(&up, 2)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        up.total(),
        1,
        "nothing reached the upstream during the cooldown"
    );
}
