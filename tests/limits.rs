//! Protection from bad or hostile clients: slow headers, too many connections, big bodies.

mod common;
use common::{Upstream, Weir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn a_slow_header_sender_is_cut_off() {
    let weir = Weir::start(&[], "[limits]\nheader_read_timeout = \"300ms\"\n").await;
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    s.write_all(b"GET /_weir/api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    // Never finish the headers: Weir must close the connection (read returns, 0 or a 408).
    let mut buf = vec![0; 1024];
    let n = tokio::time::timeout(std::time::Duration::from_secs(20), s.read(&mut buf))
        .await
        .expect("closed by Weir, not by the test's bound")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
}

#[tokio::test]
async fn connections_beyond_the_limit_get_a_503_problem() {
    let weir = Weir::start(&[], "[limits]\nmax_connections = 2\n").await;
    let a = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let b = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    // Make sure both are accepted (held) before the third arrives.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut c = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.contains("application/problem+json") && text.contains("too_many_connections"),
        "{text}"
    );
    drop((a, b));
}

#[tokio::test]
async fn an_oversized_create_body_gets_413_and_is_not_sent() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        "[limits]\nmax_body_bytes = 1024\n[queue]\ncredentials = \"memory\"\n",
    )
    .await;
    let r = weir
        .client("a")
        .post(format!("{}/agents/swe/v1/jobs/o/r", up.origin()))
        .body("x".repeat(4096))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "body_too_large");
    assert_eq!(up.total(), 0);
}

#[tokio::test]
async fn tunnels_count_against_the_connection_limit() {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = echo.accept().await {
            held.push(s);
        }
    });
    // The target is a loopback fixture, which Weir refuses unless allowed.
    let weir = Weir::start_with_top(
        "allow_private_targets = true\n",
        &[],
        "[limits]\nmax_connections = 2\n",
    )
    .await;
    let mut open = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0; 2048];
        let n = s.read(&mut buf).await.unwrap();
        statuses.push(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        );
        open.push(s);
    }
    assert!(
        statuses[0].starts_with("HTTP/1.1 200") && statuses[1].starts_with("HTTP/1.1 200"),
        "{statuses:?}"
    );
    assert!(statuses[2].starts_with("HTTP/1.1 503"), "{statuses:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_told_when_weir_will_close_it_and_then_closed() {
    let weir = Weir::start(&[], "[limits]\nheader_read_timeout = \"3s\"\n").await;
    let addr = weir.handle.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /_weir/api/health HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before answering");
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    // A second under header_read_timeout: a pool that honours it never reuses a closing socket.
    assert!(text.contains("\r\nkeep-alive: timeout=2\r\n"), "{text}");
    // The connection stays usable, then Weir closes it once it has been idle that long.
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue, // the rest of the first body
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "Weir kept an idle connection open past its hint"
    );
}
