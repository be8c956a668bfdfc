//! A real loopback fake of GitHub's agent APIs over TLS, answering in the shapes the real
//! clients parse (templates from `tests/corpus/answers.json`): sessions paged by
//! `page_number`/`page_size` (never `has_next_page`), a session, its logs, the jobs API
//! (create / by id / by session / enabled), PR resources, custom agents, the agent's models, the
//! Copilot token and user, the Copilot CLI's start-up calls and the MCP server. One certificate
//! names every host, so Weir reaches each real host name through `connect_to` + `ca_file`. It
//! keeps a request log (host, method, path and query, headers, body, route) and can be told to
//! fail (5xx, 429 + Retry-After, latency, a refusal in the upstream's error shape, an answer
//! lost after the work was done). Tasks (a session and the job behind it) can be seeded with
//! given names, statements and times, for the in-doubt lookup.
//! Use with `#[path = "common/corpus.rs"] mod corpus;` and
//! `#[path = "common/agents_answers.rs"] mod agents_answers;` and `#[path = "common/tls.rs"] mod
//! tls;` declared next to it (its certificate comes from the shared `tls::TestCa`).
#![allow(dead_code)]

// Each fake included without `common` brings the one request reader along; a test that
// includes two of them has two copies of this small module, which is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "request.rs"]
mod request;

use crate::agents_answers::{
    answer, json_response, parse_query, rfc3339, session_id, sorted, strip_private,
};
use crate::corpus::Answers;
use crate::tls::TestCa;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use request::read_request;
use rustls::pki_types::CertificateDer;
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
    /// Refuse with this status (4xx) and `message`, doing nothing, in the error shape gh's
    /// `CreateJob` reads: when the body is no job it decodes the body itself as a `JobError`
    /// (`{"message", …}`; cli/cli `pkg/cmd/agent-task/capi/job.go`, commit
    /// 03faed65a9ce9a2fa77c7cbb76e89d6508655e87). VS Code's `postCopilotAgentJob` reads only
    /// the status (microsoft/vscode-copilot-chat `src/platform/github/common/
    /// octoKitServiceImpl.ts`, commit 31acd00a86424e2ee6e980e54919cf31fbf88030).
    Refused { status: u16, message: &'static str },
    /// Do the work (a create creates its job and session), then answer this status (5xx) as
    /// a gateway that lost the upstream's answer would: the create is in doubt.
    AnswerLost(u16),
}

/// A task to seed: a session of `repo` and the job behind it
/// (`GET /agents/swe/v1/jobs/{o}/{r}/session/{id}` answers it with `problem_statement`).
#[derive(Debug, Clone)]
pub struct SeedTask<'a> {
    /// `owner/repo`.
    pub repo: &'a str,
    /// The session's name (gh's is the statement; VS Code's a title made from it).
    pub name: &'a str,
    /// The job's statement, which the session does not carry.
    pub problem_statement: &'a str,
    pub created_at: SystemTime,
    pub last_updated_at: SystemTime,
}

pub(crate) struct Store {
    pub(crate) sessions: Vec<Value>,
    pub(crate) jobs: Vec<Value>,
    pub(crate) next: u64,
}

pub(crate) struct State {
    pub(crate) answers: Answers,
    /// Credentials seen by `GET /user`, in order: the account id is the index + 1001.
    pub(crate) accounts: Mutex<Vec<String>>,
    log: Mutex<Vec<Logged>>,
    faults: Mutex<Vec<Fault>>,
    pub(crate) store: Mutex<Store>,
    /// `https://` + [`PLAN_HOST`]: what token and user answers announce.
    pub(crate) api_origin: String,
    /// Lines added to a session's log since it started, by session id (a running session's
    /// log grows; see [`AgentsApi::append_log`]).
    pub(crate) log_lines: Mutex<std::collections::HashMap<String, Vec<String>>>,
    /// Events a task's agent wrote since it started, by task id, after the corpus's own (see
    /// [`AgentsApi::add_task_event`]).
    pub(crate) task_events: Mutex<std::collections::HashMap<String, Vec<Value>>>,
    /// The next logs answer leaves out the last line added, as a replica one write behind
    /// would (see [`AgentsApi::lag_once`]).
    pub(crate) log_lag: std::sync::atomic::AtomicBool,
    /// `304 Not Modified` answers sent (conditional GETs whose `If-None-Match` matched).
    not_modified: std::sync::atomic::AtomicUsize,
}

pub struct AgentsApi {
    pub addr: SocketAddr,
    /// The fake's CA (PEM), for Weir's `ca_file` and a client's trust store.
    pub ca_pem: PathBuf,
    pub ca_der: CertificateDer<'static>,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    _ca: TestCa,
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
        // One leaf naming every host in HOSTS, from the shared test CA (common/tls.rs).
        let ca = TestCa::new();
        let (tls, _) = ca.server_config_for(&HOSTS);
        let (ca_der, ca_pem) = (ca.der(), ca.pem_path.clone());
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
            log_lines: Mutex::default(),
            task_events: Mutex::default(),
            log_lag: Default::default(),
            not_modified: Default::default(),
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
            _ca: ca,
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

    /// The `304 Not Modified` answers sent so far.
    pub fn not_modified(&self) -> usize {
        self.state
            .not_modified
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Adds `text` to the end of session `id`'s log (what the agent wrote since).
    pub fn append_log(&self, id: &str, text: &str) {
        let mut logs = self.state.log_lines.lock().unwrap();
        logs.entry(id.to_string())
            .or_default()
            .push(text.to_string());
    }

    /// Adds an event to the end of task `id`'s events, in the corpus's event shape (a new
    /// `assistant.message` with its own id), and returns that id.
    pub fn add_task_event(&self, id: &str, content: &str) -> String {
        let mut events = self.state.task_events.lock().unwrap();
        let list = events.entry(id.to_string()).or_default();
        let event_id = format!("8c1d0c5e-9{:03}-4f00-9000-{id:0>12.12}", list.len());
        let mut ev = self.state.answers.body("task_events")["events"][2].clone();
        ev["id"] = json!(event_id);
        ev["data"]["messageId"] = json!(format!("m-{}", list.len() + 2));
        ev["data"]["content"] = json!(content);
        list.push(ev);
        event_id
    }

    /// Sets task (session) `id`'s state, as the agent moves it (`completed` ends a turn).
    pub fn set_task_state(&self, id: &str, state: &str) {
        let mut store = self.state.store.lock().unwrap();
        if let Some(s) = store.sessions.iter_mut().find(|s| s["id"] == id) {
            s["state"] = json!(state);
        }
    }

    /// The next logs answer is one write behind (the last [`AgentsApi::append_log`] left
    /// out): a read from a lagging replica.
    pub fn lag_once(&self) {
        self.state
            .log_lag
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Session `id`'s whole log as the fake would answer it now.
    pub fn full_log(&self, id: &str) -> String {
        let mut log = self.state.answers.answers["session_logs"]
            .text
            .clone()
            .unwrap_or_default();
        if let Some(lines) = self.state.log_lines.lock().unwrap().get(id) {
            log.extend(lines.iter().map(String::as_str));
        }
        log
    }

    /// The session the fake starts with (the corpus's).
    pub fn first_session_id(&self) -> String {
        self.state.store.lock().unwrap().sessions[0]["id"]
            .as_str()
            .unwrap()
            .to_string()
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

    /// Heals and sets `faults` in one step, so that no request falls between the two.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        *self.state.faults.lock().unwrap() = faults;
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

    /// Adds a session and the job behind it, from the corpus's `session` and `job` templates
    /// (the rest of their fields as those say); returns the session id.
    pub fn seed_task(&self, t: SeedTask<'_>) -> String {
        let secs =
            |at: SystemTime| rfc3339(at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        let (created, updated) = (secs(t.created_at), secs(t.last_updated_at));
        let mut session = self.state.answers.body("session");
        let mut job = self.state.answers.body("job");
        let mut store = self.state.store.lock().unwrap();
        let i = store.next;
        store.next += 1;
        let sid = session_id(i);
        // The times and the repository (the fake's own bookkeeping) on both.
        for (v, updated_key) in [(&mut session, "last_updated_at"), (&mut job, "updated_at")] {
            v["created_at"] = json!(created);
            v[updated_key] = json!(updated);
            v["repo_nwo"] = json!(t.repo);
        }
        session["id"] = json!(sid);
        session["name"] = json!(t.name);
        store.sessions.push(session);
        job["job_id"] = json!(format!("job-{i}"));
        job["session_id"] = json!(sid);
        job["problem_statement"] = json!(t.problem_statement);
        store.jobs.push(job);
        sid
    }

    /// The jobs the fake holds for `owner/repo`, created or seeded, oldest first (the corpus's
    /// own job names no repository, so it is not among them).
    pub fn jobs_in(&self, nwo: &str) -> Vec<Value> {
        let store = self.state.store.lock().unwrap();
        store
            .jobs
            .iter()
            .filter(|j| j["repo_nwo"].as_str() == Some(nwo))
            .map(strip_private)
            .collect()
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

/// The fake's name for a method and path (the query never takes part).
pub fn route(method: &str, path: &str) -> &'static str {
    let mut seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    // VS Code's Task API (`@vscode/copilot-api` 0.5.2) and the Copilot CLI's Mission Control
    // put the same paths under `/cmc_internal/api/agents` on api.github.com.
    if seg.starts_with(&["cmc_internal", "api", "agents"]) {
        seg.drain(..2);
    }
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
        ("GET", ["agents", "swe", "internal", "memory", "v0", "enabled"]) => "memory.enabled",
        ("POST", ["agents", "sessions"]) => "mc.create",
        ("DELETE", ["agents", "sessions", _]) => "mc.delete",
        ("POST", ["agents", "sessions", _, "events"]) => "mc.events",
        ("GET", ["agents", "sessions", _, "commands"]) => "mc.commands",
        ("GET", ["agents", "tasks", _, "events"]) => "tasks.events",
        ("POST", ["agents", "tasks", _, "steer"]) => "tasks.steer",
        ("POST", ["agents", "tasks", _, "archive" | "unarchive"]) => "tasks.archive",
        ("POST", ["agents", "repos", _, _, "tasks", _, "pulls"]) => "tasks.pulls",
        ("GET", ["agents", "repos", _, _, "tasks"]) => "tasks.list",
        ("POST", ["agents", "repos", _, _, "tasks"]) => "tasks.create",
        ("GET", ["agents", "repos", _, _, "tasks", _]) => "tasks.repo_get",
        ("GET", ["agents", "tasks"]) => "tasks.mine",
        ("GET", ["agents", "tasks", _]) => "tasks.get",
        ("GET", ["copilot_internal", "v2", "token"]) => "token",
        ("GET", ["copilot_internal", "user"]) => "copilot_user",
        ("GET", ["copilot_internal", "managed_settings"]) => "managed_settings",
        ("GET", ["copilot_internal", "team_customizations"]) => "team_customizations",
        (_, ["mcp", "readonly"]) => "mcp.readonly",
        ("GET", ["models"]) => "models",
        ("POST", ["chat", "completions"]) => "chat.completions",
        ("POST", ["graphql"]) => "graphql",
        ("GET", ["repositories", _]) => "repository",
        ("GET", ["repos", _, _]) => "repository",
        // Weir's own account lookup (one per credential).
        ("GET", ["user"]) => "user",
        _ => "not_found",
    }
}

async fn handle(
    req: Request<Incoming>,
    st: Arc<State>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let got = read_request(req).await;
    let body = got.body.clone();
    let pq = got.path_and_query();
    let host = got.host();
    let host = host.split(':').next().unwrap_or_default().to_string();
    let path = got.path().to_string();
    let method = got.method.as_str().to_string();
    let name = route(&method, &path);
    st.log.lock().unwrap().push(Logged {
        host,
        method: method.clone(),
        path_and_query: pq,
        headers: got
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
    let fault = take_fault(&st, name);
    match fault {
        None | Some(FaultKind::AnswerLost(_)) => {}
        Some(FaultKind::Delay(d)) => tokio::time::sleep(d).await,
        Some(FaultKind::Status(s)) => return Ok(failure(s)),
        Some(FaultKind::Refused { status, message }) => {
            return Ok(json_response(
                status,
                &json!({"message": message, "documentation_url": "https://docs.github.com/rest"}),
            ))
        }
        Some(FaultKind::RateLimited { retry_after_secs }) => {
            let mut r = json_response(429, &json!({"message": "rate limited"}));
            r.headers_mut()
                .insert("retry-after", retry_after_secs.to_string().parse().unwrap());
            return Ok(r);
        }
    }
    let query = parse_query(got.uri.query().unwrap_or_default());
    let auth = got
        .headers
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let done = answer(&st, name, &path, &query, &body, &auth);
    Ok(match fault {
        // The work is done (and kept); the client is told otherwise.
        Some(FaultKind::AnswerLost(s)) => failure(s),
        _ if method == "GET" => validated(&st, got.headers.get("if-none-match"), done).await,
        _ => done,
    })
}

/// A GET's `200` with a weak `ETag` of its body, as api.github.com answers; `304 Not Modified`
/// with that `ETag` and no body when the request's `If-None-Match` names it.
async fn validated(
    st: &State,
    if_none_match: Option<&http::HeaderValue>,
    resp: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    use std::hash::{Hash, Hasher};
    if resp.status() != 200 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("W/\"{:016x}\"", hasher.finish());
    parts.headers.insert("etag", etag.parse().unwrap());
    let matches = if_none_match
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if matches {
        st.not_modified
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        parts.status = http::StatusCode::NOT_MODIFIED;
        parts.headers.remove("content-type");
        parts.headers.remove("content-length");
        return Response::from_parts(parts, Full::new(Bytes::new()));
    }
    Response::from_parts(parts, Full::new(body))
}

/// A failure as the fake answers it: the status with a GitHub-style `{"message"}` body.
fn failure(status: u16) -> Response<Full<Bytes>> {
    json_response(status, &json!({"message": "fake upstream failure"}))
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
