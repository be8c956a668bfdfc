//! What the cache may keep when callers share an identity: anonymous callers (no credential)
//! all share one, so an answer marked `Cache-Control: private` or `no-store` is not stored for
//! them; and no stored answer keeps `Set-Cookie` (one caller's session is never handed on).

mod common;
use common::{Upstream, Weir};

const VIEW: &str = "/agents/sessions/abc123";

fn anonymous(weir: &Weir) -> reqwest::Client {
    let proxy = reqwest::Proxy::all(weir.proxy_url()).unwrap();
    reqwest::Client::builder().proxy(proxy).build().unwrap()
}

#[tokio::test]
async fn anonymous_private_and_no_store_answers_are_not_stored() {
    for cc in ["private, max-age=60", "no-store"] {
        let up = Upstream::start().await;
        up.set(|b| b.extra_headers = vec![("cache-control".into(), cc.into())]);
        let weir = Weir::start(&[&up.origin()], "").await;
        let c = anonymous(&weir);
        let url = format!("{}{VIEW}", up.origin());
        for _ in 0..2 {
            let r = c.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert!(
                !r.headers()["cache-status"]
                    .to_str()
                    .unwrap()
                    .contains("stored"),
                "{cc}"
            );
        }
        assert_eq!(up.count(VIEW), 2, "{cc}: both reached the upstream");
    }
}

#[tokio::test]
async fn a_private_answer_is_still_cached_per_identity() {
    let up = Upstream::start().await;
    up.set(|b| b.extra_headers = vec![("cache-control".into(), "private".into())]);
    let weir = Weir::start(&[&up.origin()], "").await;
    let c = weir.client("alice");
    let url = format!("{}{VIEW}", up.origin());
    c.get(&url).send().await.unwrap();
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    assert_eq!(up.count(VIEW), 1);
}

#[tokio::test]
async fn set_cookie_is_never_stored() {
    let up = Upstream::start().await;
    up.set(|b| b.extra_headers = vec![("set-cookie".into(), "session=s3cret; HttpOnly".into())]);
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}{VIEW}", up.origin());
    for c in [anonymous(&weir), weir.client("alice")] {
        c.get(&url).send().await.unwrap();
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.headers()["cache-status"], "weir; hit");
        assert!(
            !r.headers().contains_key("set-cookie"),
            "a cached answer carries no Set-Cookie"
        );
    }
    assert_eq!(up.count(VIEW), 2, "one fetch per identity");
}
