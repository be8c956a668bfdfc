//! The recording phase (`pipeline::record`) is run once per request, whatever path it took:
//! counted here over a mixed run through a real engine (it needs the engine, which the pipeline
//! may not import).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A loopback upstream answering `{}` to everything, after a second for `/slow`.
async fn upstream() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    if req.uri().path() == "/slow" {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    let mut resp = Response::new(Full::new(Bytes::from_static(b"{}")));
                    resp.headers_mut()
                        .insert("content-type", "application/json".parse().unwrap());
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let io = hyper_util::rt::TokioIo::new(s);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    addr
}

/// An engine on `toml` (its data dir kept with it), and its proxy URL.
async fn engine(toml: &str) -> (super::EngineHandle, tempfile::TempDir, String) {
    let settings = crate::config::parse_str(toml, "test.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let h = super::start(crate::EngineOptions::new(
        settings,
        dir.path().to_path_buf(),
    ))
    .await
    .unwrap();
    let weir = format!("http://{}", h.local_addr());
    (h, dir, weir)
}

/// A mixed run — cache miss and hits, managed and unmanaged pass-through, a refusal at the
/// front door, the control API, a CONNECT, and a request whose client left before its
/// answer — is recorded once per request, no more, no less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_recorded_exactly_once() {
    let (up, other) = (upstream().await, upstream().await);
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         allow_private_targets = true\n\
         [[upstream]]\nname = \"up0\"\norigin = \"http://{up}\"\n\
         [limits]\nmax_header_bytes = 1024\n[network]\ndetect_os = false\n"
    );
    let (h, _dir, weir) = engine(&toml).await;
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&weir).unwrap())
        .build()
        .unwrap();
    let recorded = || h.proxy().global.recorded.load(Relaxed);
    assert_eq!(recorded(), 0);
    let mut sent = 0;
    for (i, path) in [
        "/agents/sessions",
        "/agents/sessions",
        "/agents/sessions",
        "/repos/o/r",
    ]
    .into_iter()
    .enumerate()
    {
        let r = c.get(format!("http://{up}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        // The fresh hits (answered before any future is made, `pipeline::handle`) carry the
        // same head as every cached answer.
        if i == 1 || i == 2 {
            let h = r.headers();
            assert_eq!(h["cache-status"], "weir; hit", "{path}");
            assert!(h.contains_key("age") && h.contains_key("weir-policy"));
            assert_eq!(h["x-request-id"].len(), 32);
        }
        sent += 1;
    }
    // Each fresh hit counted once, as a fresh hit of its class.
    let list = h
        .proxy()
        .upstreams
        .get(crate::config::UpstreamIndex::at(0))
        .counters
        .class(crate::config::RouteClass::List);
    assert_eq!(list.cache_hits_fresh.load(Relaxed), 2);
    assert_eq!(list.client_requests.load(Relaxed), 3);
    let r = c.get(format!("http://{other}/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    sent += 1;
    let big = "x".repeat(2000);
    let r = c.get(format!("http://{up}/agents/sessions"));
    assert_eq!(r.header("x-big", big).send().await.unwrap().status(), 431);
    sent += 1;
    let r = reqwest::get(format!("{weir}/_weir/api/health"))
        .await
        .unwrap();
    assert!(r.status().is_success());
    sent += 1;
    let mut s = tokio::net::TcpStream::connect(h.local_addr())
        .await
        .unwrap();
    s.write_all(format!("CONNECT {other} HTTP/1.1\r\nhost: {other}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let n = s.read(&mut [0u8; 64]).await.unwrap();
    assert!(n > 0);
    drop(s);
    sent += 1;
    // The client gives up before the upstream answers: recorded when Weir lets go of it.
    let gone = c
        .get(format!("http://{up}/slow"))
        .timeout(Duration::from_millis(200));
    assert!(gone.send().await.is_err());
    sent += 1;
    for _ in 0..250 {
        if recorded() >= sent {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing recorded twice, late (after the upstream's answer to the one that left).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(recorded(), sent);
    h.shutdown().await;
}

/// A panic in a request's synchronous phases (run in hyper's call of the service since fresh
/// hits make no future) is answered `500`, recorded once, and the connection serves its next
/// request: over HTTP/2 the same call is made in the connection's own poll, where a panic
/// ended every stream. (Before the catch, the client saw its connection closed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_phases_is_answered_and_the_connection_lives() {
    let up = upstream().await;
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         [[upstream]]\nname = \"up0\"\norigin = \"http://{up}\"\n[network]\ndetect_os = false\n"
    );
    let (h, _dir, weir) = engine(&toml).await;
    // One connection for both requests.
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&weir).unwrap())
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let url = format!("http://{up}/agents/sessions");
    let r = c
        .get(&url)
        .header(crate::pipeline::TEST_PANIC, "1")
        .send()
        .await;
    let r = r.expect("an answer, not a closed connection");
    assert_eq!(r.status(), 500);
    let body = r.text().await.unwrap();
    assert!(body.contains("a bug"), "{body}");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(h.proxy().global.recorded.load(Relaxed), 2);
    h.shutdown().await;
}
