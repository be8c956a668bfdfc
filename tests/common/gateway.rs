//! Gateway test parts: a self-signed certificate for 127.0.0.1, `weir serve --gateway`
//! replicas as real processes, a TLS client that speaks to the gateway as an https proxy, and
//! a loopback upstream that counts the creates it took and answers the in-doubt lookup.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The gateway's certificate (self-signed, for 127.0.0.1 and localhost) and the files the
/// `[gateway]` table names.
pub struct GatewayFiles {
    pub dir: tempfile::TempDir,
    pub cert_der: Vec<u8>,
    pub admin_token: String,
}

impl GatewayFiles {
    pub fn new() -> GatewayFiles {
        let dir = tempfile::tempdir().unwrap();
        let ck = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .unwrap();
        std::fs::write(dir.path().join("cert.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), ck.key_pair.serialize_pem()).unwrap();
        let admin_token = "admin-token-0123456789abcdef".to_string();
        std::fs::write(dir.path().join("admin-token"), format!("{admin_token}\n")).unwrap();
        std::fs::write(dir.path().join("gateway-key"), "ab".repeat(32)).unwrap();
        GatewayFiles {
            cert_der: ck.cert.der().to_vec(),
            dir,
            admin_token,
        }
    }

    /// Writes `config.toml` for an upstream at `upstream` with `[gateway]` extra lines.
    pub fn config(&self, upstream: SocketAddr, gateway_extra: &str) -> PathBuf {
        self.config_with_open_wait(upstream, "300ms", gateway_extra)
    }

    /// [`GatewayFiles::config`] with the breaker's open wait.
    pub fn config_with_open_wait(
        &self,
        upstream: SocketAddr,
        open_wait: &str,
        gateway_extra: &str,
    ) -> PathBuf {
        let text = format!(
            r#"default_upstreams = false
watch_github_status = false

[[upstream]]
name = "copilot"
origin = "http://{upstream}"

[classes.create]
per_try_timeout = "5s"
deadline = "5s"

[classes.list]
per_try_timeout = "2s"
deadline = "2s"

[breaker]
open_wait = "{open_wait}"
open_wait_max = "{open_wait}"
jitter = false

[gateway]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
tls_cert_file = "cert.pem"
tls_key_file = "key.pem"
admin_token_file = "admin-token"
{gateway_extra}
"#
        );
        let path = self.dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// One `weir serve --gateway` process.
pub struct Replica {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub data: tempfile::TempDir,
    /// What it printed at start.
    pub banner: Vec<String>,
}

impl Replica {
    pub fn start(config: &Path) -> Replica {
        Self::start_env(config, &[])
    }

    /// [`Replica::start`] with extra environment, set last (e.g. the suite's session bus and a
    /// keychain service for a replica that reads its team secrets from the keychain; without
    /// them a replica has no keychain at all).
    pub fn start_env(config: &Path, env: &[(String, String)]) -> Replica {
        let data = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(data.path().join("stderr.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["serve", "--gateway", "--config"])
            .arg(config)
            .arg("--data-dir")
            .arg(data.path().join("d"))
            .env("HOME", data.path())
            .env("XDG_CONFIG_HOME", data.path().join("cfg"))
            .env("XDG_DATA_HOME", data.path().join("xdg"))
            .env(
                "DBUS_SESSION_BUS_ADDRESS",
                "unix:path=/nonexistent/weir-test-bus",
            )
            .env("WEIR_LOG", "weir=info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd.spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut addr, mut admin) = (None, None);
        let mut seen = Vec::new();
        // The last start-up line says whether HTTPS to managed hosts is intercepted.
        while addr.is_none()
            || admin.is_none()
            || !seen
                .iter()
                .any(|l: &String| l.starts_with("weir: HTTPS to"))
        {
            let Some(Ok(line)) = lines.next() else {
                let log =
                    std::fs::read_to_string(data.path().join("stderr.log")).unwrap_or_default();
                panic!("the replica stopped before printing its addresses: {seen:?}\n{log}");
            };
            let url = |prefix: &str| {
                line.strip_prefix(prefix).and_then(|r| {
                    r.trim_start_matches("https://")
                        .split(['/', ' '])
                        .next()
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                })
            };
            addr = addr.or(url("weir: gateway listening on "));
            admin = admin.or(url("weir: gateway admin API on "));
            seen.push(line);
        }
        // Keep reading so the replica never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Replica {
            child,
            addr: addr.unwrap(),
            admin: admin.unwrap(),
            data,
            banner: seen,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("stderr.log")).unwrap_or_default()
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `weir serve --gateway` with `config` until it exits (a replica that cannot start):
/// its exit code and what it printed on stderr.
pub fn run_to_exit(config: &Path) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--gateway", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data.path())
        .env("HOME", data.path())
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/weir-test-bus",
        )
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

/// Sends one request over a fresh TLS connection to `gateway`, trusting `cert_der`. `target`
/// is absolute-form (`http://upstream/...`) to go through the gateway as a proxy, or a path
/// for the gateway itself.
pub async fn send(
    gateway: SocketAddr,
    cert_der: &[u8],
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let tcp = tokio::net::TcpStream::connect(gateway)
        .await
        .map_err(|e| e.to_string())?;
    send_on(tcp, gateway, cert_der, method, target, headers, body).await
}

/// [`send`] over a TCP connection the caller opened (and perhaps wrote a PROXY header on).
pub async fn send_on(
    tcp: tokio::net::TcpStream,
    gateway: SocketAddr,
    cert_der: &[u8],
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(cert_der.to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let uri: http::Uri = target.parse().unwrap();
    let host = uri
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_else(|| gateway.to_string());
    let mut req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

/// One session the upstream created.
#[derive(Debug, Clone)]
pub struct Created {
    pub statement: String,
    pub authorization: String,
    pub at_secs: u64,
}

#[derive(Default)]
pub struct UpState {
    pub outage: bool,
    /// The create that makes the count this holds its answer forever (its session exists).
    pub hold_at: Option<usize>,
    pub held: Option<String>,
    pub created: Vec<Created>,
    pub refused: usize,
    pub lookups: usize,
    /// How long a create takes to answer (after the session exists): a slow upstream.
    pub create_delay: std::time::Duration,
}

/// A loopback upstream: `POST /agents/swe/v1/jobs/{owner}/{repo}` creates a session (or
/// answers 503 during an outage); `GET /agents/sessions?repo_nwo=…` lists them.
pub struct CountingUpstream {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<UpState>>,
}

impl CountingUpstream {
    pub async fn start() -> CountingUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state: Arc<Mutex<UpState>> = Arc::default();
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(st, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        CountingUpstream { addr, state }
    }

    pub fn set(&self, f: impl FnOnce(&mut UpState)) {
        f(&mut self.state.lock().unwrap());
    }

    pub fn created(&self) -> Vec<Created> {
        self.state.lock().unwrap().created.clone()
    }

    pub fn held(&self) -> Option<String> {
        self.state.lock().unwrap().held.clone()
    }
}

async fn answer(
    st: Arc<Mutex<UpState>>,
    req: http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    let reply = |status: u16, body: serde_json::Value| {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    let path = req.uri().path().to_string();
    if req.method() == http::Method::POST && path.starts_with("/agents/swe/v1/jobs/") {
        let authorization = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let statement = v["problem_statement"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (id, hold, delay) = {
            let mut s = st.lock().unwrap();
            if s.outage {
                s.refused += 1;
                return reply(503, serde_json::json!({"message": "outage"}));
            }
            let at_secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            s.created.push(Created {
                statement: statement.clone(),
                authorization,
                at_secs,
            });
            let n = s.created.len();
            let hold = s.hold_at == Some(n);
            if hold {
                s.held = Some(statement);
            }
            (n, hold, s.create_delay)
        };
        tokio::time::sleep(delay).await;
        if hold {
            // The session exists upstream, but its creator never hears so.
            std::future::pending::<()>().await;
        }
        return reply(
            201,
            serde_json::json!({"id": id, "session_id": format!("s-{id}")}),
        );
    }
    if req.method() == http::Method::GET && path == "/agents/sessions" {
        let mut s = st.lock().unwrap();
        s.lookups += 1;
        // Paged with `page_number`/`page_size`, newest first, as the real list is sorted
        // (`sort=last_updated_at,desc`); a real session has no problem statement, and gh's is
        // named by it.
        let q = req.uri().query().unwrap_or("").to_string();
        let num = |k: &str| {
            q.split('&')
                .find_map(|p| p.strip_prefix(k))
                .and_then(|n| n.parse::<usize>().ok())
        };
        let (page, size) = (
            num("page_number=").unwrap_or(1),
            num("page_size=").unwrap_or(50),
        );
        let sessions: Vec<serde_json::Value> = s
            .created
            .iter()
            .enumerate()
            .rev()
            .skip((page.max(1) - 1) * size)
            .take(size)
            .map(|(i, c)| serde_json::json!({"id": format!("s-{}", i + 1), "name": c.statement, "created_at": c.at_secs, "last_updated_at": c.at_secs}))
            .collect();
        return reply(200, serde_json::json!({"sessions": sessions}));
    }
    // The job behind a session: where the in-doubt lookup reads the problem statement.
    if req.method() == http::Method::GET && path.starts_with("/agents/swe/v1/jobs/") {
        let s = st.lock().unwrap();
        let n = path
            .rsplit_once("/session/s-")
            .and_then(|(_, n)| n.parse::<usize>().ok());
        if let Some(c) = n
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| s.created.get(i))
        {
            let n = n.unwrap_or_default();
            return reply(
                200,
                serde_json::json!({"job_id": n, "session_id": format!("s-{n}"), "problem_statement": c.statement}),
            );
        }
    }
    reply(404, serde_json::json!({"message": "not found"}))
}

/// The create route both gateway suites send to.
pub const CREATE_PATH: &str = "/agents/swe/v1/jobs/octo/app";

/// Sends create number `i` (its problem statement names it) as `token` to the upstream `up`
/// through replica `r`.
pub async fn create(
    r: &Replica,
    files: &GatewayFiles,
    up: &CountingUpstream,
    i: usize,
    token: &str,
) -> Result<Answer, String> {
    let body = serde_json::json!({"problem_statement": format!("task {i}")}).to_string();
    send(
        r.addr,
        &files.cert_der,
        "POST",
        &format!("http://{}{CREATE_PATH}", up.addr),
        &[
            ("authorization", token),
            ("content-type", "application/json"),
        ],
        &body,
    )
    .await
}

/// Polls `cond` every 200 ms, at most `tries` times.
pub async fn eventually<F, Fut>(tries: u32, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..tries {
        if cond().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    false
}

/// A rustls client config trusting `root` alone (the gateway's certificate, or an
/// interception CA's).
pub fn client_trusting(
    root: rustls::pki_types::CertificateDer<'static>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}
