//! A fake GitHub (`/user` for two accounts and several tokens of one) and a fake Copilot API
//! (per-account session lists, creates), on real loopback listeners, with Weir in front; and
//! the leak check (no raw token in the data dir, the logs or any answer).
#![allow(dead_code)]

// Each fake included without `common` brings the one request reader along; a test that
// includes two of them has two copies of this small module, which is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "../common/request.rs"]
mod request;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use request::read_request;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;

// --- the accounts and their tokens -------------------------------------------------------------

pub struct Tok {
    pub token: &'static str,
    pub id: u64,
    pub login: &'static str,
    pub scopes: &'static str,
}

/// VS Code's GitHub session (OAuth app token), `gh auth login` (another OAuth app), and a
/// browser-side classic PAT: three surfaces of one account, all granting `repo`.
pub const ALICE_VSCODE: &str = "gho_AliceVsCode000000000000000000001";
pub const ALICE_GH: &str = "gho_AliceGhCli0000000000000000000002";
pub const ALICE_BROWSER: &str = "ghp_AliceBrowser00000000000000000003";
pub const ALICE_PAT: &str = "github_pat_11AliceFineGrained000000004";
pub const ALICE_APP: &str = "ghu_AliceAppUser00000000000000000005";
pub const ALICE_PUBLIC: &str = "gho_AlicePublicOnly00000000000000006";
pub const BOB: &str = "gho_BobVsCode00000000000000000000007";
/// Alice's second VS Code session (another machine): the same OAuth app as `ALICE_VSCODE`.
pub const ALICE_VSCODE_2: &str = "gho_AliceVsCodeLaptop2000000000000008";

/// The OAuth app GitHub names in `X-OAuth-Client-Id` on `/user` for an OAuth token: VS Code's
/// GitHub authentication and the GitHub CLI are different apps (their public client ids).
pub fn client_id_of(token: &str) -> Option<&'static str> {
    match token {
        ALICE_VSCODE | ALICE_VSCODE_2 | ALICE_PUBLIC | BOB => Some("01ab8ac9400c4e429b23"),
        ALICE_GH => Some("178c6fc778ccc68e1d6a"),
        _ => None,
    }
}

pub const TOKENS: [Tok; 8] = [
    Tok {
        token: ALICE_VSCODE,
        id: 1001,
        login: "alice",
        scopes: "read:user, repo, user:email, workflow",
    },
    Tok {
        token: ALICE_GH,
        id: 1001,
        login: "alice",
        scopes: "gist, read:org, repo, workflow",
    },
    Tok {
        token: ALICE_BROWSER,
        id: 1001,
        login: "alice",
        scopes: "repo, read:org",
    },
    Tok {
        token: ALICE_PAT,
        id: 1001,
        login: "alice",
        scopes: "",
    },
    Tok {
        token: ALICE_APP,
        id: 1001,
        login: "alice",
        scopes: "",
    },
    Tok {
        token: ALICE_PUBLIC,
        id: 1001,
        login: "alice",
        scopes: "public_repo",
    },
    Tok {
        token: BOB,
        id: 2002,
        login: "bob",
        scopes: "repo, workflow",
    },
    Tok {
        token: ALICE_VSCODE_2,
        id: 1001,
        login: "alice",
        scopes: "read:user, repo, user:email, workflow",
    },
];

pub const VSCODE_UA: &str = "Visual Studio Code/1.96.0 (copilot-chat/0.23.0)";
pub const GH_UA: &str = "GitHub CLI 2.63.0";
pub const BROWSER_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0";

/// Sessions each account has in the fake Copilot API.
pub const SESSIONS: usize = 30;

pub fn token_of(auth: &str) -> &str {
    auth.strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("token "))
        .unwrap_or(auth)
}

// --- the fake GitHub (api.github.com) and Copilot API (api.githubcopilot.com) -------------------

#[derive(Clone, Debug)]
pub struct Hit {
    pub host: &'static str,
    pub method: String,
    pub path_and_query: String,
    pub token: String,
}

#[derive(Default)]
pub struct FakeState {
    pub seen: Vec<Hit>,
    /// Tokens the fake now answers 401 to, everywhere.
    pub revoked: HashSet<String>,
    /// Session lists answer 503 to these tokens (an in-doubt lookup with them cannot read).
    pub lists_down_for: HashSet<String>,
    /// How long a create takes to be answered.
    pub post_delay: Duration,
    /// Creates are refused with this status (nothing created): an outage.
    pub post_status: Option<u16>,
    /// Problem statements created, per account id, with their RFC 3339 creation time.
    pub created: HashMap<u64, Vec<(String, String)>>,
}

pub struct Fake {
    pub github: SocketAddr,
    pub copilot: SocketAddr,
    pub state: Arc<Mutex<FakeState>>,
}

impl Fake {
    pub async fn start() -> Fake {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let github = serve("github", state.clone()).await;
        let copilot = serve("copilot", state.clone()).await;
        Fake {
            github,
            copilot,
            state,
        }
    }

    pub fn hits(&self, host: &str, path_prefix: &str) -> Vec<Hit> {
        let s = self.state.lock().unwrap();
        s.seen
            .iter()
            .filter(|h| h.host == host && h.path_and_query.starts_with(path_prefix))
            .cloned()
            .collect()
    }

    pub fn list_calls(&self) -> Vec<Hit> {
        self.hits("copilot", "/agents/sessions?")
    }

    pub fn user_calls(&self) -> Vec<Hit> {
        self.hits("github", "/user")
    }

    /// Weir's config with both fakes as the upstreams it manages.
    pub fn config(&self, extra: &str) -> String {
        format!(
            "[[upstream]]\nname = \"copilot-api\"\norigin = \"http://{}\"\n\
             [[upstream]]\nname = \"github-api\"\norigin = \"http://{}\"\n{extra}",
            self.copilot, self.github
        )
    }
}

pub async fn serve(host: &'static str, state: Arc<Mutex<FakeState>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| answer(host, req, state.clone()));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

pub fn page_body(login: &str, size: usize, extra: &[(String, String)]) -> serde_json::Value {
    let mut all: Vec<serde_json::Value> = extra
        .iter()
        .map(|(p, at)| serde_json::json!({"id": format!("{login}-new"), "problem_statement": p, "created_at": at, "owner": login}))
        .collect();
    all.extend((0..SESSIONS).map(|i| {
        serde_json::json!({"id": format!("{login}-s{i}"), "owner": login, "state": "completed",
                           "problem_statement": format!("task {i} of {login}")})
    }));
    let more = all.len() > size;
    all.truncate(size);
    serde_json::json!({"sessions": all, "has_next_page": more})
}

pub async fn answer(
    host: &'static str,
    req: Request<Incoming>,
    state: Arc<Mutex<FakeState>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let got = read_request(req).await;
    let pq = got.path_and_query();
    let auth = got.header("authorization").unwrap_or("");
    let token = token_of(auth).to_string();
    let (revoked, delay, lists_down, post_status) = {
        let mut s = state.lock().unwrap();
        s.seen.push(Hit {
            host,
            method: got.method.to_string(),
            path_and_query: pq.clone(),
            token: token.clone(),
        });
        (
            s.revoked.contains(&token),
            s.post_delay,
            s.lists_down_for.contains(&token),
            s.post_status,
        )
    };
    let who = TOKENS
        .iter()
        .find(|t| t.token == token)
        .filter(|_| !revoked);
    let reply = |status: u16, v: serde_json::Value| {
        let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
        *r.status_mut() = StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    };
    let Some(who) = who else {
        return Ok(reply(
            401,
            serde_json::json!({"message": "Bad credentials"}),
        ));
    };
    if host == "github" {
        if got.uri.path() != "/user" {
            return Ok(reply(404, serde_json::json!({"message": "Not Found"})));
        }
        let mut r = reply(
            200,
            serde_json::json!({"id": who.id, "login": who.login, "type": "User"}),
        );
        if !who.scopes.is_empty() {
            r.headers_mut()
                .insert("x-oauth-scopes", who.scopes.parse().unwrap());
        }
        if let Some(app) = client_id_of(who.token) {
            r.headers_mut()
                .insert("x-oauth-client-id", app.parse().unwrap());
        }
        return Ok(r);
    }
    if let (true, Some(status)) = (got.method == http::Method::POST, post_status) {
        // Refused as slowly as it would have been made (`post_delay`).
        tokio::time::sleep(delay).await;
        return Ok(reply(status, serde_json::json!({"message": "unavailable"})));
    }
    if got.method == http::Method::POST {
        // Made as soon as it arrives, even if the answer never gets back to Weir.
        let v: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
        let statement = v["problem_statement"].as_str().unwrap_or("").to_string();
        let at = weir::time_fmt::rfc3339(std::time::SystemTime::now());
        state
            .lock()
            .unwrap()
            .created
            .entry(who.id)
            .or_default()
            .push((statement, at));
        tokio::time::sleep(delay).await;
        return Ok(reply(201, serde_json::json!({"job_id": "job-1"})));
    }
    // The job behind a session: where the in-doubt lookup reads the problem statement.
    if let Some((_, sid)) = got
        .uri
        .path()
        .strip_prefix("/agents/swe/v1/jobs/")
        .and_then(|r| r.split_once("/session/"))
    {
        if lists_down {
            return Ok(reply(503, serde_json::json!({"message": "unavailable"})));
        }
        let created = state
            .lock()
            .unwrap()
            .created
            .get(&who.id)
            .cloned()
            .unwrap_or_default();
        return Ok(match created.last() {
            Some((p, at)) if sid == format!("{}-new", who.login) => reply(
                200,
                serde_json::json!({"job_id": "job-1", "session_id": sid, "problem_statement": p, "created_at": at}),
            ),
            _ => reply(404, serde_json::json!({"message": "Not Found"})),
        });
    }
    if got.uri.path() == "/agents/sessions" {
        if lists_down {
            return Ok(reply(503, serde_json::json!({"message": "unavailable"})));
        }
        let size = got
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .find_map(|p| p.strip_prefix("page_size="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(SESSIONS);
        let created = state
            .lock()
            .unwrap()
            .created
            .get(&who.id)
            .cloned()
            .unwrap_or_default();
        return Ok(reply(200, page_body(who.login, size, &created)));
    }
    Ok(reply(
        200,
        serde_json::json!({"id": got.uri.path(), "owner": who.login}),
    ))
}

// --- Weir, clients and the leak check --------------------------------------------------------

/// Everything Weir logs (at debug) during these tests, to grep for tokens.
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Capture(w.clone()))
            .try_init();
        buf
    })
    .clone()
}

pub struct Capture(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub struct Weir {
    pub handle: weir::EngineHandle,
    pub dir: tempfile::TempDir,
    /// Every body Weir answered (proxied and control API), for the leak check.
    pub answers: Mutex<Vec<u8>>,
}

pub async fn start(fake: &Fake, extra: &str) -> Weir {
    start_in(fake, extra, tempfile::tempdir().unwrap()).await
}

/// [`start`] on a given data dir (a restart keeps it).
pub async fn start_in(fake: &Fake, extra: &str, dir: tempfile::TempDir) -> Weir {
    captured_logs();
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n{}",
        fake.config(extra)
    );
    let settings = weir::config::parse_str(&toml, "test.toml").expect("test config");
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().to_path_buf()))
        .await
        .expect("weir starts");
    Weir {
        handle,
        dir,
        answers: Mutex::new(Vec::new()),
    }
}

impl Weir {
    /// A control-API read without the control secret: the body as text, and the first
    /// `status` event of the event stream.
    pub async fn open_reads(&self) -> (String, String, String) {
        let base = self.handle.base_url();
        let get = |path: &str| reqwest::get(format!("{base}{path}"));
        let status = get("/_weir/api/status")
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let metrics = get("/metrics").await.unwrap().text().await.unwrap();
        let mut events = get("/_weir/api/events").await.unwrap();
        let mut seen = String::new();
        while !seen.contains("event: status\n")
            || !seen[seen.find("event: status\n").unwrap()..].contains("\n\n")
        {
            let chunk = events
                .chunk()
                .await
                .unwrap()
                .expect("the stream stays open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        (status, metrics, seen)
    }

    pub fn client(&self, token: &str, ua: &str) -> reqwest::Client {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("authorization", format!("token {token}").parse().unwrap());
        h.insert("user-agent", ua.parse().unwrap());
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(format!("http://{}", self.handle.local_addr())).unwrap())
            .default_headers(h)
            .build()
            .unwrap()
    }

    /// GET through Weir; the status and the JSON body (kept for the leak check).
    pub async fn get(&self, c: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
        let r = c.get(url).send().await.unwrap();
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        self.answers.lock().unwrap().extend_from_slice(&bytes);
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    /// A control-API read with the control secret (logins are shown only with it).
    pub async fn control(&self, path: &str) -> String {
        let text = reqwest::Client::new()
            .get(format!("{}{path}", self.handle.base_url()))
            .header("x-weir-secret", self.handle.control_secret())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        self.answers
            .lock()
            .unwrap()
            .extend_from_slice(text.as_bytes());
        text
    }

    /// Waits until `n` credentials are mapped to accounts (resolution is in the background).
    pub async fn resolved(&self, n: u64) -> weir::status::StatusSnapshot {
        for _ in 0..250 {
            let s = self.handle.status().await;
            if s.identity
                .accounts
                .iter()
                .map(|a| a.credentials)
                .sum::<u64>()
                >= n
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "credentials were not resolved: {:?}",
            self.handle.status().await.identity
        );
    }

    /// No raw token in the data dir, the logs, the status, the metrics or any answer.
    pub async fn assert_no_token_anywhere(&self) {
        let status = self.control("/_weir/api/status").await;
        let metrics = self.control("/metrics").await;
        assert!(status.contains("\"identity\""), "{status}");
        // The account table is made by the first mapping saved (off the request path): once
        // an account is resolved it comes, and it never comes without one.
        let resolved = !self.handle.status().await.identity.accounts.is_empty();
        let table = self.dir.path().join("accounts.sqlite3");
        for _ in 0..250 {
            if !resolved || table.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut files = Vec::new();
        let mut dirs = vec![self.dir.path().to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    files.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
                }
            }
        }
        let on_disk = files.iter().any(|(p, _)| p.ends_with("accounts.sqlite3"));
        if resolved {
            assert!(on_disk, "an account was resolved: its table is on disk");
        } else if on_disk {
            // Resolved while the files were read: the status says so now.
            assert!(
                !self.handle.status().await.identity.accounts.is_empty(),
                "an account table with no account resolved"
            );
        }
        let logs = captured_logs().lock().unwrap().clone();
        // The capture works (else the check below would prove nothing): Weir's own debug
        // lines about credentials are in it.
        assert!(contains(&logs, "credential"), "no Weir logs were captured");
        let answers = self.answers.lock().unwrap().clone();
        for t in &TOKENS {
            // The distinctive part of the token (no prefix), so a partial leak is caught too.
            let needle = &t.token[t.token.find('_').unwrap() + 1..];
            for (p, bytes) in &files {
                assert!(!contains(bytes, needle), "token in {}", p.display());
            }
            assert!(!contains(&logs, needle), "token in the logs");
            assert!(!contains(&answers, needle), "token in an answer");
            assert!(!status.contains(needle) && !metrics.contains(needle));
        }
    }
}

pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

pub fn list_url(fake: &Fake, size: usize) -> String {
    format!(
        "http://{}/agents/sessions?page_size={size}&sort=updated_at",
        fake.copilot
    )
}
