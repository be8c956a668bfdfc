#![cfg(feature = "gateway")]
//! A raw-socket HTTP/1 fuzzer against a running engine: a fixed-seed, bounded set of malformed
//! requests (bad request lines, chunk sizes and extensions, oversized and duplicated headers,
//! CL/TE conflicts, obs-fold, NUL bytes, absolute-form garbage to the managed upstream, CONNECT
//! garbage, truncated bodies, pipelining), each on its own connection. Every connection must
//! end in an HTTP/1.x status line or a close within a bound (a hang check, not a speed check),
//! no task may panic, and afterwards Weir must still proxy a normal request and answer status.
//! Request smuggling: ambiguous framing (CL+TE, TE+TE, obs-fold, chunk extensions) against the
//! laptop listener and the gateway's TLS listener, counted at the upstream.

mod common;
#[path = "common/gateway.rs"]
mod gw;
use common::{Upstream, Weir};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEED: u64 = 0x5745_4952_4655_5a5a; // "WEIRFUZZ"
const CASES: usize = 300;
/// How long one connection may stay without a status line or a close: a hang bound.
const CASE_BOUND: Duration = Duration::from_secs(5);
/// Weir's default `limits.max_header_bytes` (the test config does not change it).
const MAX_HEADER_BYTES: usize = 32 * 1024;

static PANICS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Response,
    Close,
}

fn pick<'a, T>(rng: &mut StdRng, xs: &'a [T]) -> &'a T {
    &xs[rng.gen_range(0..xs.len())]
}

fn garbage(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.gen()).collect()
}

/// Printable garbage with the characters that break URIs and header syntax.
fn text_garbage(rng: &mut StdRng, max: usize) -> String {
    const ALPHABET: &[u8] = b"abcXYZ019/?#[]@:%{}\\\"<> \t,;=&+-_.~!$'()*|^`";
    let n = rng.gen_range(0..=max);
    (0..n)
        .map(|_| *pick(rng, ALPHABET) as char)
        .collect::<String>()
}

/// One malformed request (or several, pipelined). `up` is the managed upstream's address.
fn case(rng: &mut StdRng, up: SocketAddr) -> (&'static str, Vec<u8>) {
    let host = format!("Host: {up}\r\n");
    let abs = format!("http://{up}");
    let kind = rng.gen_range(0..14);
    let (name, mut bytes): (&'static str, Vec<u8>) = match kind {
        0 => {
            let lines: &[&str] = &[
                "GET / HTTP/1.1",
                "GET /",
                "GET  /  HTTP/1.1",
                "GET / HTTP/9.9",
                "GET / HTTP/1.1 extra",
                "get / http/1.1",
                "G\u{7f}T / HTTP/1.1",
                " GET / HTTP/1.1",
                "GET\t/\tHTTP/1.1",
                "GET http:// HTTP/1.1",
                "GET http://[::1 HTTP/1.1",
                "GET * HTTP/1.1",
                "OPTIONS * HTTP/1.0",
                "GET /%%% HTTP/1.1",
                "\r\n\r\nGET / HTTP/1.1",
                "HTTP/1.1 200 OK",
                "PRI * HTTP/2.0",
            ];
            let mut line = pick(rng, lines).to_string();
            if rng.gen_bool(0.5) {
                line.insert_str(line.len() / 2, &text_garbage(rng, 20));
            }
            let mut b = format!("{line}\r\n{host}\r\n").into_bytes();
            if rng.gen_bool(0.2) {
                // A long request target.
                let long = "a".repeat(rng.gen_range(8_000..80_000));
                b = format!("GET /{long} HTTP/1.1\r\n{host}\r\n").into_bytes();
            }
            ("bad request line", b)
        }
        1 => {
            let sizes: &[&str] = &[
                "-1",
                "ffffffffffffffffffff",
                "0x10",
                "1 ",
                "",
                "zz",
                "+5",
                "99999999999999999999999999999999",
                "7fffffffffffffff",
                "5\r\n",
                "00000000000000000000000000000005",
                " 5",
                "5 5",
            ];
            let size = pick(rng, sizes).to_string();
            let data = garbage(rng, 16);
            let mut b = format!(
                "POST {abs}/agents/sessions HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n{size}\r\n"
            )
            .into_bytes();
            b.extend_from_slice(&data);
            b.extend_from_slice(b"\r\n0\r\n\r\n");
            ("bad chunk size", b)
        }
        2 => {
            let exts: &[&str] = &[
                ";",
                ";a=\"unterminated",
                ";\0",
                ";a=b;c",
                "; a = b",
                ";=",
                ";a=\"\\\"\"",
                "\t;x",
            ];
            let mut ext = pick(rng, exts).to_string();
            if rng.gen_bool(0.3) {
                ext = format!(";{}", "e".repeat(rng.gen_range(1_000..40_000)));
            }
            let b = format!(
                "POST {abs}/x HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n5{ext}\r\nhello\r\n0{ext}\r\n\r\n"
            )
            .into_bytes();
            ("bad chunk extension", b)
        }
        3 => {
            let total = rng.gen_range(MAX_HEADER_BYTES + 1..MAX_HEADER_BYTES * 3);
            let mut b = format!("GET {abs}/agents/sessions HTTP/1.1\r\n{host}").into_bytes();
            if rng.gen_bool(0.5) {
                b.extend_from_slice(format!("X-Big: {}\r\n", "v".repeat(total)).as_bytes());
            } else {
                let mut i = 0;
                while b.len() < total {
                    b.extend_from_slice(format!("X-H{i}: {}\r\n", "v".repeat(30)).as_bytes());
                    i += 1;
                }
            }
            b.extend_from_slice(b"\r\n");
            ("oversized headers", b)
        }
        4 => {
            let dups: &[&str] = &[
                "Host: a\r\nHost: b\r\n",
                "Content-Length: 5\r\nContent-Length: 6\r\n",
                "Content-Length: 5, 5\r\n",
                "Content-Length: 5, 6\r\n",
                "Content-Length: -1\r\n",
                "Content-Length: 99999999999999999999\r\n",
                "Content-Length: 0x10\r\n",
                "Content-Length: +5\r\n",
                "Content-Length:\r\n",
                "Content-Length: 5 5\r\n",
            ];
            let b = format!(
                "POST {abs}/agents/swe/v1/jobs/o/r HTTP/1.1\r\n{host}{}\r\nhello",
                pick(rng, dups)
            )
            .into_bytes();
            ("duplicate host/content-length", b)
        }
        5 => {
            let te: &[&str] = &[
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                "Transfer-Encoding: chunked, identity\r\n",
                "Transfer-Encoding: identity, chunked\r\n",
                "Transfer-Encoding: xchunked\r\n",
                "Transfer-Encoding : chunked\r\n",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "Transfer-Encoding: gzip\r\n",
                "Transfer-Encoding:\tchunked\r\n",
            ];
            let b = format!(
                "POST {abs}/x HTTP/1.1\r\n{host}{}\r\n5\r\nhello\r\n0\r\n\r\n",
                pick(rng, te)
            )
            .into_bytes();
            ("CL+TE conflict", b)
        }
        6 => {
            let folds: &[&str] = &[
                "X-A: a\r\n b\r\n",
                "X-A: a\r\n\tb\r\n",
                " X-A: leading fold\r\n",
                "Authorization: token a\r\n  b\r\n",
                "Content-Length: 1\r\n 0\r\n",
            ];
            let b = format!(
                "GET {abs}/agents/sessions HTTP/1.1\r\n{host}{}\r\n",
                pick(rng, folds)
            )
            .into_bytes();
            ("obs-fold", b)
        }
        7 => {
            let mut b =
                format!("GET {abs}/agents/sessions HTTP/1.1\r\n{host}X-N: a\r\n\r\n").into_bytes();
            let at = rng.gen_range(0..b.len());
            b.insert(at, 0);
            ("NUL byte", b)
        }
        8 => {
            let g = text_garbage(rng, 60);
            let forms = [
                format!("GET {abs}/{g} HTTP/1.1\r\n{host}\r\n"),
                format!("GET {abs}?{g} HTTP/1.1\r\n{host}\r\n"),
                format!("GET {abs}{g} HTTP/1.1\r\nHost: {g}\r\n\r\n"),
                format!("GET http://{g}@{up}/ HTTP/1.1\r\n{host}\r\n"),
                format!("GET HTTP://{up}/agents/sessions HTTP/1.1\r\nHost: other\r\n\r\n"),
                format!("GET https://{up}/agents/sessions HTTP/1.1\r\n{host}\r\n"),
                format!("GET ftp://{up}/ HTTP/1.1\r\n{host}\r\n"),
            ];
            let mut b = pick(rng, &forms).clone().into_bytes();
            if rng.gen_bool(0.3) {
                let at = rng.gen_range(0..b.len());
                b.splice(at..at, garbage(rng, 8));
            }
            ("absolute-form garbage", b)
        }
        9 => {
            // Literal addresses only: a resolvable name would make the case wait on DNS.
            let port = up.port();
            let auths = [
                String::new(),
                "127.0.0.1".into(),
                "127.0.0.1:0".into(),
                "127.0.0.1:99999".into(),
                "[::1".into(),
                "[::1]:-1".into(),
                "10.255.255.1:443".into(),
                "169.254.169.254:80".into(),
                "0.0.0.0:1".into(),
                ":443".into(),
                "@@@:1".into(),
                format!("127.0.0.1:{port}/path"),
                format!("user@127.0.0.1:{port}"),
                format!("127.0.0.1:{port}"),
                text_garbage(rng, 30),
            ];
            let auth = pick(rng, &auths).clone();
            let mut b = format!("CONNECT {auth} HTTP/1.1\r\nHost: {auth}\r\n\r\n").into_bytes();
            b.extend_from_slice(&garbage(rng, 64));
            ("CONNECT garbage", b)
        }
        10 => {
            let declared = rng.gen_range(10..100_000);
            let sent = rng.gen_range(0..10);
            let mut b = if rng.gen_bool(0.5) {
                format!(
                    "POST {abs}/agents/swe/v1/jobs/o/r HTTP/1.1\r\n{host}Content-Length: {declared}\r\n\r\n"
                )
                .into_bytes()
            } else {
                format!(
                    "POST {abs}/x HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n{declared:x}\r\n"
                )
                .into_bytes()
            };
            b.extend(std::iter::repeat_n(b'x', sent));
            ("truncated body", b)
        }
        11 => {
            let parts = [
                format!("GET {abs}/agents/sessions HTTP/1.1\r\n{host}\r\n"),
                "GET /_weir/api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_string(),
                format!("POST {abs}/x HTTP/1.1\r\n{host}Content-Length: 3\r\n\r\nabc"),
                format!("POST {abs}/x HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
                format!("GET {abs}/{} HTTP/1.1\r\n\r\n", text_garbage(rng, 10)),
                "BROKEN\r\n\r\n".to_string(),
            ];
            let mut b = Vec::new();
            for _ in 0..rng.gen_range(2..5) {
                b.extend_from_slice(pick(rng, &parts).as_bytes());
            }
            ("pipelined", b)
        }
        12 => ("random bytes", garbage(rng, 512)),
        _ => {
            let heads: &[&str] = &[
                "PRI * HTTP/2.0\r\n\r\nS",
                "GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: !!\r\n\r\n",
                "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                "GET / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
                "GET / HTTP/1.0\r\n\r\n",
                "GET /\r\n\r\n",
            ];
            (
                "upgrade/expect/versions",
                pick(rng, heads).as_bytes().to_vec(),
            )
        }
    };
    // A quarter of the cases get a few random bytes flipped on top.
    if !bytes.is_empty() && rng.gen_bool(0.25) {
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..bytes.len());
            bytes[at] = rng.gen();
        }
    }
    (name, bytes)
}

fn is_status_line(line: &[u8]) -> bool {
    let ok_version = line.starts_with(b"HTTP/1.1 ") || line.starts_with(b"HTTP/1.0 ");
    ok_version
        && line.len() >= 12
        && line[9..12].iter().all(u8::is_ascii_digit)
        && (line.len() == 12 || line[12] == b' ')
}

/// Sends `bytes`, half-closes (so a truncated request is truncated, not merely slow), and
/// reads until a whole first line or a close.
async fn run_case(addr: SocketAddr, bytes: &[u8]) -> Result<Outcome, String> {
    let io = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        // Weir may answer and close before reading everything: write errors are not failures.
        let _ = s.write_all(bytes).await;
        let _ = s.shutdown().await;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = &buf[..end];
                return if is_status_line(line) {
                    Ok(Outcome::Response)
                } else {
                    Err(format!(
                        "not an HTTP/1.x status line: {:?}",
                        String::from_utf8_lossy(line)
                    ))
                };
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) if buf.is_empty() => return Ok(Outcome::Close),
                Ok(0) | Err(_) => {
                    return Err(format!(
                        "closed inside the status line: {:?}",
                        String::from_utf8_lossy(&buf)
                    ))
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(CASE_BOUND, io)
        .await
        .unwrap_or_else(|_| Err(format!("no status line and no close within {CASE_BOUND:?}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http1_never_hangs_or_kills_the_engine() {
    // Any panic in the engine's tasks (caught by tokio, so otherwise silent) fails the test.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let up = Upstream::start().await;
    // Default settings, breaker included: malformed bodies are the client's fault and must not
    // open the upstream's breaker (they once did: 75 % "failures" over 20 calls), so the
    // request after the fuzzing below must still reach the upstream.
    let weir = Weir::start(&[&up.origin()], "").await;
    let addr = weir.handle.local_addr();
    let mut rng = StdRng::seed_from_u64(SEED);
    let started = std::time::Instant::now();
    let (mut responses, mut closes) = (0usize, 0usize);
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    let mut failures = Vec::new();
    for i in 0..CASES {
        let (name, bytes) = case(&mut rng, up.addr);
        let entry = by_kind.entry(name).or_default();
        match run_case(addr, &bytes).await {
            Ok(Outcome::Response) => {
                responses += 1;
                entry.0 += 1;
            }
            Ok(Outcome::Close) => {
                closes += 1;
                entry.1 += 1;
            }
            Err(e) => {
                let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
                failures.push(format!("case {i} ({name}): {e}\n  sent: {shown:?}"));
            }
        }
    }
    println!(
        "fuzz_http1: {CASES} cases in {:?}: {responses} answered with a status line, {closes} closed",
        started.elapsed()
    );
    for (name, (r, c)) in &by_kind {
        println!("  {name:32} {r:4} responses {c:4} closes");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Still alive and still proxying: a normal request and the status endpoint.
    let r = weir
        .client("fuzz")
        .get(format!("{}/agents/sessions", up.origin()))
        .send()
        .await
        .expect("weir still proxies");
    let code = r.status();
    let body = r.text().await.unwrap_or_default();
    assert_eq!(code, 200, "{body}");
    let status = weir.status().await;
    assert!(status.is_object(), "{status}");
    let _ = weir.handle.status().await;
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a task panicked (see stderr)"
    );
}

/// The request hidden in a body: absolute-form, so Weir would proxy it if it took it for one.
fn smuggled(up: SocketAddr) -> String {
    format!("GET http://{up}/smuggled HTTP/1.1\r\nHost: {up}\r\nAuthorization: token fuzz\r\n\r\n")
}

/// Requests whose framing a lenient or disagreeing parser could split into two: each is
/// (name, bytes). The hidden request follows the framing only where the framing is ambiguous;
/// the well-formed chunk-extension cases carry none (after them it would be a plain pipelined
/// request the client meant).
fn smuggling_cases(up: SocketAddr) -> Vec<(&'static str, Vec<u8>)> {
    let head = format!(
        "POST http://{up}/agents/front HTTP/1.1\r\nHost: {up}\r\nAuthorization: token fuzz\r\n"
    );
    let hidden = smuggled(up);
    let chunk = format!("{:x}\r\n{hidden}\r\n0\r\n\r\n", hidden.len());
    let with = |framing: &str, body: &str| format!("{head}{framing}\r\n{body}").into_bytes();
    vec![
        // CL+TE: the front end counts the length, the back end the chunks (and the reverse).
        ("cl_te", with(&format!("Content-Length: {}\r\nTransfer-Encoding: chunked\r\n", 5 + hidden.len()), &format!("0\r\n\r\n{hidden}"))),
        ("te_cl", with("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", &chunk)),
        ("cl_te_zero", with("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", &chunk)),
        // TE+TE: two Transfer-Encoding values, or one a parser may not read as chunked.
        ("te_te_identity", with("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", &chunk)),
        ("te_te_list", with("Transfer-Encoding: chunked, identity\r\nContent-Length: 4\r\n", &chunk)),
        ("te_te_cow", with("Transfer-Encoding: chunked\r\nTransfer-encoding: cow\r\n", &chunk)),
        ("te_xchunked", with(&format!("Transfer-Encoding: xchunked\r\nContent-Length: {}\r\n", chunk.len()), &chunk)),
        ("te_space_colon", with("Transfer-Encoding : chunked\r\nContent-Length: 4\r\n", &chunk)),
        ("te_vtab", with("Transfer-Encoding:\x0bchunked\r\nContent-Length: 4\r\n", &chunk)),
        ("te_http10", format!("POST http://{up}/agents/front HTTP/1.0\r\nHost: {up}\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunk}").into_bytes()),
        // obs-fold: a header continued on the next line, which hides or changes the framing.
        ("fold_te", with("Transfer-Encoding:\r\n chunked\r\nContent-Length: 4\r\n", &chunk)),
        ("fold_cl", with(&format!("Content-Length: 0\r\n {}\r\n", chunk.len()), &chunk)),
        ("fold_into_te", with("X-Note: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", &chunk)),
        // Two lengths, or one written so parsers disagree.
        ("cl_cl", with(&format!("Content-Length: 4\r\nContent-Length: {}\r\n", chunk.len()), &chunk)),
        ("cl_list", with(&format!("Content-Length: 4, {}\r\n", chunk.len()), &chunk)),
        ("cl_plus", with(&format!("Content-Length: +{}\r\n", chunk.len()), &chunk)),
        // Chunk extensions: well-formed ones (one request), and malformed ones that could end
        // a chunk early for a lenient parser.
        ("ext_token", with("Transfer-Encoding: chunked\r\n", "5;name=value\r\nhello\r\n0\r\n\r\n")),
        ("ext_quoted", with("Transfer-Encoding: chunked\r\n", "5;name=\"a;b\"\r\nhello\r\n0;last\r\n\r\n")),
        ("ext_long", with("Transfer-Encoding: chunked\r\n", &format!("5;{}\r\nhello\r\n0\r\n\r\n", "x".repeat(8192)))),
        ("ext_bare_lf", with("Transfer-Encoding: chunked\r\n", &format!("5;a\n{hidden}\r\nhello\r\n0\r\n\r\n"))),
        ("ext_cr_in_quote", with("Transfer-Encoding: chunked\r\n", &format!("5;a=\"x\r\n{hidden}\"\r\nhello\r\n0\r\n\r\n"))),
        ("size_space", with("Transfer-Encoding: chunked\r\n", &format!("5 \r\nhello\r\n0\r\n\r\n{hidden}"))),
        ("size_overflow", with("Transfer-Encoding: chunked\r\n", &format!("1{}\r\nhello\r\n0\r\n\r\n{hidden}", "0".repeat(17)))),
        ("size_0x", with("Transfer-Encoding: chunked\r\n", &format!("0x5\r\nhello\r\n0\r\n\r\n{hidden}"))),
    ]
}

/// Writes `bytes`, half-closes, and reads everything until the peer closes (bounded): the
/// number of HTTP/1.x status lines that came back.
async fn responses<S>(mut s: S, bytes: &[u8]) -> Result<usize, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let io = async {
        let _ = s.write_all(bytes).await;
        let _ = s.shutdown().await;
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        let mut n = usize::from(buf.starts_with(b"HTTP/1."));
        n += buf.windows(9).filter(|w| w == b"\r\nHTTP/1.").count();
        if !buf.is_empty() && n == 0 {
            return Err(format!(
                "not HTTP: {:?}",
                String::from_utf8_lossy(&buf[..buf.len().min(200)])
            ));
        }
        Ok(n)
    };
    tokio::time::timeout(CASE_BOUND, io)
        .await
        .unwrap_or_else(|_| Err(format!("no close within {CASE_BOUND:?}")))
}

/// Runs every smuggling case on its own connection (`connect` makes one) and checks: at most
/// one response came back, the upstream got at most one request from it, and the hidden
/// request never reached the upstream.
async fn smuggling_against<F, Fut, S>(listener: &str, up: &Upstream, connect: F) -> Vec<String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut failures = Vec::new();
    let (mut answered, mut closed) = (0, 0);
    let cases = smuggling_cases(up.addr);
    for (name, bytes) in &cases {
        // Each case has a path of its own, so a late arrival at the upstream is still counted
        // against the case that sent it (a count taken between cases races with the forward).
        let bytes = String::from_utf8_lossy(bytes)
            .replacen("/agents/front ", &format!("/agents/front/{name} "), 1)
            .into_bytes();
        match responses(connect().await, &bytes).await {
            Ok(0) => closed += 1,
            Ok(1) => answered += 1,
            Ok(n) => failures.push(format!("{listener} {name}: {n} responses on one request")),
            Err(e) => failures.push(format!("{listener} {name}: {e}")),
        }
    }
    // Let forwards still under way land (bounded): the count is stable for 300 ms.
    let mut last = up.total();
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = up.total();
        if now == last {
            break;
        }
        last = now;
    }
    let seen = up.seen();
    for (name, _) in &cases {
        let path = format!("/agents/front/{name}");
        let reached = seen.iter().filter(|s| s.path_and_query == path).count();
        if reached > 1 {
            failures.push(format!(
                "{listener} {name}: reached the upstream as {reached} requests"
            ));
        }
    }
    if seen.iter().any(|s| s.path_and_query.contains("smuggled")) {
        failures.push(format!("{listener}: a hidden request reached the upstream"));
    }
    println!(
        "smuggling, {listener}: {answered} answered, {closed} closed, upstream saw {} requests",
        up.total()
    );
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_never_reaches_the_upstream_as_two_requests() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let addr = weir.handle.local_addr();
    let mut failures = smuggling_against("laptop", &up, || async move {
        TcpStream::connect(addr).await.unwrap()
    })
    .await;

    let gup = Upstream::start().await;
    let files = gw::GatewayFiles::new();
    let replica = gw::Replica::start(&files.config(gup.addr, "allow = [\"127.0.0.0/8\", \"::1\"]"));
    let tls = gw::client_trusting(files.cert_der.clone().into());
    let gaddr = replica.addr;
    failures.extend(
        smuggling_against("gateway", &gup, || {
            let tls = tls.clone();
            async move {
                let tcp = TcpStream::connect(gaddr).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                tokio_rustls::TlsConnector::from(tls)
                    .connect(name, tcp)
                    .await
                    .unwrap()
            }
        })
        .await,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Both still proxy a normal request.
    let r = weir
        .client("fuzz")
        .get(format!("{}/agents/sessions", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let a = gw::send(
        replica.addr,
        &files.cert_der,
        "GET",
        &format!("{}/agents/sessions", gup.origin()),
        &[("authorization", "token fuzz")],
        "",
    )
    .await
    .unwrap();
    assert_eq!(a.status, 200, "{:?}", a.body);
}
