//! Test fixtures: a real loopback upstream that counts what it receives and can be told to be
//! slow, fail or die, and a real Weir engine on 127.0.0.1:0 in front of it.
#![allow(dead_code)]

pub mod completions;
pub mod request;

pub use request::read_request;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the fake upstream answers.
#[derive(Clone, Debug)]
pub struct Behaviour {
    pub delay: Duration,
    pub status: u16,
    pub extra_headers: Vec<(String, String)>,
    /// Body override; `None` echoes a JSON body naming the path, the count and the auth header.
    pub body: Option<String>,
    /// Bodies by path prefix, checked before `body`.
    pub path_bodies: Vec<(String, String)>,
    /// Every `n`-th request (counted over all paths since start) answers 500 (0 = never):
    /// a deterministic failure rate, e.g. 50 for 2 %.
    pub fail_one_in: usize,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            delay: Duration::ZERO,
            status: 200,
            extra_headers: vec![],
            body: None,
            path_bodies: vec![],
            fail_one_in: 0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// When it arrived (tokio's clock: virtual under `start_paused`).
    pub at: tokio::time::Instant,
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    stop: watch::Sender<bool>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap()).await
    }

    pub async fn start_on(listener: TcpListener) -> Upstream {
        let addr = listener.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(Behaviour::default()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = watch::channel(false);
        let (b, s) = (behaviour.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(x) => x, Err(_) => continue },
                    _ = stopped.changed() => return,
                };
                let (b, s) = (b.clone(), s.clone());
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| answer(req, b.clone(), s.clone()));
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! { _ = conn => {}, _ = stopped.changed() => {} }
                });
            }
        });
        Upstream {
            addr,
            behaviour,
            seen,
            stop,
        }
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.behaviour.lock().unwrap());
    }

    /// Requests received so far for `path` (path and query, exact).
    pub fn count(&self, path_and_query: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path_and_query == path_and_query)
            .count()
    }

    pub fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops accepting and closes open connections: the upstream is "down".
    pub fn kill(&self) {
        let _ = self.stop.send(true);
    }
}

async fn answer(
    req: Request<Incoming>,
    b: Arc<Mutex<Behaviour>>,
    s: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let got = read_request(req).await;
    let pq = got.path_and_query();
    let auth = got.header("authorization").unwrap_or("").to_string();
    let (n, total) = {
        let mut seen = s.lock().unwrap();
        seen.push(Seen {
            method: got.method.to_string(),
            path_and_query: pq.clone(),
            headers: got.headers,
            body: got.body,
            at: tokio::time::Instant::now(),
        });
        let n = seen.iter().filter(|x| x.path_and_query == pq).count();
        (n, seen.len())
    };
    let mut beh = b.lock().unwrap().clone();
    if beh.fail_one_in > 0 && total % beh.fail_one_in == 0 {
        beh.status = 500;
    }
    if !beh.delay.is_zero() {
        tokio::time::sleep(beh.delay).await;
    }
    let by_path = beh
        .path_bodies
        .iter()
        .find(|(p, _)| pq.starts_with(p.as_str()))
        .map(|(_, b)| b.clone());
    let body = by_path
        .or_else(|| beh.body.clone())
        .unwrap_or_else(|| serde_json::json!({"path": pq, "n": n, "auth": auth}).to_string());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = StatusCode::from_u16(beh.status).unwrap();
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    for (k, v) in &beh.extra_headers {
        resp.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    Ok(resp)
}

pub struct Weir {
    pub handle: weir::EngineHandle,
    pub dir: tempfile::TempDir,
}

impl Weir {
    /// Starts Weir on 127.0.0.1:0 with `extra` TOML appended after `[[upstream]]` entries
    /// for each given origin (named `up0`, `up1`, ...).
    pub async fn start(origins: &[&str], extra: &str) -> Weir {
        Self::start_with_top("", origins, extra).await
    }

    /// [`Weir::start`] with top-level keys `top` (e.g. `allow_private_targets = true`), which
    /// must come before the `[[upstream]]` tables.
    pub async fn start_with_top(top: &str, origins: &[&str], extra: &str) -> Weir {
        Self::start_full(top, tempfile::tempdir().unwrap(), origins, extra).await
    }

    /// [`Weir::start`] with `dir` as the data dir (prepared by the test).
    pub async fn start_in(dir: tempfile::TempDir, origins: &[&str], extra: &str) -> Weir {
        Self::start_full("", dir, origins, extra).await
    }

    async fn start_full(top: &str, dir: tempfile::TempDir, origins: &[&str], extra: &str) -> Weir {
        let mut toml = format!("default_upstreams = false\nlisten = \"127.0.0.1:0\"\n{top}");
        // Tests never poll the real githubstatus.com; the watcher's own tests set [status].
        if !extra.contains("[status]") && !extra.contains("watch_github_status") {
            toml.push_str("watch_github_status = false\n");
        }
        for (i, o) in origins.iter().enumerate() {
            toml.push_str(&format!(
                "[[upstream]]\nname = \"up{i}\"\norigin = \"{o}\"\n"
            ));
        }
        toml.push_str(extra);
        // Tests never read this machine's NetworkManager (a metered laptop would change what
        // policy does); tests/network.rs points Weir at its own bus.
        if !extra.contains("[network]") {
            toml.push_str("\n[network]\ndetect_os = false\n");
        }
        let settings = weir::config::parse_str(&toml, "test.toml").expect("test config");
        let handle = weir::start(weir::EngineOptions::new(settings, dir.path().to_path_buf()))
            .await
            .expect("weir starts");
        Weir { handle, dir }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.handle.local_addr())
    }

    /// A real HTTP client that uses Weir as its proxy, sending `Authorization: token <who>`.
    pub fn client(&self, who: &str) -> reqwest::Client {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("authorization", format!("token {who}").parse().unwrap());
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(self.proxy_url()).unwrap())
            .default_headers(h)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    }

    pub async fn status(&self) -> serde_json::Value {
        let url = format!("{}/_weir/api/status", self.proxy_url());
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }
}

/// Whether the keychain of data dir `data` can be used (under `scripts/with-keychain.sh`); says
/// how to get one when it cannot, for tests that skip without it.
pub fn has_keychain(data: &std::path::Path) -> bool {
    let ok = weir::secrets::Namespace::for_data_dir(data)
        .keychain()
        .probe()
        .is_ok();
    if !ok {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
    }
    ok
}

/// A client that sends everything through the Weir of `h` with `Authorization: token TOKEN`.
pub fn proxied_with_token(h: &weir::EngineHandle, token: &str) -> reqwest::Client {
    let mut hm = reqwest::header::HeaderMap::new();
    hm.insert("authorization", format!("token {token}").parse().unwrap());
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", h.local_addr())).unwrap())
        .default_headers(hm)
        .build()
        .unwrap()
}

pub async fn with_secret(req: reqwest::RequestBuilder, secret: &str) -> reqwest::Response {
    req.header("x-weir-secret", secret).send().await.unwrap()
}

/// Polls the engine's typed status until `cond` holds (at most `tries` times, 20 ms apart).
pub async fn eventually_status(
    handle: &weir::EngineHandle,
    tries: u32,
    cond: impl Fn(&weir::status::StatusSnapshot) -> bool,
) -> bool {
    for _ in 0..tries {
        if cond(&handle.status().await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond(&handle.status().await)
}

pub async fn eventually(tries: u32, mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// Runs `weir serve` after `setup` (shell, may be empty) in a private mount namespace
/// (`unshare -rm`); returns the child and the address it printed first.
pub fn serve_in_mount_namespace(
    setup: &str,
    cfg: &std::path::Path,
    data: &std::path::Path,
) -> (std::process::Child, String) {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let script = format!("{setup}exec \"$0\" serve --config \"$1\" --data-dir \"$2\"");
    let mut child = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_weir"))
        .arg(cfg)
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare (util-linux) is needed for this test");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .next()
        .expect("weir serve printed its address")
        .unwrap();
    let addr = first.rsplit("http://").next().unwrap().to_string();
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Runs `weir serve --config cfg --data-dir data` as a child process; returns it and the control
/// secret it printed (the dashboard link's `#secret=`). Its output keeps being read, so a full
/// pipe never blocks it and a dropped one never fails its next line.
pub fn serve_with_secret(
    cfg: &std::path::Path,
    data: &std::path::Path,
) -> (std::process::Child, String) {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--print-secret", "--config"])
        .arg(cfg)
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let _ = lines.next();
    let dash = lines.next().unwrap().unwrap();
    let secret = dash.rsplit("#secret=").next().unwrap().to_string();
    std::thread::spawn(move || for _ in lines {});
    (child, secret)
}
