//! TLS test fixtures: a test CA made with rcgen, a real HTTPS upstream (hyper, HTTP/1.1 and
//! HTTP/2 by ALPN) with a certificate for `api.githubcopilot.com` signed by it, a Weir engine
//! that manages that origin through `connect_to` + `ca_file` with an in-memory local CA, and
//! helpers that insist the external tools (curl, node, chromium, certutil) exist.
#![allow(dead_code)]

// Each fake included without `common` brings the one request reader along; a test that
// includes two of them has two copies of this small module, which is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "request.rs"]
mod request;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use request::read_request;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

pub const HOST: &str = "api.githubcopilot.com";

/// A CA standing in for the public web PKI, trusted by Weir only through `ca_file`.
pub struct TestCa {
    pub dir: tempfile::TempDir,
    pub pem_path: PathBuf,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "Weir test upstream CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pem_path = dir.path().join("upstream-ca.pem");
        std::fs::write(&pem_path, cert.pem()).unwrap();
        TestCa {
            dir,
            pem_path,
            cert,
            key,
        }
    }

    /// The CA certificate.
    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A leaf for `names` (host names or IP addresses) signed by this CA, written as PEM to
    /// `{stem}.pem` and `{stem}-key.pem` in `dir` (for servers that read files: nats-server,
    /// PostgreSQL).
    pub fn issue_files(&self, names: &[&str], dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (cert, key_path) = (
            dir.join(format!("{stem}.pem")),
            dir.join(format!("{stem}-key.pem")),
        );
        std::fs::write(&cert, leaf.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert, key_path)
    }

    /// A leaf for `host` and a rustls server config serving it with ALPN h2 and http/1.1.
    pub fn server_config(
        &self,
        host: &str,
    ) -> (Arc<rustls::ServerConfig>, CertificateDer<'static>) {
        self.server_config_for(&[host])
    }

    /// The same for one leaf naming every host in `names` (the first is its common name).
    pub fn server_config_for(
        &self,
        names: &[&str],
    ) -> (Arc<rustls::ServerConfig>, CertificateDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let der = leaf.der().clone();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        (Arc::new(cfg), der)
    }
}

/// One request the TLS upstream received.
#[derive(Debug, Clone)]
pub struct SeenTls {
    pub path_and_query: String,
    pub version: http::Version,
    pub host: String,
}

/// A real HTTPS server answering `{"path": ..., "n": ...}` after `delay`.
pub struct TlsUpstream {
    pub addr: SocketAddr,
    pub cert_der: CertificateDer<'static>,
    pub seen: Arc<Mutex<Vec<SeenTls>>>,
    pub delay: Arc<Mutex<Duration>>,
}

impl TlsUpstream {
    pub async fn start(ca: &TestCa, host: &str) -> TlsUpstream {
        let (cfg, cert_der) = ca.server_config(host);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<SeenTls>>> = Arc::default();
        let delay: Arc<Mutex<Duration>> = Arc::default();
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        let (s, d) = (seen.clone(), delay.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, s, d) = (acceptor.clone(), s.clone(), d.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req| answer(req, s.clone(), d.clone()));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        TlsUpstream {
            addr,
            cert_der,
            seen,
            delay,
        }
    }

    pub fn count(&self, path_and_query: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path_and_query == path_and_query)
            .count()
    }

    pub fn seen(&self) -> Vec<SeenTls> {
        self.seen.lock().unwrap().clone()
    }

    pub fn set_delay(&self, d: Duration) {
        *self.delay.lock().unwrap() = d;
    }
}

async fn answer(
    req: Request<Incoming>,
    s: Arc<Mutex<Vec<SeenTls>>>,
    d: Arc<Mutex<Duration>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let got = read_request(req).await;
    let pq = got.path_and_query();
    let host = got.host();
    let n = {
        let mut seen = s.lock().unwrap();
        seen.push(SeenTls {
            path_and_query: pq.clone(),
            version: got.version,
            host,
        });
        seen.iter().filter(|x| x.path_and_query == pq).count()
    };
    let delay = *d.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let body = serde_json::json!({"path": pq, "n": n}).to_string();
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    Ok(resp)
}

/// The `[[upstream]]` TOML that manages `https://api.githubcopilot.com` via the fixture.
pub fn upstream_toml(up: &TlsUpstream, ca: &TestCa) -> String {
    format!(
        "[[upstream]]\nname = \"copilot-api\"\norigin = \"https://{HOST}\"\nconnect_to = \"{}\"\nca_file = \"{}\"\n",
        up.addr,
        ca.pem_path.display()
    )
}

/// A Weir engine on 127.0.0.1:0 with an in-memory local CA (no keychain) for `hosts`.
pub struct TlsWeir {
    pub handle: weir::EngineHandle,
    pub dir: tempfile::TempDir,
    pub ca: Arc<weir_tls::LocalCa>,
    /// Weir's CA certificate, for `curl --cacert`, `NODE_EXTRA_CA_CERTS`, NSS.
    pub ca_pem: PathBuf,
}

impl TlsWeir {
    pub async fn start(toml_body: &str) -> TlsWeir {
        let toml = format!("default_upstreams = false\nlisten = \"127.0.0.1:0\"\n{toml_body}");
        let settings = weir::config::parse_str(&toml, "test.toml").expect("test config");
        let ca = Arc::new(
            weir_tls::LocalCa::generate_for_owner(
                &settings.intercept_hosts(),
                weir_tls::OffsetDateTime::now_utc(),
                "test",
            )
            .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let ca_pem = dir.path().join("weir-ca.pem");
        std::fs::write(&ca_pem, ca.cert_pem()).unwrap();
        let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
        opts.local_ca = Some(ca.clone());
        let handle = weir::start(opts).await.expect("weir starts");
        TlsWeir {
            handle,
            dir,
            ca,
            ca_pem,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.handle.local_addr())
    }

    pub async fn status(&self) -> serde_json::Value {
        let url = format!("{}/_weir/api/status", self.proxy_url());
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }
}

/// The full path of `tool`, or a panic that says how to install it: tests that need a real
/// client must fail loudly, never skip.
pub fn require_tool(tool: &str, install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{tool}` is not installed; this test needs it. Install: {install}")
        })
}

/// SHA-256 of a DER certificate, colon-separated upper-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Runs a blocking command off the async worker threads and returns its output.
pub async fn output(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("command runs"))
        .await
        .unwrap()
}

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Sends `GET url` on `client` and reads the whole answer; returns its status. `client` itself
/// is kept (a clone sends): with no handle left, h2 would close the connection on its own.
pub async fn h2_get(client: &mut h2::client::SendRequest<bytes::Bytes>, url: &str) -> u16 {
    let req = http::Request::get(url).body(()).unwrap();
    let (answer, _) = client
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let answer = answer.await.unwrap();
    let status = answer.status().as_u16();
    let mut body = answer.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    status
}

/// Asserts that the server closed `client`'s connection with a GOAWAY, not a bare close: a new
/// request is refused for the peer's GOAWAY (a bare close refuses it for an I/O error).
pub async fn assert_told_goaway(client: h2::client::SendRequest<bytes::Bytes>) {
    let refused = client.ready().await.err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|e| e.is_go_away() && e.is_remote()),
        "closed without a GOAWAY: {refused:?}"
    );
}
