//! A create Weir queues is answered so the real clients accept it, and their follow-up calls
//! work before and after the replay (issue 20, items 4 and 8).
//!
//! The clients' rules are transcribed, not run: [`gh`] from cli/cli
//! `pkg/cmd/agent-task/capi/job.go` (commit 03faed65a9ce9a2fa77c7cbb76e89d6508655e87) and
//! `capi/sessions.go` (commit 10db38944e1c9f56cbc00291a4cb086f0604f47a), `shared/capi.go` and
//! `shared/log.go`; [`vscode`] from microsoft/vscode-copilot-chat
//! `src/platform/github/common/octoKitServiceImpl.ts` and
//! `src/extension/chatSessions/vscode-node/copilotCloudSessionsProvider.ts` (commit
//! 31acd00a86424e2ee6e980e54919cf31fbf88030).
//!
//! The upstream is [`AgentsApi`], a small loopback fake of the agents API in the real shapes
//! (the job of `job.go`, the session of `sessions.go`), written here because the project's
//! shared real-shape fake (`tests/common/agents_api.rs`) is not on main yet.

mod common;
use bytes::Bytes;
use common::Weir;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Credentials in memory (no keychain needed) and a breaker that never opens, so the replay
/// runs as soon as the fake is healthy again.
const CONFIG: &str = "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";
const CREATE: &str = "/agents/swe/v1/jobs/octo/app";

/// gh's request body for `gh agent-task create "Fix the login bug"` (Go's encoding/json of
/// `capi.Job`; see `src/sessions/create.rs` for why each field is there).
const GH_BODY: &str = r#"{"problem_statement":"Fix the login bug","event_type":"gh_cli","created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z","pull_request":{"id":0,"number":0}}"#;

/// gh's headers on a Copilot API call (cli/cli `capi/client.go` `capiTransport.RoundTrip`,
/// commit 1b5130e1) plus `CreateJob`'s Content-Type.
fn gh_headers(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".into()),
        ("copilot-integration-id", "copilot-4-cli".into()),
        ("x-github-api-version", "2026-01-09".into()),
        ("user-agent", "GitHub CLI 2.83.0".into()),
    ]
}

// ---------------------------------------------------------------------------------------
// gh's decoding rules
// ---------------------------------------------------------------------------------------

/// cli/cli `capi` as Go's `encoding/json` decodes it: unknown fields ignored, `null` leaves a
/// field at its zero value, a wrong JSON type is an error, `time.Time` takes an RFC 3339
/// string (or `null`) and nothing else, `,string` takes an integer inside a JSON string.
// Fields a test does not read are still decoded: their types are gh's check.
#[allow(dead_code)]
mod gh {
    use serde::{Deserialize, Deserializer};

    /// Go's `time.Time.UnmarshalJSON`: `null` is a no-op, else an RFC 3339 string.
    fn go_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let v: Option<String> = Option::deserialize(d)?;
        if let Some(s) = &v {
            time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|e| serde::de::Error::custom(format!("parsing time {s:?}: {e}")))?;
        }
        Ok(v)
    }

    /// A Go `string`: `null` is a no-op (the zero value).
    fn go_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
    }

    /// `int` with the `,string` option: a JSON string holding an integer.
    fn go_int_string<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::custom(format!("invalid ,string value {s:?}")))
    }

    /// `capi.Job` (job.go).
    #[derive(Debug, Deserialize)]
    pub struct Job {
        #[serde(rename = "job_id", default, deserialize_with = "go_string")]
        pub id: String,
        #[serde(default, deserialize_with = "go_string")]
        pub session_id: String,
        #[serde(default, deserialize_with = "go_string")]
        pub problem_statement: String,
        #[serde(default, deserialize_with = "go_string")]
        pub custom_agent: String,
        #[serde(default, deserialize_with = "go_string")]
        pub event_type: String,
        #[serde(default, deserialize_with = "go_string")]
        pub content_filter_mode: String,
        #[serde(default, deserialize_with = "go_string")]
        pub status: String,
        #[serde(default, deserialize_with = "go_string")]
        pub result: String,
        #[serde(default)]
        pub actor: Option<JobActor>,
        #[serde(default, deserialize_with = "go_time")]
        pub created_at: Option<String>,
        #[serde(default, deserialize_with = "go_time")]
        pub updated_at: Option<String>,
        #[serde(default)]
        pub pull_request: Option<JobPullRequest>,
        #[serde(default)]
        pub workflow_run: Option<WorkflowRun>,
        #[serde(rename = "error", default)]
        pub error_info: Option<JobError>,
    }

    #[derive(Debug, Deserialize)]
    pub struct JobActor {
        #[serde(default)]
        pub id: i64,
        #[serde(default, deserialize_with = "go_string")]
        pub login: String,
    }

    #[derive(Debug, Deserialize)]
    pub struct JobPullRequest {
        #[serde(default)]
        pub id: i64,
        #[serde(default)]
        pub number: i64,
        #[serde(default, deserialize_with = "go_string")]
        pub base_ref: String,
    }

    #[derive(Debug, Deserialize)]
    pub struct WorkflowRun {
        #[serde(default, deserialize_with = "go_string")]
        pub id: String,
    }

    /// `capi.JobError`: `response_status_code` is `int` with `json:",string"`.
    #[derive(Debug, Deserialize)]
    pub struct JobError {
        #[serde(default, deserialize_with = "go_string")]
        pub message: String,
        #[serde(default, deserialize_with = "go_int_string")]
        pub response_status_code: i64,
        #[serde(default, deserialize_with = "go_string")]
        pub service: String,
    }

    /// `capi.session` (sessions.go).
    #[derive(Debug, Deserialize)]
    pub struct Session {
        #[serde(default, deserialize_with = "go_string")]
        pub id: String,
        #[serde(default, deserialize_with = "go_string")]
        pub name: String,
        #[serde(default)]
        pub user_id: i64,
        #[serde(default)]
        pub agent_id: i64,
        #[serde(default, deserialize_with = "go_string")]
        pub logs: String,
        #[serde(default, deserialize_with = "go_string")]
        pub state: String,
        #[serde(default)]
        pub owner_id: u64,
        #[serde(default)]
        pub repo_id: u64,
        #[serde(default, deserialize_with = "go_string")]
        pub resource_type: String,
        #[serde(default)]
        pub resource_id: i64,
        #[serde(default, deserialize_with = "go_string")]
        pub resource_global_id: String,
        #[serde(default, deserialize_with = "go_time")]
        pub last_updated_at: Option<String>,
        #[serde(default, deserialize_with = "go_time")]
        pub created_at: Option<String>,
        #[serde(default, deserialize_with = "go_time")]
        pub completed_at: Option<String>,
        #[serde(default, deserialize_with = "go_string")]
        pub event_url: String,
        #[serde(default, deserialize_with = "go_string")]
        pub event_type: String,
        #[serde(default)]
        pub premium_requests: f64,
        #[serde(default)]
        pub workflow_run_id: u64,
        #[serde(default)]
        pub error: Option<SessionError>,
    }

    #[derive(Debug, Deserialize)]
    pub struct SessionError {
        #[serde(default, deserialize_with = "go_string")]
        pub code: String,
        #[serde(default, deserialize_with = "go_string")]
        pub message: String,
    }

    fn status_text(status: u16) -> String {
        let reason = http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        format!("{status} {reason}")
    }

    /// `CreateJob`'s handling of the answer: decode first, then only 200 or 201 is a job.
    pub fn create_job(status: u16, body: &[u8]) -> Result<Job, String> {
        match serde_json::from_slice::<Job>(body) {
            Err(e) => {
                if status != 201 && status != 200 {
                    return Err(format!("failed to create job: {}", status_text(status)));
                }
                Err(format!("failed to decode create job response: {e}"))
            }
            Ok(j) => {
                if status != 201 && status != 200 {
                    let st = status_text(status);
                    if let Some(e) = j.error_info {
                        return Err(format!("failed to create job: {st}: {}", e.message));
                    }
                    return Err(format!("failed to create job: {st}"));
                }
                Ok(j)
            }
        }
    }

    /// `GetJob`: only 200, then a job.
    pub fn get_job(status: u16, body: &[u8]) -> Result<Job, String> {
        if status != 200 {
            return Err(format!("failed to get job: {}", status_text(status)));
        }
        serde_json::from_slice(body).map_err(|e| format!("failed to decode get job response: {e}"))
    }

    /// `GetSession`: 404 is "not found", anything else but 200 an error, then a session.
    pub fn get_session(status: u16, body: &[u8]) -> Result<Session, String> {
        if status == 404 {
            return Err("not found".into());
        }
        if status != 200 {
            return Err(format!("failed to get session: {}", status_text(status)));
        }
        serde_json::from_slice(body).map_err(|e| format!("failed to decode session response: {e}"))
    }

    /// `GetSessionLogs` then `logRenderer.Render` (shared/log.go): every non-empty line must
    /// start with `data: `.
    pub fn render_logs(status: u16, body: &[u8]) -> Result<usize, String> {
        if status != 200 {
            return Err(format!("failed to get session: {}", status_text(status)));
        }
        let text = String::from_utf8_lossy(body);
        let mut n = 0;
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            if !line.starts_with("data: ") {
                return Err("unexpected log format".into());
            }
            n += 1;
        }
        Ok(n)
    }

    /// `shared.IsSessionID`: `gh agent-task view <id>` takes a UUID.
    pub fn is_session_id(s: &str) -> bool {
        let parts: Vec<&str> = s.split('-').collect();
        parts.len() == 5
            && parts
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(p, n)| p.len() == n && p.bytes().all(|c| c.is_ascii_hexdigit()))
    }
}

// ---------------------------------------------------------------------------------------
// VS Code's rules
// ---------------------------------------------------------------------------------------

/// What VS Code's Copilot Chat does with these answers (octoKitServiceImpl.ts and
/// copilotCloudSessionsProvider.ts): `response.ok` is 200–299; a body is `response.json()`
/// (or `JSON.parse(text)`), which throws on anything but JSON.
mod vscode {
    use serde_json::Value;

    /// `postCopilotAgentJob` + `validateRemoteAgentJobResponse`: the job id and session id,
    /// or the message the user sees.
    pub fn post_job(status: u16, body: &[u8]) -> Result<(String, String), String> {
        if !(200..300).contains(&status) {
            return Err(match status {
                401 => "Cloud agent is not authorized to run on this repository.".into(),
                403 => "Cloud agent is not enabled for this repository.".into(),
                404 => "The repository was not found or you do not have access to it.".into(),
                422 => "Cloud agent was unable to create a pull request".into(),
                500 => "Cloud agent service encountered an internal error.".into(),
                s => format!("Received invalid response {s} from cloud agent."),
            });
        }
        // A body that is not JSON throws inside postCopilotAgentJob: `undefined`.
        let v: Value = serde_json::from_slice(body)
            .map_err(|_| "Received invalid response  from cloud agent.".to_string())?;
        match (v.as_object(), v.get("job_id"), v.get("session_id")) {
            (Some(_), Some(j), Some(s)) => Ok((
                j.as_str().unwrap_or_default().to_string(),
                s.as_str().unwrap_or_default().to_string(),
            )),
            _ => {
                let st = v.get("status").map(|s| s.to_string()).unwrap_or_default();
                Err(format!("Received invalid response {st} from cloud agent."))
            }
        }
    }

    /// `getJobByJobId` / `getJobBySessionId`: `undefined` unless ok and JSON.
    pub fn get_job(status: u16, body: &[u8]) -> Option<Value> {
        (200..300)
            .contains(&status)
            .then(|| serde_json::from_slice(body).ok())
            .flatten()
    }

    /// `waitForJobWithPullRequest`'s test: `jobInfo.pull_request && jobInfo.pull_request.number`.
    pub fn has_pull_request(job: &Value) -> bool {
        job.get("pull_request")
            .and_then(|p| p.get("number"))
            .and_then(Value::as_f64)
            .is_some_and(|n| n != 0.0)
    }

    /// `getSessionInfo`: `undefined` unless ok and `JSON.parse` succeeds.
    pub fn get_session(status: u16, body: &[u8]) -> Option<Value> {
        get_job(status, body)
    }

    /// `getSessionStatusFromSession`.
    pub fn status_of(session: &Value) -> &'static str {
        match session.get("state").and_then(Value::as_str) {
            Some("failed") => "Failed",
            Some("in_progress") | Some("queued") => "InProgress",
            _ => "Completed",
        }
    }
}

// ---------------------------------------------------------------------------------------
// A loopback agents API in the real shapes
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Creates jobs (201 with the job).
    Up,
    /// Refuses creates with 503 (nothing is created).
    Down,
    /// Creates the job, then answers 504 as a gateway that lost the answer would.
    Swallow,
    /// Refuses creates with 422 and an error message.
    Refuse,
}

#[derive(Clone, Debug)]
struct Task {
    job_id: String,
    session_id: String,
    repo: String,
    problem_statement: String,
    /// The session's name (gh's is the statement; VS Code's a title made from it).
    name: String,
    created_at: String,
    last_updated_at: String,
}

impl Task {
    fn job(&self) -> Value {
        json!({
            "job_id": self.job_id, "session_id": self.session_id,
            "problem_statement": self.problem_statement, "status": "queued",
            "actor": {"id": 7, "login": "octocat"},
            "created_at": self.created_at, "updated_at": self.last_updated_at,
        })
    }

    fn session(&self) -> Value {
        json!({
            "id": self.session_id, "name": self.name, "user_id": 7,
            "agent_id": 1, "logs": "", "state": "queued", "owner_id": 9, "repo_id": 11,
            "resource_type": "", "resource_id": 0, "resource_global_id": "",
            "last_updated_at": self.last_updated_at, "created_at": self.created_at,
            "event_url": "", "event_type": "gh_cli", "premium_requests": 0.0, "error": null,
        })
    }
}

#[derive(Default)]
struct Api {
    mode: Option<Mode>,
    tasks: Vec<Task>,
    seen: Vec<(String, String)>,
}

struct AgentsApi {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<Api>>,
}

fn rfc3339(t: SystemTime) -> String {
    weir::time_fmt::rfc3339(t)
}

fn uuid4(n: usize) -> String {
    format!("{n:08x}-aaaa-4bbb-8ccc-{n:012x}")
}

impl AgentsApi {
    async fn start(mode: Mode) -> AgentsApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(Api {
            mode: Some(mode),
            ..Api::default()
        }));
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| answer(req, st.clone()));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        AgentsApi { addr, state }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    fn tasks(&self) -> Vec<Task> {
        self.state.lock().unwrap().tasks.clone()
    }

    fn add(&self, repo: &str, statement: &str, created: SystemTime, updated: SystemTime) {
        self.add_named(repo, statement, statement, created, updated)
    }

    fn add_named(
        &self,
        repo: &str,
        statement: &str,
        name: &str,
        created: SystemTime,
        updated: SystemTime,
    ) {
        let mut s = self.state.lock().unwrap();
        let n = s.tasks.len() + 1000;
        s.tasks.push(Task {
            job_id: format!("job-{n}"),
            session_id: uuid4(n),
            repo: repo.into(),
            problem_statement: statement.into(),
            name: name.into(),
            created_at: rfc3339(created),
            last_updated_at: rfc3339(updated),
        });
    }

    /// Requests seen, as (method, path and query).
    fn seen(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().seen.clone()
    }

    fn count(&self, method: &str, prefix: &str) -> usize {
        self.seen()
            .iter()
            .filter(|(m, p)| m == method && p.starts_with(prefix))
            .count()
    }
}

/// `%XX` and `+` decoded (a query value as a server reads it).
fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    Ok(v) => out.push(v),
                    Err(_) => out.extend_from_slice(&b[i..i + 3]),
                }
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reply(status: u16, body: Value) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

async fn answer(
    req: http::Request<hyper::body::Incoming>,
    st: Arc<Mutex<Api>>,
) -> Result<http::Response<Full<Bytes>>, std::convert::Infallible> {
    let got = common::read_request(req).await;
    let pq = got.path_and_query();
    let path = got.path().to_string();
    let query: Vec<(String, String)> = got
        .uri
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (pct_decode(k), pct_decode(v)))
                .collect()
        })
        .unwrap_or_default();
    let mut s = st.lock().unwrap();
    s.seen.push((got.method.to_string(), pq));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let not_found = || reply(404, json!({"message": "Not Found"}));
    Ok(match (got.method.as_str(), segs.as_slice()) {
        // The Agent Tasks REST API's create: only its outage is needed here.
        ("POST", ["agents", "repos", _, _, "tasks"]) if s.mode == Some(Mode::Down) => {
            reply(503, json!({"message": "Service Unavailable"}))
        }
        ("POST", ["agents", "swe", "v1", "jobs", o, r]) => {
            let v: Value = serde_json::from_slice(&got.body).unwrap_or_default();
            let statement = v["problem_statement"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match s.mode.unwrap_or(Mode::Up) {
                Mode::Down => reply(503, json!({"message": "Service Unavailable"})),
                Mode::Refuse => reply(
                    422,
                    json!({"message": "the base branch does not exist", "documentation_url": ""}),
                ),
                mode => {
                    let n = s.tasks.len() + 1;
                    let now = rfc3339(SystemTime::now());
                    let t = Task {
                        job_id: format!("job-{n}"),
                        session_id: uuid4(n),
                        repo: format!("{o}/{r}"),
                        name: statement.clone(),
                        problem_statement: statement,
                        created_at: now.clone(),
                        last_updated_at: now,
                    };
                    s.tasks.push(t.clone());
                    if mode == Mode::Swallow {
                        reply(504, json!({"message": "Gateway Timeout"}))
                    } else {
                        reply(201, t.job())
                    }
                }
            }
        }
        ("GET", ["agents", "swe", "v1", "jobs", o, r, "session", sid]) => {
            let repo = format!("{o}/{r}");
            match s
                .tasks
                .iter()
                .find(|t| t.session_id == *sid && t.repo == repo)
            {
                Some(t) => reply(200, t.job()),
                None => not_found(),
            }
        }
        ("GET", ["agents", "swe", "v1", "jobs", o, r, jid]) => {
            let repo = format!("{o}/{r}");
            match s.tasks.iter().find(|t| t.job_id == *jid && t.repo == repo) {
                Some(t) => reply(200, t.job()),
                None => not_found(),
            }
        }
        ("GET", ["agents", "sessions", sid, "logs"]) => {
            match s.tasks.iter().any(|t| t.session_id == *sid) {
                true => {
                    let line = json!({"object": "chat.completion.chunk", "choices": [{"delta": {"role": "assistant", "content": "Working on it"}}]});
                    let mut r =
                        http::Response::new(Full::new(Bytes::from(format!("data: {line}\n"))));
                    r.headers_mut()
                        .insert("content-type", "text/plain".parse().unwrap());
                    r
                }
                false => not_found(),
            }
        }
        ("GET", ["agents", "sessions", sid]) => match s.tasks.iter().find(|t| t.session_id == *sid)
        {
            Some(t) => reply(200, t.session()),
            None => not_found(),
        },
        ("GET", ["agents", "sessions"]) => {
            let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let size: usize = q("page_size").and_then(|v| v.parse().ok()).unwrap_or(20);
            let page: usize = q("page_number").and_then(|v| v.parse().ok()).unwrap_or(1);
            let mut list: Vec<&Task> = s
                .tasks
                .iter()
                .filter(|t| q("repo_nwo").is_none_or(|r| r == t.repo))
                .collect();
            // `sort=last_updated_at,desc` (RFC 3339 in UTC with fixed width sorts as text).
            list.sort_by(|a, b| b.last_updated_at.cmp(&a.last_updated_at));
            let sessions: Vec<Value> = list
                .iter()
                .skip((page.max(1) - 1) * size)
                .take(size)
                .map(|t| t.session())
                .collect();
            reply(200, json!({"sessions": sessions}))
        }
        _ => not_found(),
    })
}

// ---------------------------------------------------------------------------------------
// Calls through Weir
// ---------------------------------------------------------------------------------------

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

async fn call(
    weir: &Weir,
    method: &str,
    url: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Answer {
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(weir.proxy_url()).unwrap())
        .build()
        .unwrap();
    let mut rb = client.request(method.parse().unwrap(), url);
    for (k, v) in headers {
        rb = rb.header(*k, v);
    }
    if !body.is_empty() {
        rb = rb.body(body.to_string());
    }
    let r = rb.send().await.unwrap();
    Answer {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        body: r.bytes().await.unwrap(),
    }
}

async fn get(weir: &Weir, api: &AgentsApi, path: &str, token: &str) -> Answer {
    let url = format!("{}{path}", api.origin());
    call(weir, "GET", &url, &gh_headers(token)[..1], "").await
}

/// Waits (bounded) until the queue item is in `state`; its control-API view.
async fn item_in(weir: &Weir, id: &str, state: &str) -> Value {
    let url = format!("{}/_weir/api/queue/{id}", weir.proxy_url());
    let mut last = Value::Null;
    for _ in 0..400 {
        last = reqwest::Client::new()
            .get(&url)
            .header("x-weir-secret", weir.handle.control_secret())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if last["state"] == state {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("item {id} never became {state}: {last}");
}

/// gh follows a provisional job and session; returns (job, session) as gh decoded them.
async fn gh_follows(weir: &Weir, api: &AgentsApi, job: &str, sid: &str) -> (gh::Job, gh::Session) {
    let j = get(weir, api, &format!("{CREATE}/{job}"), "gh-token").await;
    let job = gh::get_job(j.status, &j.body).unwrap_or_else(|e| panic!("{e}: {:?}", j.body));
    let s = get(weir, api, &format!("/agents/sessions/{sid}"), "gh-token").await;
    let session =
        gh::get_session(s.status, &s.body).unwrap_or_else(|e| panic!("{e}: {:?}", s.body));
    let l = get(
        weir,
        api,
        &format!("/agents/sessions/{sid}/logs"),
        "gh-token",
    )
    .await;
    gh::render_logs(l.status, &l.body).unwrap();
    (job, session)
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// A create during an outage, sent as gh sends it, is a job gh's `CreateJob` and VS Code's
/// `postCopilotAgentJob` accept; gh and VS Code follow the provisional job and session while
/// it waits and after the replay; exactly one session exists upstream after healing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_during_an_outage_is_a_job_both_clients_accept_and_follow() {
    let api = AgentsApi::start(Mode::Down).await;
    let weir = Weir::start(&[&api.origin()], CONFIG).await;
    let url = format!("{}{CREATE}", api.origin());
    let a = call(&weir, "POST", &url, &gh_headers("gh-token"), GH_BODY).await;

    // gh: 201 with a Job.
    assert_eq!(a.status, 201, "{:?}", a.body);
    let job = gh::create_job(a.status, &a.body).unwrap();
    assert_eq!(job.status, "queued");
    assert_eq!(job.problem_statement, "Fix the login bug");
    assert_eq!(job.event_type, "gh_cli");
    assert!(job.created_at.is_some() && job.updated_at.is_some());
    assert!(
        job.pull_request.is_none(),
        "gh then polls GetJob for the PR"
    );
    assert!(gh::is_session_id(&job.session_id), "{}", job.session_id);
    // VS Code: the same answer is a job to follow.
    let (vs_job, vs_session) = vscode::post_job(a.status, &a.body).unwrap();
    assert_eq!(
        (vs_job.as_str(), vs_session.as_str()),
        (job.id.as_str(), job.session_id.as_str())
    );
    // Weir says it queued it, and where.
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    assert_eq!(
        a.headers["location"].to_str().unwrap(),
        format!("/_weir/api/queue/{queue_id}")
    );
    assert_eq!(api.tasks().len(), 0, "nothing was created upstream yet");

    // The same create again (the user pressed create twice): the same provisional job.
    let again = call(&weir, "POST", &url, &gh_headers("gh-token"), GH_BODY).await;
    let again = gh::create_job(again.status, &again.body).unwrap();
    assert_eq!(
        (again.id.as_str(), again.session_id.as_str()),
        (job.id.as_str(), job.session_id.as_str())
    );

    // While it waits: gh's GetJob, GetSession and logs, and VS Code's calls, from the queue.
    let (j, s) = gh_follows(&weir, &api, &job.id, &job.session_id).await;
    assert_eq!(
        (j.id.as_str(), j.status.as_str()),
        (job.id.as_str(), "queued")
    );
    assert_eq!(
        (s.id.as_str(), s.state.as_str()),
        (job.session_id.as_str(), "queued")
    );
    assert!(s.name.contains("Weir"), "{}", s.name);
    let by_session = get(
        &weir,
        &api,
        &format!("{CREATE}/session/{}", job.session_id),
        "vs-token-of-gh",
    )
    .await;
    assert_eq!(
        by_session.status, 404,
        "another credential (not known to be the same account) sees nothing"
    );
    let by_session = get(
        &weir,
        &api,
        &format!("{CREATE}/session/{}", job.session_id),
        "gh-token",
    )
    .await;
    let vj = vscode::get_job(by_session.status, &by_session.body).unwrap();
    assert_eq!(vj["problem_statement"], "Fix the login bug");
    assert!(!vscode::has_pull_request(&vj));
    let si = get(
        &weir,
        &api,
        &format!("/agents/sessions/{}", job.session_id),
        "gh-token",
    )
    .await;
    let si = vscode::get_session(si.status, &si.body).unwrap();
    assert_eq!(vscode::status_of(&si), "InProgress");
    // Another identity never sees this identity's queued task.
    let other = get(
        &weir,
        &api,
        &format!("/agents/sessions/{}", job.session_id),
        "someone-else",
    )
    .await;
    assert_eq!(other.status, 404);
    assert!(other.headers.get("weir-queued").is_none());

    // Heal: the replay sends it once; the provisional ids now show the real job and session.
    api.set(Mode::Up);
    let done = item_in(&weir, &queue_id, "done").await;
    let tasks = api.tasks();
    assert_eq!(tasks.len(), 1, "exactly one session upstream");
    assert_eq!(done["result"]["job_id"], tasks[0].job_id.as_str());
    // Refused attempts created nothing; the one that got through is the only session.
    let posts = api.count("POST", CREATE);
    let (j, s) = gh_follows(&weir, &api, &job.id, &job.session_id).await;
    assert_eq!(
        j.id, tasks[0].job_id,
        "the real job under the provisional id"
    );
    assert_eq!(
        s.id, tasks[0].session_id,
        "the real session under the provisional id"
    );
    assert_eq!(
        api.count("GET", &format!("{CREATE}/{}", tasks[0].job_id)),
        1
    );
    let vj = get(
        &weir,
        &api,
        &format!("{CREATE}/session/{}", job.session_id),
        "gh-token",
    )
    .await;
    let vj = vscode::get_job(vj.status, &vj.body).unwrap();
    assert_eq!(vj["job_id"], tasks[0].job_id.as_str());
    assert_eq!(api.tasks().len(), 1, "still exactly one");
    assert_eq!(
        api.count("POST", CREATE),
        posts,
        "nothing sent after it was done"
    );
}

/// A replay the upstream refuses ends the provisional job in the upstream's error shape
/// (gh's `JobError`, `response_status_code` as a string) and its session as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replay_is_a_failed_job_in_the_upstreams_error_shape() {
    let api = AgentsApi::start(Mode::Down).await;
    let weir = Weir::start(&[&api.origin()], CONFIG).await;
    let url = format!("{}{CREATE}", api.origin());
    let a = call(&weir, "POST", &url, &gh_headers("gh-token"), GH_BODY).await;
    let job = gh::create_job(a.status, &a.body).unwrap();
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    api.set(Mode::Refuse);
    item_in(&weir, &queue_id, "failed").await;
    let (j, s) = gh_follows(&weir, &api, &job.id, &job.session_id).await;
    assert_eq!(j.status, "failed");
    let e = j.error_info.expect("the job's error");
    assert_eq!(e.response_status_code, 422);
    assert_eq!(e.message, "the base branch does not exist");
    assert_eq!(s.state, "failed");
    assert_eq!(
        s.error.expect("the session's error").message,
        "the base branch does not exist"
    );
    let raw: Value = serde_json::from_slice(
        &get(&weir, &api, &format!("{CREATE}/{}", job.id), "gh-token")
            .await
            .body,
    )
    .unwrap();
    assert_eq!(
        raw["error"]["response_status_code"], "422",
        "a string, as gh's `,string` wants"
    );
    assert_eq!(api.tasks().len(), 0);
}

/// `[queue] answer = "accepted"` keeps the 202 with Weir's queue entry.
#[tokio::test]
async fn answer_accepted_keeps_the_202() {
    let api = AgentsApi::start(Mode::Down).await;
    let cfg = CONFIG.replace("[queue]\n", "[queue]\nanswer = \"accepted\"\n");
    let weir = Weir::start(&[&api.origin()], &cfg).await;
    let url = format!("{}{CREATE}", api.origin());
    let a = call(&weir, "POST", &url, &gh_headers("gh-token"), GH_BODY).await;
    assert_eq!(a.status, 202);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["status"], "queued");
    assert_eq!(
        a.headers["weir-queued"].to_str().unwrap(),
        v["id"].to_string()
    );
    // gh refuses it, as it always did: this is for clients that understand a 202.
    assert!(gh::create_job(a.status, &a.body)
        .unwrap_err()
        .contains("202 Accepted"));
}

/// The Agent Tasks REST API's create (`POST /agents/repos/{o}/{r}/tasks`) is a create too, but
/// no client's source shows what a queued task looks like: Weir keeps the plain 202 there
/// rather than answering in the jobs API's shape.
#[tokio::test]
async fn a_queued_rest_task_create_keeps_the_202() {
    let api = AgentsApi::start(Mode::Down).await;
    let weir = Weir::start(&[&api.origin()], CONFIG).await;
    let url = format!("{}/agents/repos/octo/app/tasks", api.origin());
    let body = r#"{"prompt":"fix the flaky test"}"#;
    let a = call(&weir, "POST", &url, &gh_headers("gh-token"), body).await;
    assert_eq!(a.status, 202);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["status"], "queued");
    assert!(v.get("job_id").is_none(), "{v}");
    assert!(a.headers.contains_key("weir-queued"));
}

/// A create that timed out but happened upstream is found by the lookup, through pages of
/// the repository's sessions and the job behind each candidate, and never sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_happened_upstream_is_found_by_the_lookup_and_never_sent_twice() {
    let api = AgentsApi::start(Mode::Swallow).await;
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    // 60 older sessions of the repository updated after ours (they fill page 1), two created
    // in the window that are not it (one named like ours), and another
    // repository's session with the same statement (never listed for this repository).
    for i in 0..60 {
        api.add(
            "octo/app",
            &format!("old task {i}"),
            now - 2 * hour,
            now + hour,
        );
    }
    api.add("octo/app", "Something else", now, now + hour);
    // Named as ours (a title), but its job says otherwise: only the job can tell.
    api.add_named(
        "octo/app",
        "Fix the login bug in the admin page",
        "Fix the login bug",
        now,
        now + hour,
    );
    api.add("octo/other", "Fix the login bug", now, now + 2 * hour);
    let weir = Weir::start(&[&api.origin()], CONFIG).await;
    let url = format!("{}{CREATE}", api.origin());
    let a = call(&weir, "POST", &url, &gh_headers("gh-token"), GH_BODY).await;
    let job = gh::create_job(a.status, &a.body).unwrap();
    assert_eq!(job.status, "queued");
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    api.set(Mode::Up);
    let done = item_in(&weir, &queue_id, "done").await;
    assert_eq!(done["result"]["found_by_lookup"], true, "{done}");
    let ours: Vec<Task> = api
        .tasks()
        .into_iter()
        .filter(|t| t.repo == "octo/app" && t.problem_statement == "Fix the login bug")
        .collect();
    assert_eq!(ours.len(), 1, "exactly one session upstream");
    assert_eq!(done["result"]["session_id"], ours[0].session_id.as_str());
    assert_eq!(api.count("POST", CREATE), 1, "sent once, never again");
    // Listed as the real clients list, through page 2.
    let lists: Vec<String> = api
        .seen()
        .into_iter()
        .filter(|(m, p)| m == "GET" && p.starts_with("/agents/sessions?"))
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        lists,
        [
            "/agents/sessions?page_number=1&page_size=50&repo_nwo=octo%2Fapp&sort=last_updated_at%2Cdesc",
            "/agents/sessions?page_number=2&page_size=50&repo_nwo=octo%2Fapp&sort=last_updated_at%2Cdesc",
        ]
    );
    // Each candidate confirmed by its job; the old sessions were never asked about.
    let asked = api.count("GET", &format!("{CREATE}/session/"));
    assert_eq!(asked, 2, "the look-alike (its job differs), then ours");
    // The provisional ids serve the session that was found.
    let (j, s) = gh_follows(&weir, &api, &job.id, &job.session_id).await;
    assert_eq!(
        (j.id, s.id),
        (ours[0].job_id.clone(), ours[0].session_id.clone())
    );
}

/// A bad `[queue] answer` names the key and its line.
#[test]
fn a_bad_answer_setting_names_its_key_and_line() {
    let toml = "listen = \"127.0.0.1:0\"\n[queue]\nanswer = \"maybe\"\n";
    let e = weir::config::parse_str(toml, "w.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("queue.answer") && e.contains("w.toml:3"), "{e}");
    assert!(e.contains("\"job\" or \"accepted\""), "{e}");
}
