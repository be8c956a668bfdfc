//! Client-side TLS test helpers: a CONNECT proxy standing in for a corporate one, a rustls
//! client that opens a CONNECT tunnel through Weir and reports the certificate it was shown,
//! and curl invocation/parsing. Used with `tests/common/tls.rs` (declared as `mod tls`).
#![allow(dead_code)]

use crate::tls::require_tool;
use rustls::pki_types::CertificateDer;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// A tiny HTTP CONNECT proxy standing in for a corporate proxy: records each CONNECT line and
/// tunnels every one of them to `target`, whatever it names.
pub struct ConnectProxy {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub async fn start(target: SocketAddr) -> ConnectProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if client.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    s.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or_default().to_string());
                    let Ok(mut up) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                });
            }
        });
        ConnectProxy { addr, seen }
    }
}

/// Opens a CONNECT tunnel to `target` through Weir at `proxy`, then a TLS session with SNI
/// `sni` trusting only `roots`; returns the certificate chain the server presented.
pub async fn tls_through_proxy(
    proxy: SocketAddr,
    target: &str,
    sni: &str,
    roots: &[CertificateDer<'static>],
) -> Result<Vec<CertificateDer<'static>>, String> {
    let tls = tls_stream_through_proxy(proxy, target, sni, roots, &[]).await?;
    Ok(tls
        .get_ref()
        .1
        .peer_certificates()
        .map(|c| c.to_vec())
        .unwrap_or_default())
}

/// [`tls_through_proxy`]'s TLS session itself, offering `alpn` (e.g. `h2`), to speak through.
pub async fn tls_stream_through_proxy(
    proxy: SocketAddr,
    target: &str,
    sni: &str,
    roots: &[CertificateDer<'static>],
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let s = connect_through_proxy(proxy, target).await?;
    tls_over(s, sni, roots, alpn).await
}

/// A CONNECT tunnel to `target` through Weir at `proxy`, its `200` read.
pub async fn connect_through_proxy(
    proxy: SocketAddr,
    target: &str,
) -> Result<tokio::net::TcpStream, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(proxy)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            return Err(format!(
                "proxy closed during CONNECT: {}",
                String::from_utf8_lossy(&head)
            ));
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(format!(
            "CONNECT refused: {}",
            String::from_utf8_lossy(&head)
        ));
    }
    Ok(s)
}

/// A TLS session over `s` with SNI `sni`, trusting only `roots`, offering `alpn`.
pub async fn tls_over<S>(
    s: S,
    sni: &str,
    roots: &[CertificateDer<'static>],
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<S>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name =
        rustls::pki_types::ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
        .map_err(|e| e.to_string())
}

/// `curl` through `proxy` trusting `cacert`, printing the body then one line
/// `code|http_version|cache-status`.
pub fn curl(proxy: &str, cacert: &Path, url: &str, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(require_tool(
        "curl",
        "apt-get install -y --no-install-recommends curl",
    ));
    c.args(["-sS", "--max-time", "30", "--proxy", proxy, "--cacert"])
        .arg(cacert)
        .args(["-w", "\n%{http_code}|%{http_version}|%header{cache-status}"])
        .args(extra)
        .arg(url);
    // Only --cacert decides what curl trusts.
    for v in [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "CURL_CA_BUNDLE",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        c.env_remove(v);
    }
    c
}

/// One curl answer: (body, status, http version, cache-status).
pub fn parse_curl(out: &std::process::Output) -> (String, u16, String, String) {
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "curl failed ({}): {}\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, meta) = text.rsplit_once('\n').unwrap();
    let mut parts = meta.splitn(3, '|');
    let code = parts.next().unwrap().parse().unwrap();
    let version = parts.next().unwrap().to_string();
    let cache = parts.next().unwrap_or_default().to_string();
    (body.to_string(), code, version, cache)
}

/// Starts Weir with `opts` and a fresh interception CA for the Copilot domain, whose
/// certificate is written to `ca_pem` (for curl's `--cacert`); returns the handle and the proxy
/// URL. `tests/real_hosts.rs` and `tests/learned_persist.rs` reach learned hosts this way.
pub async fn start_intercepting(
    mut opts: weir::EngineOptions,
    ca_pem: &Path,
) -> (weir::EngineHandle, String) {
    let ca = Arc::new(
        weir_tls::LocalCa::generate_for_owner(
            &["githubcopilot.com".to_string()],
            weir_tls::OffsetDateTime::now_utc(),
            "test",
        )
        .unwrap(),
    );
    std::fs::write(ca_pem, ca.cert_pem()).unwrap();
    opts.local_ca = Some(ca);
    let handle = weir::start(opts).await.unwrap();
    let proxy = format!("http://{}", handle.local_addr());
    (handle, proxy)
}
