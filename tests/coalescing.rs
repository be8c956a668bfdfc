//! N identical in-flight requests become one upstream request, per identity.

mod common;
use common::{eventually_status, Upstream, Weir};
use std::time::Duration;

const LIST: &str = "/agents/sessions?page_size=20&page_number=1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_identical_lists_make_one_upstream_request() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_secs(1));
    let weir = Weir::start(&[&up.origin()], "").await;
    let client = weir.client("alice");
    let url = format!("{}{LIST}", up.origin());
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (c, u) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let r = c.get(u).send().await.unwrap();
                let cs = r
                    .headers()
                    .get("cache-status")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                (r.status().as_u16(), cs, r.bytes().await.unwrap())
            })
        })
        .collect();
    let mut bodies = Vec::new();
    let mut collapsed = 0;
    for t in tasks {
        let (status, cs, body) = t.await.unwrap();
        assert_eq!(status, 200);
        collapsed += usize::from(cs.contains("collapsed"));
        bodies.push(body);
    }
    assert_eq!(
        up.count(LIST),
        1,
        "one upstream request for 200 identical ones"
    );
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "every waiter got the same body"
    );
    let v: serde_json::Value = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(v["n"], 1);
    // Everyone but the leader joined the flight (or, if late, hit the fresh cache).
    let s = weir.status().await;
    let list = &s["upstreams"][0]["classes"]["list"];
    assert_eq!(list["client_requests"], 200);
    assert_eq!(list["upstream_requests"], 1);
    assert_eq!(
        list["coalesced"].as_u64().unwrap() + list["cache_hits_fresh"].as_u64().unwrap(),
        199
    );
    assert_eq!(collapsed as u64, list["coalesced"].as_u64().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_identities_are_never_shared() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(500));
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}{LIST}", up.origin());
    let mut tasks = Vec::new();
    for who in ["alice", "bob"] {
        for _ in 0..50 {
            let (c, u) = (weir.client(who), url.clone());
            tasks.push(tokio::spawn(async move {
                let body: serde_json::Value = c.get(u).send().await.unwrap().json().await.unwrap();
                (who, body)
            }));
        }
    }
    for t in tasks {
        let (who, body) = t.await.unwrap();
        assert_eq!(
            body["auth"],
            format!("token {who}"),
            "{who} got another identity's answer"
        );
    }
    assert_eq!(up.count(LIST), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_does_not_cancel_or_restart_the_fetch() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(800));
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}{LIST}", up.origin());
    // A buggy client: 50 ms timeout, reissues at once, five times.
    let impatient = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(weir.proxy_url()).unwrap())
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    for _ in 0..5 {
        assert!(impatient
            .get(&url)
            .header("authorization", "token carol")
            .send()
            .await
            .is_err());
    }
    // The one fetch completes and is cached: a patient client gets it without a second request.
    assert!(
        eventually_status(&weir.handle, 200, |s| s.cache.entries == 1).await,
        "the detached fetch finished and was stored"
    );
    let r = weir.client("carol").get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    assert_eq!(up.count(LIST), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_waiters_conditional_request_is_not_shared() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(300));
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}{LIST}", up.origin());
    let (c1, c2, u1, u2) = (weir.client("a"), weir.client("a"), url.clone(), url.clone());
    let conditional = tokio::spawn(async move {
        c1.get(u1)
            .header("if-none-match", "\"v1\"")
            .send()
            .await
            .unwrap()
            .status()
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let plain = tokio::spawn(async move { c2.get(u2).send().await.unwrap().status() });
    assert_eq!(plain.await.unwrap(), 200);
    assert_eq!(conditional.await.unwrap(), 200);
    assert!(up
        .seen()
        .iter()
        .all(|s| !s.headers.contains_key("if-none-match")));
}
