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

/// Callers that take turns on one kept-alive connection (Weir remembers the connection's last
/// credential to skip hashing it again, `identity::per_connection`) each get their own
/// answer: the first ask of each reaches the upstream, each later one is its own hit, and
/// no answer is another's — credentials that differ in one byte or only by a cookie, and no
/// credential at all, included.
#[tokio::test]
async fn callers_taking_turns_on_one_connection_get_their_own_answers() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}{VIEW}", up.origin());
    let stream = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    // (Authorization, Cookie): the upstream echoes the Authorization it got.
    let callers = [
        (Some("token alice"), None),
        (Some("token bob"), None),
        (Some("token alicE"), None),
        (Some("token alice"), Some("s=1")),
        (None, None),
    ];
    // Each caller's own answer: the upstream numbers its fetches of a path (`n`).
    let mut own = Vec::new();
    for round in 0..3 {
        for (i, (auth, cookie)) in callers.into_iter().enumerate() {
            let mut req = http::Request::builder()
                .uri(&url)
                .header("host", url.split('/').nth(2).unwrap());
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            let req = req
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            let resp = tx.send_request(req).await.unwrap();
            let status = resp.headers()["cache-status"].to_str().unwrap().to_string();
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let who = format!("{auth:?} {cookie:?}, round {round}");
            assert_eq!(body["auth"], auth.unwrap_or(""), "{who}: {body}");
            assert_eq!(status == "weir; hit", round > 0, "{who}: {status}");
            if round == 0 {
                assert_eq!(body["n"], i + 1, "{who}: {body}");
                own.push(body);
            } else {
                assert_eq!(body, own[i], "{who}: another caller's answer");
            }
        }
    }
    assert_eq!(up.count(VIEW), callers.len(), "one fetch per caller");
}
