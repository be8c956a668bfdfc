//! What Weir does not manage passes through untouched: plain HTTP to other hosts, CONNECT
//! tunnels (byte for byte), and managed non-cacheable classes and true streams (streamed, not
//! buffered).

mod common;
use common::{Upstream, Weir};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The unmanaged targets here are loopback servers, which Weir refuses by default
/// (`tests/private_targets.rs`).
const PRIVATE_OK: &str = "allow_private_targets = true\n";

#[tokio::test]
async fn unmanaged_http_is_passed_through_without_cache() {
    let managed = Upstream::start().await;
    let other = Upstream::start().await;
    // The "other" host is on loopback, like every fixture: allowed here on purpose.
    let weir = Weir::start_with_top(PRIVATE_OK, &[&managed.origin()], "").await;
    let c = weir.client("alice");
    for _ in 0..2 {
        let r = c
            .get(format!("{}/agents/sessions", other.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            !r.headers().contains_key("cache-status"),
            "unmanaged hosts get no policy"
        );
    }
    assert_eq!(other.count("/agents/sessions"), 2);
    assert_eq!(managed.total(), 0);
    let seen = other.seen();
    assert_eq!(seen[0].headers["authorization"], "token alice");
    assert!(!seen[0].headers.contains_key("proxy-connection"));
}

#[tokio::test]
async fn hop_by_hop_headers_are_not_forwarded() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let req = format!(
        "POST http://{}/agents/swe/v1/jobs/o/r HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive, x-hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nContent-Length: 2\r\n\r\n{{}}",
        up.addr, up.addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let seen = &up.seen()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(&seen.body[..], b"{}");
    for h in ["x-hop", "keep-alive", "proxy-authorization"] {
        assert!(!seen.headers.contains_key(h), "{h} was forwarded");
    }
}

#[tokio::test]
async fn connect_is_a_blind_byte_tunnel() {
    // A raw TCP echo server standing in for any non-managed TLS host.
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = echo.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).await.unwrap();
        }
    });
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    s.write_all(format!("CONNECT {echo_addr} HTTP/1.1\r\nHost: {echo_addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let payload: Vec<u8> = (0..=255u8).cycle().take(600).collect();
    s.write_all(&payload).await.unwrap();
    let mut got = vec![0; payload.len()];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(got, payload, "bytes come back unchanged");
    assert_eq!(weir.status().await["tunnels"], 1);
}

#[tokio::test]
async fn connect_to_a_dead_port_is_a_502_problem() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    s.write_all(format!("CONNECT {dead} HTTP/1.1\r\nHost: {dead}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert!(
        text.contains("application/problem+json") && text.contains("\"kind\": \"connection\""),
        "{text}"
    );
}

#[tokio::test]
async fn stream_class_is_streamed_not_buffered() {
    // An SSE-like upstream that sends one event, then waits, then sends another.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0; 4096];
        let _ = s.read(&mut buf).await.unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").await.unwrap();
        s.write_all(b"a\r\ndata: one\n\r\n").await.unwrap();
        let _ = release_rx.await;
        s.write_all(b"a\r\ndata: two\n\r\n0\r\n\r\n").await.unwrap();
    });
    let origin = format!("http://{addr}");
    let weir = Weir::start(&[&origin], "").await;
    let mut r = weir
        .client("a")
        .get(format!("{origin}/agents/sessions/s1/logs"))
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("cache-status"));
    // The first chunk arrives while the upstream is still holding the second back.
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"data: one\n");
    release_tx.send(()).unwrap();
    let second = r.chunk().await.unwrap().unwrap();
    assert_eq!(&second[..], b"data: two\n");
}

/// A loopback upstream for a session's logs that answers each request (one per connection) as
/// a whole document (`Content-Length`) or, once `sse` is set, as an event stream (chunked, no
/// length), counting the requests.
struct Logs {
    origin: String,
    sse: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

const EVENTS: &[u8] = b"data: {\"n\":1}\n\ndata: {\"n\":2}\n\n";

impl Logs {
    async fn start() -> Logs {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", l.local_addr().unwrap());
        let (sse, requests) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s2, r2) = (sse.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let (sse, requests) = (s2.clone(), r2.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    requests.fetch_add(1, SeqCst);
                    let answer = if sse.load(SeqCst) {
                        let mut a = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                      transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                            .to_vec();
                        for ev in [&EVENTS[..9], &EVENTS[9..]] {
                            a.extend(format!("{:x}\r\n", ev.len()).as_bytes());
                            a.extend_from_slice(ev);
                            a.extend_from_slice(b"\r\n");
                        }
                        a.extend_from_slice(b"0\r\n\r\n");
                        a
                    } else {
                        let mut a = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n",
                            EVENTS.len()
                        )
                        .into_bytes();
                        a.extend_from_slice(EVENTS);
                        a
                    };
                    let _ = c.write_all(&answer).await;
                    let _ = c.shutdown().await;
                });
            }
        });
        Logs {
            origin,
            sse,
            requests,
        }
    }
}

/// A logs answer that is an event stream (no length) is streamed to each poll, intact and
/// never stored: N polls, N upstream calls.
#[tokio::test]
async fn an_event_stream_of_logs_reaches_every_poll_intact() {
    let logs = Logs::start().await;
    logs.sse.store(true, SeqCst);
    let weir = Weir::start(&[&logs.origin], "").await;
    let c = weir.client("a");
    let url = format!("{}/agents/sessions/s1/logs", logs.origin);
    for n in 1..=3 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(!r.headers().contains_key("cache-status"), "poll {n}");
        assert_eq!(&r.bytes().await.unwrap()[..], EVENTS, "poll {n}");
        assert_eq!(logs.requests.load(SeqCst), n, "one upstream call per poll");
    }
}

/// Logs answered as a document are cached; if the upstream later answers with a stream, the
/// poll still gets the stream (asked again on its own), and every later poll is streamed.
#[tokio::test]
async fn logs_that_turn_into_a_stream_are_streamed_from_then_on() {
    let logs = Logs::start().await;
    // No fresh window: every poll after the first asks the upstream.
    let cfg = "[classes.stream]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n";
    let weir = Weir::start(&[&logs.origin], cfg).await;
    let c = weir.client("a");
    let url = format!("{}/agents/sessions/s1/logs", logs.origin);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    assert_eq!(&r.bytes().await.unwrap()[..], EVENTS);
    assert_eq!(logs.requests.load(SeqCst), 1);
    logs.sse.store(true, SeqCst);
    // The refresh finds a stream, which cannot be shared: dropped, and this poll asks again.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(!r.headers().contains_key("cache-status"));
    assert_eq!(&r.bytes().await.unwrap()[..], EVENTS);
    assert_eq!(logs.requests.load(SeqCst), 3);
    let r = c.get(&url).send().await.unwrap();
    assert!(!r.headers().contains_key("cache-status"));
    assert_eq!(&r.bytes().await.unwrap()[..], EVENTS);
    assert_eq!(logs.requests.load(SeqCst), 4, "known to stream: one call");
    // A document again: cached again.
    logs.sse.store(false, SeqCst);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    assert_eq!(logs.requests.load(SeqCst), 5);
}

#[tokio::test]
async fn a_chunked_body_on_a_managed_route_is_forwarded() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("hello-"), Ok("body")];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let r = weir
        .client("a")
        .put(format!("{}/agents/sessions/s1/notes", up.origin()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = up.seen();
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(&seen[0].body[..], b"hello-body");
}
