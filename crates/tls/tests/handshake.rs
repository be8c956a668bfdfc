//! Real TLS on loopback: a tokio-rustls server using `LeafIssuer::server_config` and a rustls
//! client that trusts only Weir's CA.

mod common;

use std::sync::Arc;

use common::managed;
use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use weir_tls::{LeafIssuer, LocalCa, OffsetDateTime};

struct Server {
    addr: std::net::SocketAddr,
    /// The server task's result: the ALPN protocol it negotiated, or the handshake error.
    result: tokio::task::JoinHandle<Result<Vec<u8>, std::io::Error>>,
}

/// Accepts one TLS connection, echoes one 4-byte message back with "ok:" prefixed.
async fn serve_once(issuer: &LeafIssuer) -> Server {
    let acceptor = TlsAcceptor::from(issuer.server_config().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let result = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        let mut tls = acceptor.accept(tcp).await?;
        let alpn = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await?;
        tls.write_all(b"ok:").await?;
        tls.write_all(&buf).await?;
        tls.shutdown().await?;
        Ok(alpn)
    });
    Server { addr, result }
}

fn client_trusting(ca: &LocalCa) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

fn new_issuer() -> LeafIssuer {
    // The handshake verifies against the real clock, so the CA is dated now.
    let ca = LocalCa::generate_for_owner(&managed(), OffsetDateTime::now_utc(), "tester").unwrap();
    LeafIssuer::new(Arc::new(ca))
}

#[tokio::test]
async fn managed_host_handshake_succeeds_with_h2() {
    let issuer = new_issuer();
    let server = serve_once(&issuer).await;
    let connector = client_trusting(issuer.ca());

    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("api.githubcopilot.com").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    tls.write_all(b"ping").await.unwrap();
    let mut reply = Vec::new();
    tls.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply, b"ok:ping");

    assert_eq!(server.result.await.unwrap().unwrap(), b"h2");
    assert_eq!(issuer.issued_count(), 1);
}

#[tokio::test]
async fn unmanaged_host_handshake_is_refused_by_the_server() {
    let issuer = new_issuer();
    let server = serve_once(&issuer).await;
    let connector = client_trusting(issuer.ca());

    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("evil.example").unwrap();
    let err = connector.connect(name, tcp).await.unwrap_err();
    let tls_err = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("expected a rustls error, got {err:?}"));
    assert_eq!(
        tls_err,
        &rustls::Error::AlertReceived(AlertDescription::AccessDenied)
    );

    let server_err = server.result.await.unwrap().unwrap_err();
    assert!(
        server_err
            .to_string()
            .contains("no server certificate chain resolved"),
        "{server_err}"
    );
    assert_eq!(issuer.issued_count(), 0);
}

#[tokio::test]
async fn client_trusting_another_ca_rejects_the_leaf() {
    let issuer = new_issuer();
    let server = serve_once(&issuer).await;
    let stranger =
        LocalCa::generate_for_owner(&managed(), OffsetDateTime::now_utc(), "other").unwrap();
    let connector = client_trusting(&stranger);

    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("api.github.com").unwrap();
    let err = connector.connect(name, tcp).await.unwrap_err();
    let tls_err = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(tls_err, Some(rustls::Error::InvalidCertificate(_))),
        "{err:?}"
    );
    assert!(server.result.await.unwrap().is_err());
}
