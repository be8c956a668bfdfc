//! The lab's own parts against real sockets: absolute-form requests through a proxy, the
//! upstream's counters and failover, and creates counted per intent.

use bytes::Bytes;
use http::Method;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_lab::client::{request, Credential, LabClient};
use weir_lab::scenarios::surfaces::{CreateLoop, CreateTally};
use weir_lab::upstream::{Upstream, UpstreamSpec};

#[tokio::test]
async fn via_proxy_sends_absolute_form_to_the_proxy() {
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = proxy.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = proxy.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    let a = LabClient::via_proxy(addr)
        .get("http://127.0.0.1:1/agents/sessions", "t1")
        .await
        .unwrap();
    assert_eq!(a.body, Bytes::from_static(b"ok"));
    let head = server.await.unwrap();
    assert!(
        head.starts_with("GET http://127.0.0.1:1/agents/sessions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: token t1"),
        "{head}"
    );
}

#[tokio::test]
async fn direct_refuses_anything_but_loopback() {
    let err = LabClient::direct().get("http://192.0.2.1/x", "").await;
    assert!(err.is_err());
}

#[tokio::test]
async fn failover_drops_open_requests_and_keeps_serving() {
    let up = Arc::new(
        Upstream::start(UpstreamSpec::with_latency(2000))
            .await
            .unwrap(),
    );
    let client = LabClient::direct();
    let url = format!("{}/agents/sessions", up.origin());
    let pending = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(&url, "a").await }
    });
    while up.counters().requests.total() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    up.fail_over();
    assert!(
        pending.await.unwrap().is_err(),
        "the open request was dropped"
    );
    let fast = Upstream::start(UpstreamSpec::with_latency(0))
        .await
        .unwrap();
    assert!(client
        .get(&format!("{}/x", fast.origin()), "a")
        .await
        .unwrap()
        .status
        .is_success());
    assert_eq!(up.counters().requests.total(), 1);
}

#[tokio::test]
async fn creates_are_counted_per_intent_and_listed_by_repo() {
    let up = Upstream::start(UpstreamSpec::with_latency(0))
        .await
        .unwrap();
    let client = LabClient::direct();
    let url = format!("{}/agents/swe/v1/jobs/octo/lab", up.origin());
    let body = || Bytes::from(r#"{"problem_statement":"p1","intent":"i1"}"#);
    for _ in 0..2 {
        let a = client
            .send(request(Method::POST, &url, Credential::Token("t"), body()).unwrap())
            .await
            .unwrap();
        assert_eq!(a.status, http::StatusCode::CREATED);
    }
    assert_eq!(up.counters().creates().get("i1"), Some(&2));
    let list = client
        .get(
            &format!("{}/agents/sessions?repo_nwo=octo/lab", up.origin()),
            "t",
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    // The real session object has no problem statement: the lab names the session after it.
    assert_eq!(v["sessions"][0]["name"], "p1");
    assert!(v["sessions"][0].get("problem_statement").is_none());

    // The create loop records its intents and gets each created once when nothing fails.
    let tally = Arc::new(CreateTally::default());
    let start = tokio::time::Instant::now();
    let period = std::time::Duration::from_millis(20);
    let creator = CreateLoop {
        client,
        url,
        dev: 7,
        period,
        tally: tally.clone(),
        seed: 0,
    };
    creator.run(start, start + period * 3).await;
    let snap = tally.snapshot();
    let intended = tally.intended();
    assert_eq!(intended.len(), 3);
    assert_eq!(
        (snap.intended, snap.created, snap.presses, snap.gave_up),
        (3, 3, 3, 0)
    );
    for i in intended {
        assert_eq!(up.counters().creates().get(&i), Some(&1));
    }
}

/// The benchmark's bare hyper proxy passes a request on and its answer back byte for byte
/// (the upstream counts it), and refuses a target that is not loopback.
#[tokio::test]
async fn the_bare_proxy_passes_requests_through_unchanged() {
    let up = Upstream::start(UpstreamSpec::with_latency(0))
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(weir_lab::bare_proxy::run(listener));
    let url = format!("{}/agents/sessions", up.origin());
    let direct = LabClient::direct().get(&url, "t1").await.unwrap();
    let before = up.counters().requests.total();
    let via = LabClient::via_proxy(addr).get(&url, "t1").await.unwrap();
    assert_eq!((via.status, &via.body), (direct.status, &direct.body));
    assert_eq!(up.counters().requests.total(), before + 1);
    let refused = LabClient::via_proxy(addr)
        .get("http://192.0.2.1/agents/sessions", "t1")
        .await
        .unwrap();
    assert_eq!(refused.status, 403);
    assert_eq!(up.counters().requests.total(), before + 1);
}
