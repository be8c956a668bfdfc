//! The pool against real loopback upstreams (hyper's server, or raw TCP where the test needs a
//! close the server does not announce), counting the connections each upstream accepted.

use super::{ConnPool, Limits};
use crate::body::{empty, Body};
use crate::upstream::{Timeouts, UpstreamClient};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

type Chunks = mpsc::Receiver<Bytes>;
/// Where a streaming answer tells the test how to feed its body.
type Feeds = mpsc::Sender<mpsc::Sender<Bytes>>;

/// What the test upstream answers.
#[derive(Clone)]
enum Answer {
    /// 200, `hello`, keep-alive.
    Hello,
    /// 200 `bye` with `Connection: close`.
    Close,
    /// 204, no body.
    NoContent,
    /// A chunked body of whatever the test sends on the channel handed out per request.
    Stream(Feeds),
}

struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

async fn upstream(answer: Answer) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move { Ok::<_, Infallible>(respond(answer).await) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Upstream { addr, accepted }
}

async fn respond(answer: Answer) -> Response<Body> {
    match answer {
        Answer::Hello => Response::new(crate::body::full("hello")),
        Answer::Close => Response::builder()
            .header("connection", "close")
            .body(crate::body::full("bye"))
            .unwrap(),
        Answer::NoContent => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(empty())
            .unwrap(),
        Answer::Stream(next) => {
            let (tx, rx) = mpsc::channel(4);
            next.send(tx).await.unwrap();
            let frames = futures_util::stream::unfold(rx, |mut rx: Chunks| async move {
                let chunk = rx.recv().await?;
                Some((Ok::<_, crate::body::BoxError>(Frame::data(chunk)), rx))
            });
            Response::new(StreamBody::new(frames).boxed())
        }
    }
}

fn client(limits: Limits) -> UpstreamClient {
    UpstreamClient {
        pool: ConnPool::new(limits),
        connector: UpstreamClient::new().connector,
    }
}

fn get(addr: SocketAddr, path: &str) -> Request<Body> {
    Request::get(format!("http://{addr}{path}"))
        .body(empty())
        .unwrap()
}

const T: Timeouts = Timeouts {
    headers: Duration::from_secs(10),
    body: Duration::from_secs(10),
};

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let up = upstream(Answer::Hello).await;
    let c = client(Limits::default());
    for _ in 0..5 {
        let r = c.fetch(get(up.addr, "/a?b=c"), T, 1024).await.unwrap();
        assert_eq!(r.body().as_ref(), b"hello");
    }
    assert_eq!(up.accepted.load(SeqCst), 1);
    assert_eq!(c.pool.opened(), 1);
    assert_eq!(c.pool.idle_count(), 1);
}

#[tokio::test]
async fn a_connection_the_upstream_closes_is_not_reused() {
    let up = upstream(Answer::Close).await;
    let c = client(Limits::default());
    for _ in 0..3 {
        let r = c.fetch(get(up.addr, "/"), T, 1024).await.unwrap();
        assert_eq!(r.body().as_ref(), b"bye");
    }
    assert_eq!(up.accepted.load(SeqCst), 3);
    assert_eq!(c.pool.idle_count(), 0);
}

/// The upstream answers keep-alive, then closes the idle connection without a word (as an
/// upstream's idle timeout does): the next request goes on a new connection, and succeeds.
#[tokio::test]
async fn a_silently_closed_idle_connection_is_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed_tx, mut closed) = mpsc::channel::<()>(4);
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, SeqCst);
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = tcp.read(&mut buf).await.unwrap();
                    assert!(n > 0, "request ended early");
                    got.extend_from_slice(&buf[..n]);
                }
                tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                drop(tcp);
                let _ = closed_tx.send(()).await;
            });
        }
    });
    let c = client(Limits::default());
    for _ in 0..3 {
        let r = c.fetch(get(addr, "/"), T, 1024).await.unwrap();
        assert_eq!(r.body().as_ref(), b"ok");
        closed.recv().await.unwrap();
        // Let the reactor see the FIN, as it would long before an idle connection's reuse.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(SeqCst), 3);
    assert_eq!(c.pool.opened(), 3);
}

/// The body is read in another task after `send` returned, as hyper's server reads the body a
/// handler returned: it keeps flowing chunk by chunk, and at its end the connection is pooled.
#[tokio::test]
async fn a_streamed_body_keeps_flowing_after_send_returns() {
    let (next_tx, mut next_rx) = mpsc::channel(4);
    let up = upstream(Answer::Stream(next_tx)).await;
    let c = client(Limits::default());
    let resp = c.send(get(up.addr, "/stream"), T).await.unwrap();
    let feed = next_rx.recv().await.unwrap();
    let (got_tx, mut got) = mpsc::channel::<Bytes>(8);
    let reader = tokio::spawn(async move {
        let mut body = resp.into_body();
        while let Some(f) = body.frame().await {
            if let Ok(d) = f.unwrap().into_data() {
                got_tx.send(d).await.unwrap();
            }
        }
    });
    for i in 0..5 {
        let chunk = Bytes::from(format!("chunk {i};"));
        feed.send(chunk.clone()).await.unwrap();
        assert_eq!(got.recv().await.unwrap(), chunk);
    }
    drop(feed);
    reader.await.unwrap();
    assert_eq!(c.pool.idle_count(), 1);
    // And it is reused.
    let resp = c.send(get(up.addr, "/stream"), T).await.unwrap();
    drop(next_rx.recv().await.unwrap());
    assert!(resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());
    assert_eq!(up.accepted.load(SeqCst), 1);
}

/// A body dropped before its end takes its connection with it: the next request opens one.
#[tokio::test]
async fn an_unfinished_body_closes_its_connection() {
    let (next_tx, mut next_rx) = mpsc::channel(4);
    let up = upstream(Answer::Stream(next_tx)).await;
    let c = client(Limits::default());
    let resp = c.send(get(up.addr, "/"), T).await.unwrap();
    let feed = next_rx.recv().await.unwrap();
    feed.send(Bytes::from_static(b"part")).await.unwrap();
    drop(resp);
    assert_eq!(c.pool.idle_count(), 0);
    let resp = c.send(get(up.addr, "/"), T).await.unwrap();
    drop(next_rx.recv().await.unwrap());
    resp.into_body().collect().await.unwrap();
    assert_eq!(up.accepted.load(SeqCst), 2);
}

/// A body that is over with its head (204) hands the connection back at once, even when the
/// response is dropped unread.
#[tokio::test]
async fn a_bodiless_answer_pools_its_connection_at_once() {
    let up = upstream(Answer::NoContent).await;
    let c = client(Limits::default());
    for _ in 0..3 {
        let r = c.send(get(up.addr, "/"), T).await.unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        drop(r);
        assert_eq!(c.pool.idle_count(), 1);
    }
    assert_eq!(up.accepted.load(SeqCst), 1);
}

/// Four exchanges at once need four connections; only `max_idle` (2) stay afterwards.
#[tokio::test]
async fn idle_connections_are_capped_per_origin() {
    let (next_tx, mut next_rx) = mpsc::channel(8);
    let up = upstream(Answer::Stream(next_tx)).await;
    let c = client(Limits {
        max_idle: 2,
        idle_timeout: Duration::from_secs(60),
    });
    let mut open = Vec::new();
    for _ in 0..4 {
        let resp = c.send(get(up.addr, "/"), T).await.unwrap();
        open.push((resp, next_rx.recv().await.unwrap()));
    }
    assert_eq!(up.accepted.load(SeqCst), 4);
    for (resp, feed) in open {
        drop(feed);
        resp.into_body().collect().await.unwrap();
    }
    assert_eq!(c.pool.idle_count(), 2);
    // Two at once now reuse those two; a third opens a fifth connection.
    let mut open = Vec::new();
    for _ in 0..3 {
        let resp = c.send(get(up.addr, "/"), T).await.unwrap();
        open.push((resp, next_rx.recv().await.unwrap()));
    }
    assert_eq!(up.accepted.load(SeqCst), 5);
    drop(open);
}

#[tokio::test]
async fn an_expired_idle_connection_is_not_reused() {
    let up = upstream(Answer::Hello).await;
    let c = client(Limits {
        max_idle: 4,
        idle_timeout: Duration::from_millis(5),
    });
    c.fetch(get(up.addr, "/"), T, 1024).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    c.fetch(get(up.addr, "/"), T, 1024).await.unwrap();
    assert_eq!(up.accepted.load(SeqCst), 2);
}

/// A request without `Host` gets one from its URI (the default port left out), and the
/// target goes out in origin form, as hyper-util's client sent it.
#[tokio::test]
async fn requests_go_out_in_origin_form_with_a_host() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, mut seen) = mpsc::channel::<String>(1);
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        seen_tx
            .send(String::from_utf8_lossy(&got).into_owned())
            .await
            .unwrap();
    });
    let c = client(Limits::default());
    c.fetch(get(addr, "/x/y?z=1"), T, 1024).await.unwrap();
    let head = seen.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /x/y?z=1 http/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
}
