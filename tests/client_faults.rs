//! A client's own broken request is the client's fault, never the upstream's: it must not count
//! against the upstream's circuit breaker (found by `tests/fuzz_http1.rs`: truncated and bad
//! chunked bodies from one client opened the breaker for everyone).

mod common;

use common::{Upstream, Weir};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir::events::BreakerState;

/// Sends a managed POST whose chunked body breaks off (half-close after part of a chunk) and
/// returns what came back (a status line, or nothing if Weir closed).
async fn truncated_post(proxy: std::net::SocketAddr, up: &Upstream) -> String {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let req = format!(
        "POST {}/repos/octo/lab/issues HTTP/1.1\r\nHost: {}\r\nAuthorization: token a\r\n\
         Transfer-Encoding: chunked\r\n\r\n10\r\nonly-part",
        up.origin(),
        up.addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_client_bodies_never_open_the_upstreams_breaker() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let proxy = weir.handle.local_addr();
    // Twice the breaker's minimum number of calls (20), all broken by the client.
    for _ in 0..40 {
        let first = truncated_post(proxy, &up).await;
        assert!(
            first.is_empty() || first.starts_with("HTTP/1.1 4") || first.starts_with("HTTP/1.1 2"),
            "a broken client body is answered as the client's error (or the connection closed): {first}"
        );
    }
    let status = weir.handle.status().await;
    let b = &status.upstreams[0].guard.breaker;
    assert_eq!(
        b.state,
        BreakerState::Closed,
        "breaker: {} ({})",
        b.state,
        b.reason
    );
    let ok = weir
        .client("b")
        .get(format!("{}/agents/sessions", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200, "a healthy upstream still serves everyone");
}
