//! One HTTPS GET through a running Weir with TLS interception, as a client behind a proxy
//! sends it: CONNECT host:443, TLS trusting only Weir's CA (SNI = the host), then HTTP/1.1.
//! Use with `#[path = "common/through_weir.rs"] mod through_weir;`.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;

/// A TLS client that trusts only `root` (Weir's CA) and speaks HTTP/1.1, as the clients behind
/// Weir are tested.
pub fn client_config(root: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(root.to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// GET `path` on `host` through the Weir at `weir` whose CA certificate is `ca_der`, with
/// `headers`; returns the status, the headers and the body.
pub async fn get(
    weir: SocketAddr,
    ca_der: &[u8],
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Bytes) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(weir).await.unwrap();
    let target = format!("{host}:443");
    tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "CONNECT answer cut");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "CONNECT refused");
    let tls = tokio_rustls::TlsConnector::from(client_config(ca_der))
        .connect(ServerName::try_from(host.to_string()).unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    (
        parts.status.as_u16(),
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}
