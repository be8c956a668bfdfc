//! How the lab upstream answers one request: rate limit first (a refused call costs the
//! upstream nothing but the count), then the route's delay, then a deliberate failure or the
//! route's body.

use super::spec::{UpstreamCounters, UpstreamSpec};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Shared state of one upstream's request handler.
pub(crate) struct Responder {
    pub spec: UpstreamSpec,
    pub counters: Arc<UpstreamCounters>,
    /// The token answer's `endpoints.api`: the spec's `api_origin`, else this upstream's own.
    origin: String,
    list_body: Bytes,
    rng: Mutex<StdRng>,
    window: Mutex<(Instant, u32)>,
}

impl Responder {
    pub fn new(spec: UpstreamSpec, counters: Arc<UpstreamCounters>, origin: String) -> Responder {
        let rng = Mutex::new(StdRng::seed_from_u64(spec.seed));
        let list_body = list_body(spec.list_body_bytes);
        Responder {
            spec,
            counters,
            origin,
            list_body,
            rng,
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    pub async fn respond(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        self.counters.requests.record();
        if let Some(wait) = self.over_limit() {
            self.counters.rate_limited.fetch_add(1, Relaxed);
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
            let mut resp = json(
                StatusCode::TOO_MANY_REQUESTS,
                Bytes::from_static(body.as_bytes()),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, secs.max(1).into());
            return resp;
        }
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let route = Route::of(req.method(), &path);
        // Weir's own calls (its `/user`) say so in their `User-Agent`: counted apart.
        let own = req
            .headers()
            .get(header::USER_AGENT)
            .is_some_and(|v| v.as_bytes().starts_with(b"weir/"));
        if own {
            self.counters.weir_own.fetch_add(1, Relaxed);
        }
        self.counters.count_route(match (route, own) {
            (Route::User, true) => "weir user",
            _ => route.name(),
        });
        let account = match route {
            Route::User => lab_account(req.headers()),
            _ => None,
        };
        let delay = match route {
            Route::Token => self.spec.token_latency_ms,
            _ => self.spec.latency_ms,
        };
        let by_repo = req.uri().query().is_some_and(|q| q.contains("repo_nwo="));
        let (intent, mirrored) = match route {
            Route::Create => {
                self.counters.create_requests.fetch_add(1, Relaxed);
                (Some(read_intent(req.into_body()).await), None)
            }
            Route::McSession | Route::McEvents => (None, Some(read_json(req.into_body()).await)),
            _ => (None, None),
        };
        if route == Route::Token {
            self.counters.token_requests.fetch_add(1, Relaxed);
        }
        // A zero sleep would still wait for the next timer tick (about 1 ms).
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let (fail, after_work) = self.draw_failure();
        let fail = fail && (self.spec.mission_control_faults || !route.is_mission_control());
        if route == Route::McEvents && (!fail || after_work) {
            // A 504 after the work: the batch was applied, and the client will send it again.
            if let Some(body) = &mirrored {
                self.counters.mirror.apply(body);
            }
        }
        if let Some((intent, statement)) = &intent {
            // A 504 comes after the session was made: the client cannot tell it from a 500,
            // which is how a "create again" doubles a session.
            if !fail || after_work {
                self.counters.created(intent, statement);
            }
            // A scenario that models sessions (devhour) makes the swallowed create's session
            // too, as the real service would: the in-doubt lookup must be able to find it.
            let world = &self.counters.world;
            if fail && after_work && !world.is_empty() {
                world.add(statement, Duration::ZERO, self.spec.session_timing);
            }
        }
        let resp = if fail {
            self.counters.failed.fetch_add(1, Relaxed);
            if after_work {
                json(
                    StatusCode::GATEWAY_TIMEOUT,
                    Bytes::from_static(
                        br#"{"message":"We couldn't respond to your request in time."}"#,
                    ),
                )
            } else {
                json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Bytes::from_static(br#"{"message":"Server Error"}"#),
                )
            }
        } else {
            let world = &self.counters.world;
            let found = |b: Option<String>| match b {
                Some(b) => json(StatusCode::OK, Bytes::from(b)),
                None => json(
                    StatusCode::NOT_FOUND,
                    Bytes::from_static(br#"{"message":"Not Found"}"#),
                ),
            };
            match route {
                // A scenario that seeded sessions lists them, paged as the real clients ask.
                Route::List if !world.is_empty() => {
                    let (n, size) = page_params(&query);
                    json(StatusCode::OK, Bytes::from(world.list(n, size)))
                }
                Route::List if by_repo => {
                    json(StatusCode::OK, Bytes::from(self.counters.sessions_json()))
                }
                Route::List => json(StatusCode::OK, self.list_body.clone()),
                Route::Session => found(world.session(segment(&path, 2))),
                Route::Logs => match world.logs(segment(&path, 2)) {
                    Some(l) => logs(l),
                    None => found(None),
                },
                Route::Job => found(world.job(Some(segment(&path, 6)), None)),
                Route::JobOfSession => found(world.job(None, Some(segment(&path, 7)))),
                Route::Enabled => json(StatusCode::OK, Bytes::from_static(br#"{"enabled":true}"#)),
                Route::Token => json(StatusCode::OK, self.token_body()),
                Route::User => match account {
                    Some(a) => user_answer(a),
                    None => json(
                        StatusCode::UNAUTHORIZED,
                        Bytes::from_static(br#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}"#),
                    ),
                },
                Route::CopilotUser => json(StatusCode::OK, self.copilot_user_body()),
                Route::TaskList => json(StatusCode::OK, Bytes::from(self.counters.tasks.list())),
                Route::Create => {
                    let (intent, statement) = intent.clone().unwrap_or_default();
                    let (sid, jid) =
                        world.add(&statement, Duration::ZERO, self.spec.session_timing);
                    json(
                        StatusCode::CREATED,
                        created_body(&intent, &statement, &sid, &jid),
                    )
                }
                Route::Task => found(self.counters.tasks.task(segment(&path, task_at(&path)))),
                Route::TaskEvents => {
                    let (page, per) = super::tasks::page_query(&query);
                    found(
                        self.counters
                            .tasks
                            .events(segment(&path, task_at(&path)), page, per),
                    )
                }
                Route::McSession => json(
                    StatusCode::CREATED,
                    Bytes::from(self.counters.mirror.create(&mirrored.unwrap_or_default())),
                ),
                // The client reads only `response.ok`.
                Route::McEvents => json(StatusCode::OK, Bytes::from_static(b"{}")),
                Route::McCommands => {
                    json(StatusCode::OK, Bytes::from(self.counters.mirror.commands()))
                }
                Route::Other => json(StatusCode::OK, Bytes::from_static(br#"{"ok":true}"#)),
            }
        };
        self.counters.answered(Instant::now());
        resp
    }

    /// `Some(wait)` when the rate limit refuses this request.
    fn over_limit(&self) -> Option<Duration> {
        let rl = self.spec.rate_limit?;
        let window = Duration::from_millis(rl.window_ms.max(1));
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(w.0) >= window {
            *w = (now, 0);
        }
        if w.1 >= rl.limit {
            return Some(window.saturating_sub(now.duration_since(w.0)));
        }
        w.1 += 1;
        None
    }

    /// (fail this request, and if it fails, did the work happen anyway).
    fn draw_failure(&self) -> (bool, bool) {
        if self.counters.outage.load(Relaxed) {
            return (true, false); // a hard outage: every call fails with 500 before any work
        }
        if self.spec.failure_rate <= 0.0 {
            return (false, false);
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        (
            rng.gen_bool(self.spec.failure_rate.min(1.0)),
            rng.gen_bool(0.5),
        )
    }

    /// `GET /copilot_internal/user`: the account's Copilot plan and quotas, in the fields VS
    /// Code's `CopilotUserInfo` reads (`copilotTokenManager.ts`); the values are the lab's.
    fn copilot_user_body(&self) -> Bytes {
        let v = serde_json::json!({
            "login": "lab-dev",
            "access_type_sku": "copilot_for_business_seat",
            "analytics_tracking_id": "0123456789abcdef0123456789abcdef",
            "assigned_date": "2025-01-01T00:00:00Z",
            "can_signup_for_limited": false,
            "chat_enabled": true,
            "copilot_plan": "business",
            "organization_login_list": ["octo"],
            "endpoints": { "api": self.origin },
            "quota_reset_date": "2025-12-01",
            "quota_snapshots": {
                "chat": { "entitlement": 0, "remaining": 0, "percent_remaining": 100.0, "unlimited": true, "overage_permitted": false },
                "premium_interactions": { "entitlement": 300, "remaining": 280, "percent_remaining": 93.3, "unlimited": false, "overage_permitted": false }
            }
        });
        Bytes::from(v.to_string())
    }

    fn token_body(&self) -> Bytes {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let n = self.counters.token_requests.load(Relaxed);
        let exp = now + self.spec.token_expires_in_s;
        // The shape VS Code reads (`copilotTokenManager.ts`: token, expires_at, refresh_in, and
        // `endpoints.api`, the per-account host its agent calls then go to).
        Bytes::from(format!(
            r#"{{"token":"tid=lab{n};exp={exp};sku=copilot_for_business","expires_at":{exp},"refresh_in":{},"endpoints":{{"api":"{}"}}}}"#,
            self.spec.token_refresh_in_s, self.origin
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    List,
    Session,
    Logs,
    Job,
    JobOfSession,
    Enabled,
    Token,
    Create,
    /// The Task API: one task, and a page of its events (`/cmc_internal/api/agents/tasks/…`
    /// or the public `/agents/tasks/…`).
    Task,
    TaskEvents,
    /// Mission Control: the session create, its events batches, its commands poll.
    McSession,
    McEvents,
    McCommands,
    /// api.github.com: the signed-in user (VS Code's Task API asks it before every repository's
    /// task list, Weir to resolve a credential), and the account's Copilot plan (VS Code asks it
    /// beside every token fetch).
    User,
    CopilotUser,
    /// The Task API's lists (a repository's, or all).
    TaskList,
    Other,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let get = method == Method::GET;
        match segs.as_slice() {
            ["copilot_internal", "v2", "token", ..] => Route::Token,
            ["agents", "swe", "v1", "jobs", _, _] if method == Method::POST => Route::Create,
            ["agents", "swe", "v1", "jobs", _, _, "enabled"] if get => Route::Enabled,
            ["agents", "swe", "v1", "jobs", _, _, "session", _] if get => Route::JobOfSession,
            ["agents", "swe", "v1", "jobs", _, _, _] if get => Route::Job,
            ["cmc_internal", "api", "agents", "tasks", _] | ["agents", "tasks", _] if get => {
                Route::Task
            }
            ["cmc_internal", "api", "agents", "tasks", _, "events"]
            | ["agents", "tasks", _, "events"]
                if get =>
            {
                Route::TaskEvents
            }
            ["user"] if get => Route::User,
            ["copilot_internal", "user"] if get => Route::CopilotUser,
            ["cmc_internal", "api", "agents", "tasks"]
            | ["cmc_internal", "api", "agents", "repos", _, _, "tasks"]
            | ["agents", "tasks"]
            | ["agents", "repos", _, _, "tasks"]
                if get =>
            {
                Route::TaskList
            }
            ["agents", "sessions"] if method == Method::POST => Route::McSession,
            ["agents", "sessions", _, "events"] if method == Method::POST => Route::McEvents,
            ["agents", "sessions", _, "commands"] if get => Route::McCommands,
            ["agents", "sessions"] if get => Route::List,
            ["agents", "sessions", "nwo", ..] | ["agents", "sessions", "resource", ..] if get => {
                Route::List
            }
            ["agents", "sessions", _, "logs"] if get => Route::Logs,
            ["agents", "sessions", _] if get => Route::Session,
            _ => Route::Other,
        }
    }

    /// The name the counters and the reports use.
    fn name(self) -> &'static str {
        match self {
            Route::List => "list",
            Route::Session => "session",
            Route::Logs => "logs",
            Route::Job => "job",
            Route::JobOfSession => "job",
            Route::Enabled => "enabled",
            Route::Token => "token",
            Route::Create => "create",
            Route::Task => "task",
            Route::TaskEvents => "task events",
            Route::McSession => "mc session",
            Route::McEvents => "mc events",
            Route::McCommands => "mc commands",
            Route::User => "user",
            Route::CopilotUser => "copilot user",
            Route::TaskList => "task list",
            Route::Other => "other",
        }
    }

    fn is_mission_control(self) -> bool {
        matches!(self, Route::McSession | Route::McEvents | Route::McCommands)
    }
}

/// The lab's one account (`lab-dev`, id 7, the tasks' `creator`) and the OAuth token a
/// request carries: VS Code's GitHub session or gh's, each its own app and scopes.
struct LabAccount {
    scopes: &'static str,
    client_id: &'static str,
}

fn lab_account(h: &http::HeaderMap) -> Option<LabAccount> {
    let auth = h.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth.split_once(' ').map_or(auth, |(_, t)| t).trim();
    match token {
        "gho_lab_vscode" => Some(LabAccount {
            scopes: "read:user, repo, user:email, workflow",
            client_id: "01ab8ac9400c4e429b23",
        }),
        "gho_lab_gh" => Some(LabAccount {
            scopes: "gist, read:org, repo, workflow",
            client_id: "178c6fc778ccc68e1d6a",
        }),
        _ => None,
    }
}

/// `GET /user` as api.github.com answers an OAuth token: the user, and the token's scopes and
/// OAuth app in `X-OAuth-Scopes` / `X-OAuth-Client-Id`.
fn user_answer(a: LabAccount) -> Response<Full<Bytes>> {
    let v = serde_json::json!({
        "login": "lab-dev", "id": 7, "node_id": "U_lab7",
        "avatar_url": "https://avatars.githubusercontent.com/u/7?v=4", "gravatar_id": "",
        "url": "https://api.github.com/users/lab-dev", "html_url": "https://github.com/lab-dev",
        "type": "User", "user_view_type": "public", "site_admin": false, "name": "Lab Dev",
        "company": null, "blog": "", "location": null, "email": null, "hireable": null,
        "bio": null, "twitter_username": null, "public_repos": 3, "public_gists": 0,
        "followers": 0, "following": 0,
        "created_at": "2020-01-01T00:00:00Z", "updated_at": "2025-10-29T00:00:00Z",
    });
    let mut resp = json(StatusCode::OK, Bytes::from(v.to_string()));
    let h = resp.headers_mut();
    h.insert("x-oauth-scopes", http::HeaderValue::from_static(a.scopes));
    h.insert(
        "x-oauth-client-id",
        http::HeaderValue::from_static(a.client_id),
    );
    h.insert(
        "x-accepted-oauth-scopes",
        http::HeaderValue::from_static(""),
    );
    resp
}

/// The segment of a Task API path that holds the task's id (after `tasks`).
fn task_at(path: &str) -> usize {
    path.trim_matches('/')
        .split('/')
        .position(|s| s == "tasks")
        .map_or(0, |i| i + 1)
}

/// The `n`-th `/`-separated segment of `path` (from 0, after the leading `/`).
fn segment(path: &str, n: usize) -> &str {
    path.trim_matches('/').split('/').nth(n).unwrap_or("")
}

/// `page_number` (from 1) and `page_size` of a list query; the real clients send both
/// (gh 50, VS Code 20). Absent: page 1 of 30.
fn page_params(query: &str) -> (usize, usize) {
    let mut n = 1;
    let mut size = 30;
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "page_number" => n = v.parse().unwrap_or(1),
            "page_size" => size = v.parse::<usize>().unwrap_or(30).clamp(1, 100),
            _ => {}
        }
    }
    (n.max(1), size)
}

/// A JSON request body (Mission Control's); `null` if it is not JSON.
async fn read_json(body: Incoming) -> serde_json::Value {
    match Limited::new(body, 1024 * 1024).collect().await {
        Ok(c) => serde_json::from_slice(&c.to_bytes()).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    }
}

/// The `intent` and `problem_statement` fields of a create body; empty if missing.
async fn read_intent(body: Incoming) -> (String, String) {
    let Ok(collected) = Limited::new(body, 64 * 1024).collect().await else {
        return (String::new(), String::new());
    };
    let v: serde_json::Value = serde_json::from_slice(&collected.to_bytes()).unwrap_or_default();
    let field = |k: &str| {
        v.get(k)
            .and_then(|i| i.as_str())
            .unwrap_or_default()
            .to_string()
    };
    // Real clients send no `intent`: the statement names the task then.
    let statement = field("problem_statement");
    let intent = field("intent");
    let intent = if intent.is_empty() {
        statement.clone()
    } else {
        intent
    };
    (intent, statement)
}

/// A created job as gh's `Job` (cli/cli `capi/job.go`) and VS Code's `RemoteAgentJobResponse`
/// read it: `job_id` and `session_id` are what both require. `intent` is the lab's own field.
fn created_body(intent: &str, statement: &str, session_id: &str, job_id: &str) -> Bytes {
    let v = serde_json::json!({
        "job_id": job_id,
        "session_id": session_id,
        "problem_statement": statement,
        "status": "queued",
        "actor": { "id": 7, "login": "lab-dev" },
        "intent": intent,
    });
    Bytes::from(v.to_string())
}

/// A session list of about `size` bytes (the real one is a few KB of JSON).
fn list_body(size: usize) -> Bytes {
    let mut s = String::from(r#"{"sessions":["#);
    let mut i = 0;
    while s.len() + 420 < size || i == 0 {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id":"s{i:06}","name":"task {i}","user_id":7,"agent_id":1,"state":"in_progress","owner_id":99,"repo_id":4242,"resource_type":"pull","resource_id":{},"resource_global_id":"PR_lab{i}","last_updated_at":"2025-10-29T16:00:00Z","created_at":"2025-10-29T15:40:00Z","event_type":"visual_studio_code_remote_agent_tool_invoked","premium_requests":1.0,"error":null}}"#,
            100 + i
        ));
        i += 1;
    }
    s.push_str("]}");
    Bytes::from(s)
}

/// A session's logs as the corpus answers them (`tests/corpus/answers.json`, `session_logs`):
/// `data:` lines typed `text/event-stream` (the real type is not known), sent whole with a
/// length. That the answer ends is known: gh (`io.ReadAll`) and VS Code (`response.text()`)
/// both wait for its end before they parse it, then ask again 5 s / 3 s later.
fn logs(body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

fn json(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_bodies() {
        assert_eq!(Route::of(&Method::GET, "/agents/sessions"), Route::List);
        assert_eq!(
            Route::of(&Method::POST, "/agents/swe/v1/jobs/o/r"),
            Route::Create
        );
        assert_eq!(
            Route::of(&Method::GET, "/copilot_internal/v2/token"),
            Route::Token
        );
        assert_eq!(Route::of(&Method::GET, "/repos/o/r"), Route::Other);
        assert_eq!(
            Route::of(&Method::GET, "/agents/sessions/x"),
            Route::Session
        );
        assert_eq!(
            Route::of(&Method::GET, "/agents/sessions/x/logs"),
            Route::Logs
        );
        assert_eq!(
            Route::of(&Method::GET, "/agents/swe/v1/jobs/o/r/j1"),
            Route::Job
        );
        assert_eq!(
            Route::of(&Method::GET, "/agents/swe/v1/jobs/o/r/session/s1"),
            Route::JobOfSession
        );
        assert_eq!(
            Route::of(&Method::GET, "/agents/swe/v1/jobs/o/r/enabled"),
            Route::Enabled
        );
        // The Task API under both prefixes, and Mission Control (issue #29).
        let task = "/cmc_internal/api/agents/tasks/t1";
        assert_eq!(Route::of(&Method::GET, task), Route::Task);
        assert_eq!(segment(task, task_at(task)), "t1");
        assert_eq!(
            Route::of(&Method::GET, "/agents/tasks/t1/events"),
            Route::TaskEvents
        );
        assert_eq!(
            Route::of(&Method::POST, "/agents/sessions"),
            Route::McSession
        );
        assert_eq!(
            Route::of(&Method::POST, "/agents/sessions/m1/events"),
            Route::McEvents
        );
        assert_eq!(
            Route::of(&Method::GET, "/agents/sessions/m1/commands"),
            Route::McCommands
        );
        assert!(Route::McEvents.is_mission_control() && !Route::Task.is_mission_control());
        assert_eq!(Route::of(&Method::GET, "/user"), Route::User);
        assert_eq!(
            Route::of(&Method::GET, "/copilot_internal/user"),
            Route::CopilotUser
        );
        assert_eq!(
            Route::of(&Method::GET, "/cmc_internal/api/agents/repos/o/r/tasks"),
            Route::TaskList
        );
        assert_eq!(
            page_params("page_number=2&page_size=50&sort=last_updated_at%2Cdesc"),
            (2, 50)
        );
        let b = list_body(1024);
        assert!(b.len() <= 1024 && b.len() > 500, "{}", b.len());
        assert!(serde_json::from_slice::<serde_json::Value>(&b).is_ok());
    }
}
