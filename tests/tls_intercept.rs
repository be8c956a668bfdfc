//! HTTPS through Weir with a real client (curl): CONNECTs to a managed https upstream are
//! TLS-terminated with Weir's local CA and get coalescing/caching (over HTTP/1.1 and HTTP/2);
//! every other CONNECT is a blind tunnel whose own certificate reaches the client; without a CA
//! or with `intercept = false` even managed hosts are tunnelled; `upstream_proxy` chains Weir's
//! own connections through a CONNECT proxy. Needs `curl` (apt-get install curl).

#[path = "common/tls.rs"]
mod tls;
#[path = "common/tls_client.rs"]
mod tls_client;

use std::sync::Arc;
use std::time::Duration;
use tls::{output, TestCa, TlsUpstream, TlsWeir, HOST};
use tls_client::{curl, parse_curl};

const LIST: &str = "/agents/sessions";

async fn managed() -> (TestCa, TlsUpstream, TlsWeir) {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let weir = TlsWeir::start(&tls::upstream_toml(&up, &ca)).await;
    (ca, up, weir)
}

/// N concurrent identical curls (HTTP `version_flag`), then one more: one upstream request.
async fn coalesced_and_cached(version_flag: &str, want_version: &str) {
    let (_ca, up, weir) = managed().await;
    up.set_delay(Duration::from_millis(400));
    let url = format!("https://{HOST}{LIST}");
    let runs: Vec<_> = (0..5)
        .map(|_| output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[version_flag])))
        .collect();
    let answers: Vec<_> = futures::future::join_all(runs)
        .await
        .iter()
        .map(parse_curl)
        .collect();
    for (body, code, version, cache) in &answers {
        assert_eq!(*code, 200, "{body}");
        assert_eq!(
            version, want_version,
            "client side of the tunnel speaks {want_version}"
        );
        assert!(
            cache.starts_with("weir;"),
            "Cache-Status present: {cache:?}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["path"], LIST);
        assert_eq!(v["n"], 1, "every client got the one upstream answer");
    }
    assert!(
        answers
            .iter()
            .any(|a| a.3.contains("collapsed") || a.3.contains("hit")),
        "{answers:?}"
    );
    let (_, code, _, cache) =
        parse_curl(&output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[version_flag])).await);
    assert_eq!((code, cache.as_str()), (200, "weir; hit"));
    assert_eq!(
        up.count(LIST),
        1,
        "6 identical requests, 1 upstream request"
    );
    assert_eq!(
        up.seen()[0].host,
        HOST,
        "the upstream sees its own name, not connect_to's address"
    );
    let status = weir.status().await;
    assert_eq!(status["tunnels"], 0, "nothing was tunnelled blindly");
    let i = weir.handle.interceptor().unwrap();
    assert_eq!(i.connections(), 6);
    assert_eq!(i.leaves_issued(), 1, "one leaf for the host, reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http1_is_intercepted_coalesced_and_cached() {
    coalesced_and_cached("--http1.1", "1.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http2_is_intercepted_coalesced_and_cached() {
    coalesced_and_cached("--http2", "2").await;
}

/// An intercepted HTTP/2 answer (a real h2 client, ALPN h2, several requests on one
/// connection) carries each request's own `X-Request-Id` intact and no `Keep-Alive` (a
/// connection-specific header HTTP/2 forbids), while the same answer over HTTP/1.1 (curl) keeps
/// its `Keep-Alive` hint. On the wire, once the stable headers are in the connection's HPACK
/// table, an answer inserts nothing more: the request id, unique to each answer, is a
/// never-indexed literal (before, every answer inserted its id and pushed the stable headers
/// out of the table, a cost on every answer; #32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_answers_index_no_request_id_and_carry_no_keep_alive() {
    let (_ca, _up, weir) = managed().await;
    let roots = vec![weir.ca.cert_der().clone()];
    let tls = tls_client::tls_stream_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &roots,
        &[b"h2"],
    )
    .await
    .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let io = Tee {
        inner: tls,
        seen: seen.clone(),
    };
    let (mut client, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    const ANSWERS: usize = 5;
    for i in 0..ANSWERS {
        let rid = format!("h2-request-{i}-{}", "x".repeat(i * 7));
        let req = http::Request::get(format!("https://{HOST}{LIST}"))
            .header("x-request-id", &rid)
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["x-request-id"],
            rid.as_str(),
            "the client's request id comes back intact"
        );
        assert!(
            !resp.headers().contains_key("keep-alive")
                && !resp.headers().contains_key("connection"),
            "no connection-specific header over HTTP/2: {:?}",
            resp.headers()
        );
        if i >= 1 {
            assert_eq!(resp.headers()["cache-status"], "weir; hit");
        }
        let mut body = resp.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
        }
    }
    let blocks = header_blocks(&seen.lock().unwrap());
    assert_eq!(blocks.len(), ANSWERS, "one HEADERS frame per answer");
    // The 1st answer fills the table, the 2nd adds its `Cache-Status: weir; hit`; from then on
    // every field is indexed or a literal that is not inserted.
    for (n, block) in blocks.iter().enumerate().skip(2) {
        let kinds = hpack_kinds(block);
        assert_eq!(
            kinds.iter().filter(|k| **k == Field::Inserted).count(),
            0,
            "answer {n} inserted into the HPACK table: {kinds:?}"
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == Field::NeverIndexed).count(),
            1,
            "answer {n}: the request id is the one never-indexed literal: {kinds:?}"
        );
    }
    // The same answer over HTTP/1.1 still tells the client how long its connection is kept.
    let out = output(curl(
        &weir.proxy_url(),
        &weir.ca_pem,
        &format!("https://{HOST}{LIST}"),
        &["--http1.1", "-D", "-"],
    ))
    .await;
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.contains("\r\nkeep-alive: timeout="), "{text}");
}

/// Answers to requests that arrive together on one intercepted HTTP/2 connection leave
/// together: Go's transport (`gh`) multiplexes its concurrent calls on one connection, and
/// each answer used to cost a TLS record and a `writev` of its own (`server::cork`, #32).
/// Here 24 requests go out in one TLS record; their 24 cached answers come back, each whole
/// and with its own request id, in a few records rather than 24 (counted below Weir's TLS,
/// on the client's socket).
#[tokio::test]
async fn http2_answers_to_requests_that_came_together_leave_together() {
    let (_ca, _up, weir) = managed().await;
    let roots = vec![weir.ca.cert_der().clone()];
    let tcp = tls_client::connect_through_proxy(weir.handle.local_addr(), &format!("{HOST}:443"))
        .await
        .unwrap();
    // Every byte read from the socket, below the TLS session.
    let raw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let io = Tee {
        inner: tcp,
        seen: raw.clone(),
    };
    let tls = tls_client::tls_over(io, HOST, &roots, &[b"h2"])
        .await
        .unwrap();
    let records = || tls_records(&raw.lock().unwrap());
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let get = |rid: &str| {
        http::Request::get(format!("https://{HOST}{LIST}"))
            .header("x-request-id", rid)
            .body(())
            .unwrap()
    };
    async fn read_whole(resp: h2::client::ResponseFuture) -> (http::StatusCode, String, Vec<u8>) {
        let resp = resp.await.unwrap();
        let status = resp.status();
        let rid = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            bytes.extend_from_slice(&chunk);
        }
        (status, rid, bytes)
    }
    // The first fills the cache (and the connection's settings are exchanged).
    let (resp, _) = client.send_request(get("first"), true).unwrap();
    let (status, _, first_body) = read_whole(resp).await;
    assert_eq!(status, 200);
    assert!(!first_body.is_empty());

    // 24 at once: queued without a yield on this one-thread runtime, so the client's
    // connection task writes them in one flush, one TLS record.
    const AT_ONCE: usize = 24;
    let before = records();
    let pending: Vec<_> = (0..AT_ONCE)
        .map(|i| {
            client
                .send_request(get(&format!("together-{i}")), true)
                .unwrap()
                .0
        })
        .collect();
    let answers = futures::future::join_all(pending.into_iter().map(read_whole)).await;
    let sent = records() - before;
    for (i, (status, rid, body)) in answers.iter().enumerate() {
        assert_eq!(*status, 200);
        assert_eq!(
            *rid,
            format!("together-{i}"),
            "each answer carries its own request id"
        );
        assert_eq!(*body, first_body, "each answer whole");
    }
    // Uncorked this was 24 or more (one record per answer, each its own `writev`).
    assert!(
        sent <= 4,
        "{AT_ONCE} answers to requests that came together took {sent} TLS records"
    );
}

/// How many TLS records `raw` (bytes read from a socket, from the first on) begins: each is at
/// least one write of the server's.
fn tls_records(raw: &[u8]) -> usize {
    let (mut at, mut n) = (0, 0);
    while at + 5 <= raw.len() {
        n += 1;
        at += 5 + usize::from(u16::from_be_bytes([raw[at + 3], raw[at + 4]]));
    }
    n
}

/// Records every byte read from the stream: over TLS, the server's HTTP/2 frames; under it, its TLS records.
struct Tee<S> {
    inner: S,
    seen: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tee<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled()[before..].to_vec();
        self.seen.lock().unwrap().extend_from_slice(&got);
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tee<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The header block of every HEADERS frame in a server's byte stream (RFC 9113 4.1, 6.2).
fn header_blocks(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 9 <= bytes.len() {
        let len = (bytes[i] as usize) << 16 | (bytes[i + 1] as usize) << 8 | bytes[i + 2] as usize;
        let (kind, flags) = (bytes[i + 3], bytes[i + 4]);
        let payload = &bytes[i + 9..(i + 9 + len).min(bytes.len())];
        if kind == 0x1 {
            assert_eq!(flags & 0x4, 0x4, "one HEADERS frame per head (END_HEADERS)");
            let pad = if flags & 0x8 != 0 {
                payload[0] as usize
            } else {
                0
            };
            let start = usize::from(flags & 0x8 != 0) + if flags & 0x20 != 0 { 5 } else { 0 };
            out.push(payload[start..payload.len() - pad].to_vec());
        }
        i += 9 + len;
    }
    out
}

/// How a header field is represented in an HPACK block (RFC 7541 6).
#[derive(Debug, PartialEq)]
enum Field {
    Indexed,
    Inserted,
    NotIndexed,
    NeverIndexed,
    SizeUpdate,
}

/// The representation of each field of an HPACK block, strings skipped (not decoded).
fn hpack_kinds(block: &[u8]) -> Vec<Field> {
    fn int(b: &[u8], i: &mut usize, prefix: u32) -> usize {
        let mask = (1usize << prefix) - 1;
        let mut v = b[*i] as usize & mask;
        *i += 1;
        if v == mask {
            let mut shift = 0;
            loop {
                let c = b[*i];
                *i += 1;
                v += ((c & 0x7f) as usize) << shift;
                shift += 7;
                if c & 0x80 == 0 {
                    break;
                }
            }
        }
        v
    }
    fn skip_string(b: &[u8], i: &mut usize) {
        let len = int(b, i, 7);
        *i += len;
    }
    let mut kinds = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let b = block[i];
        let (kind, prefix) = match b {
            _ if b & 0x80 != 0 => (Field::Indexed, 7),
            _ if b & 0xc0 == 0x40 => (Field::Inserted, 6),
            _ if b & 0xe0 == 0x20 => (Field::SizeUpdate, 5),
            _ if b & 0x10 != 0 => (Field::NeverIndexed, 4),
            _ => (Field::NotIndexed, 4),
        };
        let name = int(block, &mut i, prefix);
        if matches!(
            kind,
            Field::Inserted | Field::NotIndexed | Field::NeverIndexed
        ) {
            if name == 0 {
                skip_string(block, &mut i);
            }
            skip_string(block, &mut i);
        }
        kinds.push(kind);
    }
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_chains_to_weirs_ca_and_is_for_the_host() {
    let (_ca, _up, weir) = managed().await;
    let roots = vec![weir.ca.cert_der().clone()];
    let chain = tls_client::tls_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &roots,
    )
    .await
    .unwrap();
    assert_ne!(
        tls::fingerprint(&chain[0]),
        tls::fingerprint(weir.ca.cert_der())
    );
    // A client trusting only the public roots (here: the upstream's test CA) must refuse it.
    let other = TestCa::new();
    let refused = tls_client::tls_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &[other.der()],
    )
    .await;
    assert!(
        refused.is_err(),
        "a client that does not trust Weir's CA must not accept the leaf"
    );
}

/// Issue 31, item 4: a ClientHello whose server name is not the CONNECT target gets no leaf at
/// all (the name is matched before anything is signed), so a client cannot make Weir sign a
/// key for every `*.githubcopilot.com` name it cares to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leaf_is_made_for_a_server_name_that_is_not_the_connect_target() {
    let (_ca, _up, weir) = managed().await;
    let roots = vec![weir.ca.cert_der().clone()];
    for sni in ["other.githubcopilot.com", "x1.githubcopilot.com"] {
        let r = tls_client::tls_through_proxy(
            weir.handle.local_addr(),
            &format!("{HOST}:443"),
            sni,
            &roots,
        )
        .await;
        assert!(r.is_err(), "{sni}: the handshake must fail");
    }
    let i = weir.handle.interceptor().unwrap();
    assert_eq!(i.leaves_issued(), 0, "nothing was signed");
    // The CONNECT target's own name still gets its one leaf.
    tls_client::tls_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &roots,
    )
    .await
    .unwrap();
    assert_eq!(i.leaves_issued(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmanaged_tls_is_tunnelled_byte_for_byte() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    // The unmanaged host is a loopback fixture, which Weir refuses unless allowed.
    let toml = format!(
        "allow_private_targets = true\n{}",
        tls::upstream_toml(&up, &ca)
    );
    let weir = TlsWeir::start(&toml).await;
    // Another TLS host, not managed: its own certificate must reach the client.
    let other = TlsUpstream::start(&ca, "other.example").await;
    let chain = tls_client::tls_through_proxy(
        weir.handle.local_addr(),
        &other.addr.to_string(),
        "other.example",
        &[ca.der()],
    )
    .await
    .unwrap();
    assert_eq!(
        tls::fingerprint(&chain[0]),
        tls::fingerprint(&other.cert_der),
        "the origin's own certificate, untouched"
    );
    assert_eq!(weir.status().await["tunnels"], 1);
    assert_eq!(weir.handle.interceptor().unwrap().connections(), 0);
}

/// Starts Weir managing the fixture but with `local_ca`/`extra` as given.
async fn weir_with(
    ca: &TestCa,
    up: &TlsUpstream,
    extra: &str,
    local_ca: bool,
) -> (weir::EngineHandle, tempfile::TempDir) {
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\n{extra}{}",
        tls::upstream_toml(up, ca)
    );
    let settings = weir::config::parse_str(&toml, "t.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = weir::EngineOptions::new(settings.clone(), dir.path().to_path_buf());
    if local_ca {
        let hosts = settings.intercept_hosts();
        opts.local_ca = Some(Arc::new(
            weir_tls::LocalCa::generate_for_owner(&hosts, weir_tls::OffsetDateTime::now_utc(), "t")
                .unwrap(),
        ));
    }
    (weir::start(opts).await.unwrap(), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_or_with_intercept_off_managed_hosts_are_blind_tunnels() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    for (extra, local_ca) in [("", false), ("intercept = false\n", true)] {
        let (handle, _dir) = weir_with(&ca, &up, extra, local_ca).await;
        assert!(handle.interceptor().is_none(), "{extra:?}");
        // The tunnel goes to connect_to; the client sees the origin's own certificate.
        let chain = tls_client::tls_through_proxy(
            handle.local_addr(),
            &format!("{HOST}:443"),
            HOST,
            &[ca.der()],
        )
        .await
        .unwrap();
        assert_eq!(
            tls::fingerprint(&chain[0]),
            tls::fingerprint(&up.cert_der),
            "{extra:?}"
        );
        let url = format!("https://{HOST}{LIST}");
        let (_, code, _, cache) = parse_curl(
            &output(curl(
                &format!("http://{}", handle.local_addr()),
                &ca.pem_path,
                &url,
                &[],
            ))
            .await,
        );
        assert_eq!(code, 200);
        assert_eq!(cache, "", "no Weir policy inside a blind tunnel");
        handle.shutdown().await;
    }
    assert_eq!(up.count(LIST), 2, "each blind request reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_proxy_chains_weirs_own_connections() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let corp = tls_client::ConnectProxy::start(up.addr).await;
    // No connect_to: Weir must reach api.githubcopilot.com:443 through the proxy only.
    let toml = format!(
        "watch_github_status = false\nupstream_proxy = \"http://{}\"\n[[upstream]]\nname = \"copilot-api\"\norigin = \"https://{HOST}\"\nca_file = \"{}\"\n",
        corp.addr,
        ca.pem_path.display()
    );
    let weir = TlsWeir::start(&toml).await;
    let url = format!("https://{HOST}{LIST}");
    let (body, code, _, cache) =
        parse_curl(&output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[])).await);
    assert_eq!(code, 200, "{body}");
    assert!(cache.contains("stored"), "{cache}");
    assert_eq!(
        corp.seen.lock().unwrap().clone(),
        vec![format!("CONNECT {HOST}:443 HTTP/1.1")]
    );
    // A blind tunnel (unmanaged host) is chained too, so it works where only the proxy is allowed.
    let chain = tls_client::tls_through_proxy(
        weir.handle.local_addr(),
        "unmanaged.example:443",
        HOST,
        &[ca.der()],
    )
    .await
    .unwrap();
    assert_eq!(tls::fingerprint(&chain[0]), tls::fingerprint(&up.cert_der));
    assert_eq!(
        corp.seen.lock().unwrap().last().unwrap(),
        "CONNECT unmanaged.example:443 HTTP/1.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_file_is_needed_to_trust_the_upstream() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    // Same fixture without ca_file: Weir's client must refuse the unknown issuer.
    let toml = format!(
        "[[upstream]]\nname = \"copilot-api\"\norigin = \"https://{HOST}\"\nconnect_to = \"{}\"\n",
        up.addr
    );
    let weir = TlsWeir::start(&toml).await;
    let url = format!("https://{HOST}{LIST}");
    let (body, code, _, _) =
        parse_curl(&output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[])).await);
    assert_eq!(code, 502, "{body}");
    assert!(
        body.contains("certificate") || body.contains("UnknownIssuer"),
        "{body}"
    );
    assert_eq!(up.count(LIST), 0);
}

/// A fully qualified target (`api.githubcopilot.com.`, final dot) is the same managed host:
/// curl sends the server name without the dot, and Weir must not take that for another name
/// (it closed the connection as `sni_mismatch` before). The upstream is asked for its own name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fully_qualified_target_with_a_final_dot_is_intercepted() {
    let (_ca, up, weir) = managed().await;
    let url = format!("https://{HOST}.{LIST}");
    let (body, code, _, cache) =
        parse_curl(&output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[])).await);
    assert_eq!(code, 200, "{body}");
    assert!(cache.starts_with("weir;"), "{cache}");
    assert_eq!(up.count(LIST), 1);
    assert_eq!(up.seen()[0].host, HOST, "the upstream sees its own name");
    let st = weir.status().await["interception"].clone();
    assert_eq!(st["connections"], 1, "{st}");
    assert_eq!(st["handshake_failures"]["sni_mismatch"], 0, "{st}");
    assert_eq!(
        weir.status().await["tunnels"],
        0,
        "nothing was tunnelled blindly"
    );
}

/// An intercepted connection whose client finishes the handshake and then sends no request is
/// closed after header_read_timeout, and its CONNECT slot comes back: before, it was held for
/// good, so `max_connections` idle clients refused every later CONNECT with 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intercepted_connection_with_no_request_is_closed_and_its_slot_freed() {
    use tokio::io::AsyncReadExt;
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!(
        "{}[limits]\nheader_read_timeout = \"300ms\"\nmax_connections = 2\n",
        tls::upstream_toml(&up, &ca)
    );
    let weir = TlsWeir::start(&toml).await;
    let target = format!("{HOST}:443");
    let roots = [weir.ca.cert_der().clone()];
    for _ in 0..2 {
        let mut idle = tls_client::tls_stream_through_proxy(
            weir.handle.local_addr(),
            &target,
            HOST,
            &roots,
            &[],
        )
        .await
        .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(20), idle.read(&mut buf))
            .await
            .expect("closed by Weir, not by the test's bound")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
    let url = format!("https://{HOST}{LIST}");
    let (body, code, _, _) =
        parse_curl(&output(curl(&weir.proxy_url(), &weir.ca_pem, &url, &[])).await);
    assert_eq!(code, 200, "{body}");
}

/// Issue 32, item 6: failed client handshakes are counted by cause, in the status and the
/// metrics. A client that does not trust Weir's CA (rustls with other roots: it sends an
/// `unknown_ca` alert) is `untrusted_ca`; one that closes in the middle of its ClientHello is
/// `closed`; one that reads Weir's answer to its ClientHello (the certificate) and closes with
/// no alert is `closed_after_certificate` (what Node does when it does not trust the CA,
/// `tls_clients.rs`), and so is a good handshake whose client then closes without a request;
/// a server name that is not the CONNECT target is `sni_mismatch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_are_counted_by_cause() {
    let (_ca, _up, weir) = managed().await;
    let target = format!("{HOST}:443");
    let proxy = weir.handle.local_addr();
    let other = TestCa::new();
    let refused = tls_client::tls_through_proxy(proxy, &target, HOST, &[other.der()]).await;
    assert!(refused.is_err(), "the client must refuse Weir's leaf");
    closes_after_hello(proxy, &target).await;
    closes_during_hello(proxy, &target).await;
    let wrong = tls_client::tls_through_proxy(
        proxy,
        &target,
        "other.githubcopilot.com",
        &[weir.ca.cert_der().clone()],
    )
    .await;
    assert!(wrong.is_err());
    tls_client::tls_through_proxy(proxy, &target, HOST, &[weir.ca.cert_der().clone()])
        .await
        .unwrap();

    // Weir records a failure when it sees it, a moment after the client gave up.
    let mut st = serde_json::Value::Null;
    for _ in 0..100 {
        st = weir.status().await["interception"].clone();
        let f = &st["handshake_failures"];
        if f["closed"] == 1 && f["untrusted_ca"] == 1 && f["closed_after_certificate"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let f = &st["handshake_failures"];
    assert_eq!(f["untrusted_ca"], 1, "{st}");
    assert_eq!(f["closed"], 1, "{st}");
    assert_eq!(f["sni_mismatch"], 1, "{st}");
    assert_eq!(f["closed_after_certificate"], 2, "{st}");
    for cause in ["alert", "timeout", "other"] {
        assert_eq!(f[cause], 0, "{cause}: {st}");
    }
    assert_eq!(st["connections"], 5, "{st}");
    assert_eq!(st["leaves_issued"], 1, "{st}");

    let metrics = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "weir_intercepted_connections_total 5",
        "weir_tls_leaves_issued_total 1",
        "weir_tls_handshake_failures_total{cause=\"untrusted_ca\"} 1",
        "weir_tls_handshake_failures_total{cause=\"closed\"} 1",
        "weir_tls_handshake_failures_total{cause=\"closed_after_certificate\"} 2",
        "weir_tls_handshake_failures_total{cause=\"sni_mismatch\"} 1",
        "weir_tls_handshake_failures_total{cause=\"other\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// CONNECTs through Weir, sends the first bytes of a TLS record (a ClientHello's header), and
/// closes: a client that gave up before Weir could answer with its certificate.
async fn closes_during_hello(proxy: std::net::SocketAddr, target: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1);
        head.push(byte[0]);
    }
    s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.unwrap();
    drop(s);
}

/// CONNECTs through Weir, sends a real ClientHello, reads the start of Weir's answer, and
/// closes: a client that gave up in the middle of its handshake.
async fn closes_after_hello(proxy: std::net::SocketAddr, target: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1);
        head.push(byte[0]);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(HOST.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    s.write_all(&hello).await.unwrap();
    let mut answer = [0u8; 64];
    assert!(
        s.read(&mut answer).await.unwrap() > 0,
        "Weir answered the hello"
    );
    drop(s);
}

/// Everything Weir logs (at debug) in this test binary, to check what a log line names.
fn captured_logs() -> Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        let w = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Capture(w.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct Capture(Arc<std::sync::Mutex<Vec<u8>>>);
impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends `request` to `addr` over a new TCP connection and returns the answer's head and, if
/// it has a `content-length`, its body (read with a bound: a hang fails the test).
async fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let read = async {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_string();
        let len = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())
                    .flatten()
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        (head, String::from_utf8_lossy(&body).to_string())
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("Weir answered")
}

/// A CONNECT target with user info (`user:password@host:port`) is refused with a 400 problem
/// saying a target is `host:port`, and the user info is in neither the answer nor the log:
/// a managed host (it was intercepted, user info and all) and an unmanaged one (its connect
/// error repeated the whole target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_target_with_user_info_is_refused_without_echoing_it() {
    let logs = captured_logs();
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!(
        "allow_private_targets = true\n{}",
        tls::upstream_toml(&up, &ca)
    );
    let weir = TlsWeir::start(&toml).await;
    // A port nothing listens on (bound, then closed).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for target in [
        format!("alice:hunter2secret@{HOST}:443"),
        format!("alice:hunter2secret@127.0.0.1:{closed}"),
        format!("alice@127.0.0.1:{closed}"),
    ] {
        let (head, body) = raw_exchange(
            weir.handle.local_addr(),
            &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 400"), "{target}: {head}{body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{head}"
        );
        assert!(body.contains("host:port"), "{body}");
        for secret in ["hunter2secret", "alice"] {
            assert!(!body.contains(secret), "{target}: {body}");
            assert!(!head.contains(secret), "{target}: {head}");
        }
    }
    // Whatever Weir logged meanwhile (at debug) never names the user info.
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(!logged.contains("hunter2secret"), "{logged}");
    assert!(!logged.contains("alice"), "{logged}");
    assert_eq!(up.count(LIST), 0);
}

/// The `200` that opens a CONNECT tunnel (blind or intercepted) is the whole answer: no
/// `Keep-Alive` hint, which is meaningless on a connection that becomes a tunnel. Plain
/// HTTP/1.1 answers still carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connects_200_carries_no_keep_alive() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!(
        "allow_private_targets = true\n{}",
        tls::upstream_toml(&up, &ca)
    );
    let weir = TlsWeir::start(&toml).await;
    let blind = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let blind_addr = blind.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = blind.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                drop(s);
            });
        }
    });
    for target in [format!("{HOST}:443"), blind_addr.to_string()] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(weir.handle.local_addr())
            .await
            .unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed during CONNECT");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{target}: {head}");
        assert!(!head.contains("keep-alive"), "{target}: {head}");
    }
    // An ordinary answer on a kept-alive HTTP/1.1 connection still says how long it stays.
    let (head, _) = raw_exchange(
        weir.handle.local_addr(),
        "GET /_weir/api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .await;
    assert!(
        head.to_ascii_lowercase().contains("keep-alive: timeout="),
        "{head}"
    );
}

/// An HTTP/2 connection, with `header_read_timeout` as its idle limit (`limit`): the `[limits]`.
fn short_idle(limit: &str) -> String {
    format!("[limits]\nheader_read_timeout = \"{limit}\"\n")
}

/// Issue 32: an intercepted HTTP/2 connection idle after its requests is closed (GOAWAY) once
/// no stream was open for `header_read_timeout`, HTTP/1's idle limit; it held its CONNECT slot
/// forever. One with a request every 200 ms (for 4 limits) stays open and answers each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_intercepted_http2_connection_is_closed_and_an_active_one_is_not() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!("{}{}", tls::upstream_toml(&up, &ca), short_idle("500ms"));
    let weir = TlsWeir::start(&toml).await;
    let roots = [weir.ca.cert_der().clone()];
    let url = format!("https://{HOST}{LIST}");
    let open = || async {
        let tls = tls_client::tls_stream_through_proxy(
            weir.handle.local_addr(),
            &format!("{HOST}:443"),
            HOST,
            &roots,
            &[b"h2"],
        )
        .await
        .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (client, conn) = h2::client::handshake(tls).await.unwrap();
        let ended = tokio::spawn(async move {
            let _ = conn.await;
            std::time::Instant::now()
        });
        (client, ended)
    };

    // Idle after one request: closed by Weir.
    let (mut client, ended) = open().await;
    assert_eq!(tls::h2_get(&mut client, &url).await, 200);
    let last = std::time::Instant::now();
    let closed_at = tokio::time::timeout(Duration::from_secs(15), ended)
        .await
        .expect("Weir closes an idle HTTP/2 connection")
        .unwrap();
    assert!(
        closed_at.duration_since(last) >= Duration::from_millis(400),
        "closed {:?} after its last answer, not idle for the limit",
        closed_at.duration_since(last)
    );

    // Active: a request every 200 ms for 2 s, all on the one connection.
    let (mut client, ended) = open().await;
    for _ in 0..10 {
        assert_eq!(tls::h2_get(&mut client, &url).await, 200);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!ended.is_finished(), "an active connection was closed");
    }
    drop(client);
}

/// The plain listener's HTTP/2 (prior knowledge) has the same idle limit, and is told so with a
/// GOAWAY before the close, as an intercepted connection is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_plain_http2_connection_is_closed() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!("{}{}", tls::upstream_toml(&up, &ca), short_idle("500ms"));
    let weir = TlsWeir::start(&toml).await;
    let addr = weir.handle.local_addr();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::spawn(conn);
    let url = format!("http://{addr}/_weir/api/health");
    for _ in 0..6 {
        assert_eq!(tls::h2_get(&mut client, &url).await, 200);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!ended.is_finished(), "an active connection was closed");
    }
    let ended = tokio::time::timeout(Duration::from_secs(15), ended)
        .await
        .expect("Weir closes an idle HTTP/2 connection")
        .unwrap();
    ended.unwrap();
    tls::assert_told_goaway(client).await;
}

/// An echo target on loopback; returns its address.
async fn echo() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
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

/// An HTTP/2 CONNECT's stream ends for hyper once its `200` is sent (the tunnel runs in its own
/// task), so the idle limit counted no stream open and closed the connection, and the tunnel
/// on it, after `header_read_timeout` mid-transfer. A tunnel's stream counts as open until the
/// tunnel ends (its own `tunnel_idle_timeout` governs it): bytes still flow after 3 limits.
/// Once the tunnel has ended, the connection is idle like any other, and is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connect_tunnel_outlives_the_http2_idle_limit() {
    let target = echo().await;
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    // The echo target is on loopback, which Weir refuses by default.
    let toml = format!(
        "allow_private_targets = true\n{}{}",
        tls::upstream_toml(&up, &ca),
        short_idle("500ms")
    );
    let weir = TlsWeir::start(&toml).await;
    let tcp = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(target.to_string())
        .body(())
        .unwrap();
    // A handle is kept: with none left, the client would close the connection itself.
    let (answer, mut up) = client
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, false)
        .unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut down = answer.into_body();
    // Echoes at 0, 0.75, 1.5 and 2.25 s: the last two after 3 and 4.5 limits without a
    // stream open for hyper.
    for i in 0..4u8 {
        let ping = bytes::Bytes::from(vec![b'a' + i; 3]);
        up.send_data(ping.clone(), false).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), down.data())
            .await
            .unwrap_or_else(|_| panic!("echo {i} did not come back"))
            .unwrap_or_else(|| panic!("the tunnel was closed before echo {i}"))
            .unwrap_or_else(|e| panic!("the tunnel failed before echo {i}: {e}"));
        let _ = down.flow_control().release_capacity(got.len());
        assert_eq!(got, ping, "echo {i}");
        assert!(!ended.is_finished(), "the connection was closed");
        tokio::time::sleep(Duration::from_millis(750)).await;
    }
    // The client ends its side; the echo target then closes, and the tunnel ends.
    up.send_data(bytes::Bytes::new(), true).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(got)) = down.data().await {
            let _ = down.flow_control().release_capacity(got.len());
        }
    })
    .await;
    assert!(drained.is_ok(), "the tunnel did not end");
    tokio::time::timeout(Duration::from_secs(15), ended)
        .await
        .expect("Weir closes an HTTP/2 connection idle since its tunnel ended")
        .unwrap();
    drop(client);
}

/// A stream whose answer is still being sent is not idle: an intercepted HTTP/2 request whose
/// upstream answer streams a chunk every 200 ms for 3 limits comes whole, and the connection
/// then closes when idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_streamed_http2_answer_is_not_idle() {
    const CHUNKS: usize = 8;
    let ca = TestCa::new();
    let up = slow_stream_upstream(&ca, CHUNKS, Duration::from_millis(200)).await;
    let toml = format!(
        "[[upstream]]\nname = \"copilot-api\"\norigin = \"https://{HOST}\"\nconnect_to = \"{up}\"\nca_file = \"{}\"\n{}",
        ca.pem_path.display(),
        short_idle("500ms")
    );
    let weir = TlsWeir::start(&toml).await;
    let tls = tls_client::tls_stream_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &[weir.ca.cert_der().clone()],
        &[b"h2"],
    )
    .await
    .unwrap();
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    let ended = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get(format!("https://{HOST}/stream"))
        .body(())
        .unwrap();
    let (answer, _) = client
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the answer was cut");
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8_lossy(&got), stream_chunks(CHUNKS));
    tokio::time::timeout(Duration::from_secs(15), ended)
        .await
        .expect("Weir closes the connection once idle")
        .unwrap();
}

/// The body [`slow_stream_upstream`] sends: `chunk 0\n` to `chunk {n-1}\n`.
fn stream_chunks(n: usize) -> String {
    (0..n).map(|i| format!("chunk {i}\n")).collect()
}

/// An HTTPS upstream for [`HOST`] whose every answer is [`stream_chunks`], one chunk per
/// `every`; returns its address.
async fn slow_stream_upstream(ca: &TestCa, n: usize, every: Duration) -> std::net::SocketAddr {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let (cfg, _) = ca.server_config(HOST);
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |_req| async move {
                    let chunks = futures::stream::unfold(0, move |i| async move {
                        if i == n {
                            return None;
                        }
                        tokio::time::sleep(every).await;
                        let frame = Frame::data(bytes::Bytes::from(format!("chunk {i}\n")));
                        Some((Ok::<_, std::convert::Infallible>(frame), i + 1))
                    });
                    let mut resp = http::Response::new(StreamBody::new(chunks));
                    resp.headers_mut()
                        .insert("content-type", "text/event-stream".parse().unwrap());
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
            });
        }
    });
    addr
}

/// The client preface, an empty SETTINGS and a `GET {path}` HEADERS frame (stream 1, the
/// request's end) for `authority`, written by hand: a client that then reads but never answers
/// a frame (no SETTINGS ack, no PING ack).
fn h2_get_frames(authority: &str, path: &str) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    // HPACK: :method GET, :scheme https (static indexes 2, 7), then :path and :authority as
    // literals without indexing on their static names (4, 1), no Huffman.
    let mut block = vec![0x82, 0x87];
    for (index, value) in [(0x04u8, path), (0x01, authority)] {
        block.push(index);
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    }
    let len = u32::try_from(block.len()).unwrap().to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.extend_from_slice(&[0x1, 0x5, 0, 0, 0, 1]);
    out.extend_from_slice(&block);
    out
}

/// An idle intercepted HTTP/2 connection gets a GOAWAY, and h2's graceful close then waits for
/// the client to answer a PING: a client that never answers held the connection (and its
/// CONNECT slot) for as long as it kept it. It now gets one more `header_read_timeout`, then
/// Weir drops the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_client_that_never_answers_the_goaway_is_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let toml = format!("{}{}", tls::upstream_toml(&up, &ca), short_idle("500ms"));
    let weir = TlsWeir::start(&toml).await;
    let mut tls = tls_client::tls_stream_through_proxy(
        weir.handle.local_addr(),
        &format!("{HOST}:443"),
        HOST,
        &[weir.ca.cert_der().clone()],
        &[b"h2"],
    )
    .await
    .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    tls.write_all(&h2_get_frames(HOST, LIST)).await.unwrap();
    tls.flush().await.unwrap();
    // Reads everything Weir sends (its SETTINGS, the answer, the GOAWAY and PING) and answers
    // nothing, until Weir closes.
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "Weir still holds the connection of a client that did not answer its GOAWAY's PING"
    );
    assert_eq!(up.count(LIST), 1, "the request was answered");
    assert!(got.len() > 9, "Weir sent its frames: {got:?}");
}

/// The `closed_after_certificate` hint is said once a minute per host, however many clients
/// close like Node (a client retrying in a loop, Chromium's pre-connects): each is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_after_certificate_hint_is_said_once_for_many_closes() {
    let logs = captured_logs();
    let (_ca, _up, weir) = managed().await;
    let target = format!("{HOST}:443");
    let proxy = weir.handle.local_addr();
    for _ in 0..3 {
        closes_after_hello(proxy, &target).await;
    }
    let mut st = serde_json::Value::Null;
    for _ in 0..200 {
        st = weir.status().await["interception"].clone();
        if st["handshake_failures"]["closed_after_certificate"] == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        st["handshake_failures"]["closed_after_certificate"], 3,
        "{st}"
    );
    // This Weir's lines name its own CA file.
    let ca_file = weir
        .dir
        .path()
        .join("data")
        .join("ca")
        .join("weir-ca.pem")
        .display()
        .to_string();
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    let hints = logs
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(&ca_file))
        .count();
    assert_eq!(hints, 1, "one hint for three closes:\n{logs}");
}
