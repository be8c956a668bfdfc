//! Blind CONNECT tunnels over real loopback sockets (spliced on Linux): every byte arrives,
//! both ways, in order; one side's EOF is passed on as a half-close while the other direction
//! keeps flowing; bytes the client sent right behind its CONNECT are not lost; an idle tunnel
//! is closed after `limits.tunnel_idle_timeout` and an active one is not; the status counts
//! the bytes each way.

mod common;
use common::Weir;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The targets are loopback servers, which Weir refuses by default.
const PRIVATE_OK: &str = "allow_private_targets = true\n";

/// `len` bytes no two runs of which repeat at a short period (xorshift), so a lost, doubled
/// or reordered chunk changes the hash.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn hash(b: &[u8]) -> String {
    blake3::hash(b).to_hex().to_string()
}

/// A tunnel through `weir` to `target`, the `200` read.
async fn open(weir: &Weir, target: SocketAddr, after: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    req.extend_from_slice(after);
    s.write_all(&req).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed during CONNECT");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// Reads to EOF (at most 30 s: a tunnel that never passes the EOF on fails the test).
async fn read_to_end(s: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .expect("EOF was passed on")
        .unwrap();
    got
}

/// The status's `tunnel_bytes` once they reach `up`/`down` (the last chunk is counted just
/// after it is written, so a client may see it a moment before the status does).
async fn bytes_reach(weir: &Weir, up: u64, down: u64) -> (u64, u64) {
    let mut last = (0, 0);
    for _ in 0..250 {
        let s = weir.status().await;
        last = (
            s["tunnel_bytes"]["up"].as_u64().unwrap(),
            s["tunnel_bytes"]["down"].as_u64().unwrap(),
        );
        if last == (up, down) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

/// The client sends all it has and half-closes; the target reads it to EOF, and only then
/// answers with more than it got, which must still reach the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_half_close_passes_on_and_the_answer_still_flows() {
    let sent = pattern(1, 6 << 20);
    let answer = pattern(2, 9 << 20);
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = target.local_addr().unwrap();
    let reply = answer.clone();
    let server = tokio::spawn(async move {
        let (mut s, _) = target.accept().await.unwrap();
        let got = read_to_end(&mut s).await;
        s.write_all(&reply).await.unwrap();
        s.shutdown().await.unwrap();
        hash(&got)
    });
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let s = open(&weir, addr, b"").await;
    let (mut r, mut w) = s.into_split();
    w.write_all(&sent).await.unwrap();
    w.shutdown().await.unwrap();
    let got = read_to_end(&mut r).await;
    assert_eq!(
        server.await.unwrap(),
        hash(&sent),
        "the target got every byte"
    );
    assert_eq!(got.len(), answer.len());
    assert_eq!(hash(&got), hash(&answer), "the client got every byte");
    let want = (sent.len() as u64, answer.len() as u64);
    assert_eq!(bytes_reach(&weir, want.0, want.1).await, want);
    assert_eq!(weir.status().await["tunnels"], 1);
}

/// The other way round: the target sends everything and half-closes first; the client, having
/// read to EOF, then uploads, and the target must get it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_half_close_passes_on_and_the_upload_still_flows() {
    let first = pattern(3, 5 << 20);
    let upload = pattern(4, 7 << 20);
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = target.local_addr().unwrap();
    let greeting = first.clone();
    let server = tokio::spawn(async move {
        let (s, _) = target.accept().await.unwrap();
        let (mut r, mut w) = s.into_split();
        w.write_all(&greeting).await.unwrap();
        w.shutdown().await.unwrap();
        hash(&read_to_end(&mut r).await)
    });
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let s = open(&weir, addr, b"").await;
    let (mut r, mut w) = s.into_split();
    let got = read_to_end(&mut r).await;
    assert_eq!(hash(&got), hash(&first), "the client got every byte");
    w.write_all(&upload).await.unwrap();
    w.shutdown().await.unwrap();
    assert_eq!(
        server.await.unwrap(),
        hash(&upload),
        "the target got every byte"
    );
    let want = (upload.len() as u64, first.len() as u64);
    assert_eq!(bytes_reach(&weir, want.0, want.1).await, want);
}

/// Bytes sent in the same write as the CONNECT (before the 200) reach the target first: hyper
/// had already read them, and they are written before the tunnel starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_right_behind_the_connect_are_not_lost() {
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = target.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = target.accept().await.unwrap();
        read_to_end(&mut s).await
    });
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let mut s = open(&weir, addr, b"early ").await;
    s.write_all(b"and late").await.unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(server.await.unwrap(), b"early and late");
}

/// An echo target; returns its address.
async fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// `limits.tunnel_idle_timeout`: a tunnel that keeps moving bytes stays open past it; once
/// nothing moves either way for that long, Weir closes it (the client reads EOF).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_and_an_active_one_is_not() {
    let addr = echo().await;
    let weir = Weir::start(
        &[],
        &format!("{PRIVATE_OK}[limits]\ntunnel_idle_timeout = \"2s\"\n"),
    )
    .await;
    let mut s = open(&weir, addr, b"").await;
    // 4 s of traffic, a ping every 250 ms: twice the idle limit, never idle for it.
    for i in 0..16u8 {
        s.write_all(&[i]).await.unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(
            b[0],
            i,
            "still open and echoing after {} ms",
            u32::from(i) * 250
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Now silence: Weir closes it (well before the 30 s the read allows).
    let rest = read_to_end(&mut s).await;
    assert!(rest.is_empty(), "nothing more came: {rest:?}");
}

/// Without the limit (`"0s"`), a silent tunnel stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_idle_limit_keeps_a_silent_tunnel() {
    let addr = echo().await;
    let weir = Weir::start(
        &[],
        &format!("{PRIVATE_OK}[limits]\ntunnel_idle_timeout = \"0s\"\n"),
    )
    .await;
    let mut s = open(&weir, addr, b"").await;
    let mut b = [0u8; 1];
    let quiet = tokio::time::timeout(Duration::from_secs(3), s.read(&mut b)).await;
    assert!(quiet.is_err(), "the silent tunnel was closed: {quiet:?}");
    s.write_all(b"x").await.unwrap();
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"x");
}

/// A bulk transfer raises the reading socket's low-water mark (Linux: the kernel gathers
/// 512 KiB before it wakes Weir): the tail of each burst, under the mark, and the small
/// exchange that follows on the same kept-open connection must still pass, or this test
/// hangs past its bounds. Three rounds of a 3 MiB burst and its tail, then a ping-pong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_bulk_transfer_the_tail_and_small_exchanges_still_pass() {
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = target.local_addr().unwrap();
    let burst = pattern(5, (3 << 20) + 1234);
    let sent = burst.clone();
    let server = tokio::spawn(async move {
        let (mut s, _) = target.accept().await.unwrap();
        for round in 0..3u8 {
            s.write_all(&sent).await.unwrap();
            // The connection stays open: the client answers before anything more is sent.
            let mut ack = [0u8; 4];
            s.read_exact(&mut ack).await.unwrap();
            assert_eq!(&ack, b"next");
            for i in 0..5u8 {
                s.write_all(&[round, i]).await.unwrap();
                let mut b = [0u8; 1];
                s.read_exact(&mut b).await.unwrap();
                assert_eq!(b[0], i);
            }
        }
    });
    let weir = Weir::start(&[], PRIVATE_OK).await;
    let mut s = open(&weir, addr, b"").await;
    let bound = Duration::from_secs(10);
    for round in 0..3u8 {
        let mut got = vec![0u8; burst.len()];
        tokio::time::timeout(bound, s.read_exact(&mut got))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the burst's tail never came"))
            .unwrap();
        assert_eq!(
            hash(&got),
            hash(&burst),
            "round {round}: every byte, in order"
        );
        s.write_all(b"next").await.unwrap();
        for i in 0..5u8 {
            let mut b = [0u8; 2];
            tokio::time::timeout(bound, s.read_exact(&mut b))
                .await
                .unwrap_or_else(|_| panic!("round {round}: small message {i} never came"))
                .unwrap();
            assert_eq!(b, [round, i]);
            s.write_all(&[i]).await.unwrap();
        }
    }
    server.await.unwrap();
    let down = 3 * (burst.len() as u64 + 10);
    assert_eq!(bytes_reach(&weir, 3 * (4 + 5), down).await, (27, down));
}

/// A CONNECT target with an empty host or port 0 is the client's mistake: a 400 problem that
/// says so, not a 502 from trying to resolve or connect to it. No tunnel is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_a_host_or_with_port_0_is_a_bad_request() {
    let weir = Weir::start(&[], PRIVATE_OK).await;
    for target in [":443", "127.0.0.1:0", "localhost:0"] {
        let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut answer))
            .await
            .expect("an answer")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
        assert!(
            answer.contains("port from 1 to 65535"),
            "{target}: {answer}"
        );
    }
    assert_eq!(weir.status().await["tunnels"], 0);
}
