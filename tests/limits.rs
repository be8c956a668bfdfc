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

/// A client that connects and sends nothing, or stops inside the HTTP/2 preface (`P`), is cut
/// off after header_read_timeout too, and its slot comes back: before, hyper-util's wait for
/// the first bytes had no limit, so `max_connections` silent sockets shut Weir out for good.
#[tokio::test]
async fn a_client_that_sends_nothing_is_cut_off_and_its_slot_freed() {
    let weir = Weir::start(
        &[],
        "[limits]\nheader_read_timeout = \"300ms\"\nmax_connections = 2\n",
    )
    .await;
    let mut silent = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let mut preface = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    preface.write_all(b"P").await.unwrap();
    for s in [&mut silent, &mut preface] {
        let mut buf = vec![0; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(20), s.read(&mut buf))
            .await
            .expect("closed by Weir, not by the test's bound")
            .unwrap_or(0);
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(&buf[..n]));
    }
    // Both slots are free again: a real request is answered, not refused with a 503.
    let mut c = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let addr = weir.handle.local_addr();
    c.write_all(
        format!("GET /_weir/api/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
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

/// One value of a `/metrics` series without labels.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// Buffered request bodies have one bound across every connection (8 ×
/// `limits.max_body_bytes`, here 512 KiB). 40 completion requests of 60 KiB each (2.4 MB) at
/// once, to an upstream that holds every answer for 500 ms so the bodies are buffered together:
/// every request gets an answer (the upstream's, or a 503 `overloaded` problem with
/// `Retry-After`), the engine's own count of bytes held never passed the bound, what it
/// refused is what the clients were told, and nothing is held afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_posts_stay_within_the_buffered_bytes_bound() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = std::time::Duration::from_millis(500));
    let weir = Weir::start(&[&up.origin()], "[limits]\nmax_body_bytes = 65536\n").await;
    let url = format!("{}/chat/completions", up.origin());
    let body = format!(r#"{{"model":"gpt-test","pad":"{}"}}"#, "x".repeat(60_000));
    let c = weir.client("a");
    let answers = futures::future::join_all((0..40).map(|_| {
        let (c, url, body) = (c.clone(), url.clone(), body.clone());
        async move {
            let r = c.post(&url).body(body).send().await.expect("an answer");
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").is_some();
            let text = r.text().await.unwrap();
            (status, retry, text)
        }
    }))
    .await;
    let mut ok = 0;
    let mut shed = 0;
    for (status, retry, text) in &answers {
        match status {
            200 => ok += 1,
            503 => {
                assert!(*retry, "Retry-After on the 503: {text}");
                assert!(text.contains("\"overloaded\""), "{text}");
                shed += 1;
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!(ok + shed, 40, "every request got an answer");
    let m = reqwest::get(format!("{}/metrics", weir.handle.base_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let limit = metric(&m, "weir_buffered_request_bytes_limit");
    assert_eq!(limit, 8 * 65536);
    let peak = metric(&m, "weir_buffered_request_bytes_peak");
    assert!(peak <= limit, "peak {peak} over the bound {limit}");
    assert!(peak >= 60_000, "bodies were held: {peak}");
    assert_eq!(metric(&m, "weir_buffered_request_refused_total"), shed);
    assert!(shed > 0, "40 × 60 KiB do not fit in 512 KiB at once");
    assert_eq!(
        metric(&m, "weir_buffered_request_bytes"),
        0,
        "all given back"
    );
    assert_eq!(
        up.total(),
        ok as usize,
        "refused requests never reached the upstream"
    );
    eprintln!("buffered-body bound: {ok} answered by the upstream, {shed} shed, peak {peak} of {limit} bytes");
}

/// HTTP/2 clients may open at most 32 streams at once on one connection (hyper's default is
/// 200, each of which could buffer a body): the SETTINGS Weir's listener sends say so.
#[tokio::test]
async fn http2_connections_get_a_small_stream_limit() {
    let weir = Weir::start(&[], "").await;
    let addr = weir.handle.local_addr();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, mut conn) = h2::client::handshake(tcp).await.unwrap();
    let req = http::Request::get(format!("http://{addr}/_weir/api/health"))
        .body(())
        .unwrap();
    let (answer, _) = client.send_request(req, true).unwrap();
    // The server's SETTINGS come before any answer: once answered, they are in force.
    let answer = tokio::select! {
        a = answer => a.unwrap(),
        c = &mut conn => panic!("connection ended first: {c:?}"),
    };
    assert_eq!(answer.status(), 200);
    assert_eq!(conn.max_concurrent_send_streams(), 32);
}
