//! A real loopback fake of GitHub's agent APIs over TLS, answering in the shapes the real
//! clients parse (templates from `tests/corpus/answers.json`): sessions paged by
//! `page_number`/`page_size` (never `has_next_page`), a session, its logs, the jobs API
//! (create / by id / by session / enabled), PR resources, custom agents, the agent's models, the
//! Copilot token and user, the Copilot CLI's start-up calls and the MCP server. One certificate
//! names every host, so Weir reaches each real host name through `connect_to` + `ca_file`. It
//! keeps a request log (host, method, path and query, headers, body, route) and can be told to
//! fail (5xx, 429 + Retry-After, latency).
//! Use with `#[path = "common/corpus.rs"] mod corpus;` declared next to it.
#![allow(dead_code)]

use crate::corpus::Answers;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The hosts the real clients use: the public Copilot API, the per-plan hosts a token's
/// `endpoints.api` names, and api.github.com.
pub const HOSTS: [&str; 5] = [
    "api.github.com",
    "api.githubcopilot.com",
    "api.individual.githubcopilot.com",
    "api.business.githubcopilot.com",
    "api.enterprise.githubcopilot.com",
];

/// The per-plan host the fake's token and user answers name in `endpoints.api`.
pub const PLAN_HOST: &str = "api.individual.githubcopilot.com";

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Logged {
    pub host: String,
    pub method: String,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// The fake's name for the route (`sessions.list`, `jobs.create`, …).
    pub route: &'static str,
}

impl Logged {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A way to fail, for `times` requests (`None`: until cleared) on `route` (`None`: every route).
#[derive(Debug, Clone)]
pub struct Fault {
    pub route: Option<&'static str>,
    pub kind: FaultKind,
    pub times: Option<usize>,
}

#[derive(Debug, Clone)]
pub enum FaultKind {
    /// Answer this status (5xx) with a GitHub-style `{"message": …}` body.
    Status(u16),
    /// 429 with `Retry-After: secs`.
    RateLimited { retry_after_secs: u64 },
    /// Wait, then answer normally.
    Delay(Duration),
}

struct Store {
    sessions: Vec<Value>,
    jobs: Vec<Value>,
    next: u64,
}

struct State {
    answers: Answers,
    /// Credentials seen by `GET /user`, in order: the account id is the index + 1001.
    accounts: Mutex<Vec<String>>,
    log: Mutex<Vec<Logged>>,
    faults: Mutex<Vec<Fault>>,
    store: Mutex<Store>,
    /// `https://` + [`PLAN_HOST`]: what token and user answers announce.
    api_origin: String,
}

pub struct AgentsApi {
    pub addr: SocketAddr,
    /// The fake's CA (PEM), for Weir's `ca_file` and a client's trust store.
    pub ca_pem: PathBuf,
    pub ca_der: CertificateDer<'static>,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Drop for AgentsApi {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl AgentsApi {
    /// Serves every host in [`HOSTS`] on 127.0.0.1:0, with one session in the store.
    pub async fn start() -> AgentsApi {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap()).await
    }

    pub async fn start_on(listener: TcpListener) -> AgentsApi {
        let dir = tempfile::tempdir().unwrap();
        let (tls, ca_der, ca_pem) = certificates(&dir);
        let addr = listener.local_addr().unwrap();
        let answers = Answers::load();
        let first = answers.body("session");
        // The job behind the corpus's session, so that the corpus's job calls find it.
        let job = answers.body("job");
        let state = Arc::new(State {
            answers,
            accounts: Mutex::default(),
            log: Mutex::default(),
            faults: Mutex::default(),
            store: Mutex::new(Store {
                sessions: vec![first],
                jobs: vec![job],
                next: 1,
            }),
            api_origin: format!("https://{PLAN_HOST}"),
        });
        let (stop, stopped) = watch::channel(false);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let st = state.clone();
        tokio::spawn(async move {
            let mut stopped_accept = stopped.clone();
            loop {
                let (tcp, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(x) => x, Err(_) => continue },
                    _ = stopped_accept.changed() => return,
                };
                let (acceptor, st, mut stopped) = (acceptor.clone(), st.clone(), stopped.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req| handle(req, st.clone()));
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(tls), svc);
                    tokio::select! { _ = conn => {}, _ = stopped.changed() => {} }
                });
            }
        });
        AgentsApi {
            addr,
            ca_pem,
            ca_der,
            state,
            stop,
            _dir: dir,
        }
    }

    /// Everything received so far, in order.
    pub fn log(&self) -> Vec<Logged> {
        self.state.log.lock().unwrap().clone()
    }

    /// Requests received on the fake's route `route`.
    pub fn count(&self, route: &str) -> usize {
        self.state
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.route == route)
            .count()
    }

    /// Requests received for exactly this host, method and path-and-query.
    pub fn count_exact(&self, host: &str, method: &str, path_and_query: &str) -> usize {
        self.state
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.host == host && l.method == method && l.path_and_query == path_and_query)
            .count()
    }

    pub fn total(&self) -> usize {
        self.state.log.lock().unwrap().len()
    }

    pub fn fail(&self, fault: Fault) {
        self.state.faults.lock().unwrap().push(fault);
    }

    pub fn heal(&self) {
        self.state.faults.lock().unwrap().clear();
    }

    /// Adds `n` sessions of `owner/repo` (newest last), for paging.
    pub fn seed_sessions(&self, n: usize, nwo: &str) {
        let template = self.state.answers.body("session");
        let mut store = self.state.store.lock().unwrap();
        for _ in 0..n {
            let i = store.next;
            store.next += 1;
            let mut s = template.clone();
            s["id"] = json!(session_id(i));
            s["name"] = json!(format!("Seeded task {i} in {nwo}"));
            s["last_updated_at"] = json!(rfc3339(1_764_497_100 + i));
            s["repo_nwo"] = json!(nwo);
            store.sessions.push(s);
        }
    }

    /// The sessions the fake holds (newest first, as it lists them).
    pub fn sessions(&self) -> Vec<Value> {
        sorted(&self.state.store.lock().unwrap().sessions)
    }

    /// The jobs created so far.
    pub fn jobs(&self) -> Vec<Value> {
        self.state.store.lock().unwrap().jobs.clone()
    }
}

/// A CA, and a rustls server config with one leaf naming every host in [`HOSTS`].
fn certificates(
    dir: &tempfile::TempDir,
) -> (Arc<rustls::ServerConfig>, CertificateDer<'static>, PathBuf) {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "Weir test agents API CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let ca_pem = dir.path().join("agents-api-ca.pem");
    std::fs::write(&ca_pem, ca.pem()).unwrap();

    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(HOSTS.map(String::from).to_vec()).unwrap();
    params.distinguished_name.push(DnType::CommonName, HOSTS[0]);
    let leaf = params.signed_by(&key, &ca, &ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (Arc::new(cfg), ca.der().clone(), ca_pem)
}

/// The fake's name for a method and path (the query never takes part).
pub fn route(method: &str, path: &str) -> &'static str {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, seg.as_slice()) {
        ("GET", ["agents", "sessions"]) => "sessions.list",
        ("GET", ["agents", "sessions", "resource", "pull", _]) => "sessions.pr",
        ("GET", ["agents", "sessions", _, "logs"]) => "sessions.logs",
        ("GET", ["agents", "sessions", _]) => "sessions.get",
        ("GET", ["agents", "resource", "pull", _]) => "resource.pull",
        ("POST", ["agents", "swe", "v1", "jobs", _, _]) => "jobs.create",
        ("GET", ["agents", "swe", "v1", "jobs", _, _, "enabled"]) => "jobs.enabled",
        ("GET", ["agents", "swe", "v1", "jobs", _, _, "session", _]) => "jobs.by_session",
        ("GET", ["agents", "swe", "v1", "jobs", _, _, _]) => "jobs.get",
        ("GET", ["agents", "swe", "custom-agents", _, _]) => "custom_agents.list",
        ("GET", ["agents", "swe", "custom-agents", _, _, _]) => "custom_agents.get",
        ("GET", ["agents", "swe", "models"]) => "swe.models",
        ("GET", ["agents", "repos", _, _, "tasks"]) => "tasks.list",
        ("POST", ["agents", "repos", _, _, "tasks"]) => "tasks.create",
        ("GET", ["agents", "tasks"]) => "tasks.mine",
        ("GET", ["agents", "tasks", _]) => "tasks.get",
        ("GET", ["copilot_internal", "v2", "token"]) => "token",
        ("GET", ["copilot_internal", "user"]) => "copilot_user",
        ("GET", ["copilot_internal", "managed_settings"]) => "managed_settings",
        ("GET", ["copilot_internal", "team_customizations"]) => "team_customizations",
        (_, ["mcp", "readonly"]) => "mcp.readonly",
        ("GET", ["models"]) => "models",
        ("POST", ["graphql"]) => "graphql",
        // Weir's own account lookup (one per credential).
        ("GET", ["user"]) => "user",
        _ => "not_found",
    }
}

async fn handle(
    req: Request<Incoming>,
    st: Arc<State>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let host = parts
        .headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let host = host.split(':').next().unwrap_or_default().to_string();
    let path = parts.uri.path().to_string();
    let method = parts.method.as_str().to_string();
    let name = route(&method, &path);
    st.log.lock().unwrap().push(Logged {
        host,
        method: method.clone(),
        path_and_query: pq,
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into(),
                )
            })
            .collect(),
        body: body.clone(),
        route: name,
    });
    if let Some(fault) = take_fault(&st, name) {
        match fault {
            FaultKind::Delay(d) => tokio::time::sleep(d).await,
            FaultKind::Status(s) => {
                return Ok(json_response(
                    s,
                    &json!({"message": "fake upstream failure"}),
                ))
            }
            FaultKind::RateLimited { retry_after_secs } => {
                let mut r = json_response(429, &json!({"message": "rate limited"}));
                r.headers_mut()
                    .insert("retry-after", retry_after_secs.to_string().parse().unwrap());
                return Ok(r);
            }
        }
    }
    let query = parse_query(parts.uri.query().unwrap_or_default());
    let auth = parts
        .headers
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    Ok(answer(&st, name, &path, &query, &body, &auth))
}

fn take_fault(st: &State, route: &'static str) -> Option<FaultKind> {
    let mut faults = st.faults.lock().unwrap();
    let i = faults
        .iter()
        .position(|f| f.route.is_none_or(|r| r == route) && f.times != Some(0))?;
    let kind = faults[i].kind.clone();
    if let Some(t) = faults[i].times.as_mut() {
        *t -= 1;
    }
    Some(kind)
}

fn answer(
    st: &State,
    name: &'static str,
    path: &str,
    q: &[(String, String)],
    body: &[u8],
    auth: &str,
) -> Response<Full<Bytes>> {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let a = &st.answers;
    let now = unix_now();
    match name {
        "sessions.list" => {
            let param = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let number: usize = param("page_number")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let size: usize = param("page_size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(20);
            let store = st.store.lock().unwrap();
            let all: Vec<Value> = sorted(&store.sessions)
                .into_iter()
                .filter(|s| {
                    param("repo_nwo").is_none_or(|n| s["repo_nwo"].as_str().is_none_or(|x| x == n))
                })
                .filter(|s| {
                    param("resource_state").is_none_or(|states| {
                        states
                            .split(',')
                            .any(|w| s["resource_state"].as_str() == Some(w))
                    })
                })
                .map(|s| strip_private(&s))
                .collect();
            let page: Vec<Value> = all
                .into_iter()
                .skip(number.saturating_sub(1) * size)
                .take(size)
                .collect();
            json_response(200, &json!({ "sessions": page }))
        }
        "sessions.get" => match find(&st.store.lock().unwrap().sessions, "id", seg[2]) {
            Some(s) => json_response(200, &strip_private(s)),
            None => not_found(),
        },
        "sessions.logs" => {
            if find(&st.store.lock().unwrap().sessions, "id", seg[2]).is_none() {
                return not_found();
            }
            let ans = &a.answers["session_logs"];
            let mut r = Response::new(Full::new(Bytes::from(ans.text.clone().unwrap_or_default())));
            r.headers_mut()
                .insert("content-type", ans.content_type.parse().unwrap());
            r
        }
        "sessions.pr" => {
            let store = st.store.lock().unwrap();
            let sessions: Vec<Value> = store
                .sessions
                .iter()
                .filter(|s| s["resource_id"].to_string() == seg[4])
                .map(strip_private)
                .collect();
            json_response(200, &json!({ "sessions": sessions }))
        }
        "resource.pull" => {
            let store = st.store.lock().unwrap();
            let mut r = a.body("resource_sessions");
            let sessions: Vec<Value> = store
                .sessions
                .iter()
                .filter(|s| s["resource_id"].to_string() == seg[3])
                .map(|s| {
                    json!({"id": s["id"], "name": s["name"], "state": s["state"],
                           "last_updated_at": r["last_updated_at"]})
                })
                .collect();
            r["resource_id"] = json!(seg[3].parse::<i64>().unwrap_or(0));
            r["session_count"] = json!(sessions.len());
            r["sessions"] = json!(sessions);
            json_response(200, &r)
        }
        "jobs.create" => create_job(st, seg[4], seg[5], body, now),
        "jobs.get" => match find(&st.store.lock().unwrap().jobs, "job_id", seg[6]) {
            Some(j) => json_response(200, &strip_private(j)),
            None => not_found(),
        },
        "jobs.by_session" => match find(&st.store.lock().unwrap().jobs, "session_id", seg[7]) {
            Some(j) => json_response(200, &strip_private(j)),
            None => not_found(),
        },
        "jobs.enabled" => json_response(200, &a.body("enabled")),
        "custom_agents.list" => json_response(200, &a.body("custom_agents")),
        "custom_agents.get" => {
            let mut d = a.body("custom_agent");
            d["name"] = json!(seg[5]);
            json_response(200, &d)
        }
        "swe.models" => json_response(200, &a.body("cca_models")),
        "token" => {
            let mut t = a.body("copilot_token");
            t["expires_at"] = json!(now + 1800);
            t["endpoints"]["api"] = json!(st.api_origin);
            json_response(200, &t)
        }
        "copilot_user" => {
            let mut u = a.body("copilot_user");
            u["endpoints"]["api"] = json!(st.api_origin);
            json_response(200, &u)
        }
        "models" => json_response(200, &a.body("models")),
        "user" => {
            // One account per credential, so that no two tests' tokens share cached answers.
            let id = account_of(st, auth);
            json_response(
                200,
                &json!({"login": format!("user-{id}"), "id": id, "type": "User"}),
            )
        }
        "mcp.readonly" => mcp(body),
        "graphql" => json_response(
            200,
            &json!({"data": {"viewer": {"login": "octocat", "copilotEndpoints": {"api": st.api_origin}}}}),
        ),
        "managed_settings"
        | "team_customizations"
        | "tasks.list"
        | "tasks.create"
        | "tasks.mine"
        | "tasks.get" => json_response(200, &a.body("unknown")),
        _ => not_found(),
    }
}

/// `POST /agents/swe/v1/jobs/{o}/{r}`: a job and its session, answered as `job_created`.
fn create_job(st: &State, owner: &str, repo: &str, body: &[u8], now: u64) -> Response<Full<Bytes>> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return json_response(400, &json!({"message": "Problems parsing JSON"}));
    };
    let Some(statement) = req["problem_statement"].as_str().filter(|s| !s.is_empty()) else {
        return json_response(422, &json!({"message": "problem_statement is required"}));
    };
    let mut store = st.store.lock().unwrap();
    let i = store.next;
    store.next += 1;
    let (job_id, sid) = (format!("job-{i}"), session_id(i));
    let mut session = st.answers.body("session");
    session["id"] = json!(sid);
    session["name"] = json!(statement);
    session["state"] = json!("queued");
    session["created_at"] = json!(rfc3339(now));
    session["last_updated_at"] = json!(rfc3339(now));
    session["event_type"] = req["event_type"].clone();
    session["repo_nwo"] = json!(format!("{owner}/{repo}"));
    store.sessions.push(session);
    let mut job = st.answers.body("job_created");
    job["job_id"] = json!(job_id);
    job["session_id"] = json!(sid);
    job["problem_statement"] = json!(statement);
    job["created_at"] = json!(rfc3339(now));
    job["updated_at"] = json!(rfc3339(now));
    let mut stored = job.clone();
    stored["event_type"] = req["event_type"].clone();
    stored["repo_nwo"] = json!(format!("{owner}/{repo}"));
    store.jobs.push(stored);
    let status = st.answers.answers["job_created"].status;
    json_response(status, &job)
}

/// The read-only GitHub MCP server: enough JSON-RPC for a client's start-up.
fn mcp(body: &[u8]) -> Response<Full<Bytes>> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return json_response(400, &json!({"message": "expected JSON-RPC"}));
    };
    let Some(id) = req.get("id").cloned() else {
        // A notification: accepted, no answer.
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = StatusCode::ACCEPTED;
        return r;
    };
    let result = match req["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": req["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": "github-mcp-server", "version": "fake"}
        }),
        "tools/list" => json!({"tools": []}),
        "prompts/list" => json!({"prompts": []}),
        "resources/list" => json!({"resources": []}),
        other => {
            return json_response(
                200,
                &json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("method {other} not found")}}),
            )
        }
    };
    json_response(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn account_of(st: &State, auth: &str) -> usize {
    let mut accounts = st.accounts.lock().unwrap();
    let i = match accounts.iter().position(|a| a == auth) {
        Some(i) => i,
        None => {
            accounts.push(auth.to_string());
            accounts.len() - 1
        }
    };
    1001 + i
}

fn find<'a>(items: &'a [Value], key: &str, want: &str) -> Option<&'a Value> {
    items.iter().find(|v| v[key].as_str() == Some(want))
}

/// Newest first by `last_updated_at` (RFC 3339 strings sort by time).
fn sorted(sessions: &[Value]) -> Vec<Value> {
    let mut v = sessions.to_vec();
    v.sort_by(|a, b| {
        b["last_updated_at"]
            .as_str()
            .cmp(&a["last_updated_at"].as_str())
    });
    v
}

/// Drops the fake's own bookkeeping (`repo_nwo`), which no real answer is known to carry.
fn strip_private(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("repo_nwo");
    }
    v
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_response(status: u16, v: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        "application/json; charset=utf-8".parse().unwrap(),
    );
    r
}

fn not_found() -> Response<Full<Bytes>> {
    json_response(
        404,
        &json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
}

/// A session id in the UUID form gh checks (`IsSessionID`).
fn session_id(i: u64) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `secs` since the epoch as RFC 3339 UTC (`2026-11-30T10:00:00Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
