//! The fake agents API's answers (see `agents_api.rs`): each route's body built from the
//! corpus's answer templates (`tests/corpus/answers.json`) and the fake's store of sessions and
//! jobs, plus the small HTTP helpers they share. Declared next to `agents_api` and `corpus`.
#![allow(dead_code)]

use crate::agents_api::State;
use crate::corpus::Answers;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) fn answer(
    st: &State,
    name: &'static str,
    path: &str,
    q: &[(String, String)],
    body: &[u8],
    auth: &str,
) -> Response<Full<Bytes>> {
    let mut seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    // `/cmc_internal/api/agents/…` is the Task API's `/agents/…` (see `agents_api::route`).
    if seg.starts_with(&["cmc_internal", "api", "agents"]) {
        seg.drain(..2);
    }
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
            let mut log = ans.text.clone().unwrap_or_default();
            if let Some(lines) = st.log_lines.lock().unwrap().get(seg[2]) {
                let lag = st.log_lag.swap(false, std::sync::atomic::Ordering::SeqCst);
                let shown = lines.len() - usize::from(lag && !lines.is_empty());
                log.extend(lines[..shown].iter().map(String::as_str));
            }
            let mut r = Response::new(Full::new(Bytes::from(log)));
            r.headers_mut()
                .insert("content-type", ans.content_type.parse().unwrap());
            r
        }
        "sessions.pr" => {
            let store = st.store.lock().unwrap();
            let sessions: Vec<Value> = store
                .sessions
                .iter()
                .filter(|s| s["resource_id"].as_i64() == seg[4].parse().ok())
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
                .filter(|s| s["resource_id"].as_i64() == seg[3].parse().ok())
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
        // A job is asked for under its repository (`/jobs/{o}/{r}/…`, cli/cli
        // `capi/job.go` `GetJob`; VS Code `getJobBySessionId`): another repository's is not
        // found there (the corpus's own job names none and is found under any).
        "jobs.get" => job_in(st, seg[4], seg[5], "job_id", seg[6]),
        "jobs.by_session" => job_in(st, seg[4], seg[5], "session_id", seg[7]),
        "jobs.enabled" => json_response(200, &a.body("enabled")),
        "custom_agents.list" => json_response(200, &a.body("custom_agents")),
        "custom_agents.get" => {
            let mut d = a.body("custom_agent");
            d["name"] = json!(seg[5]);
            json_response(200, &d)
        }
        "swe.models" => json_response(200, &a.body("cca_models")),
        "memory.enabled" => json_response(200, &a.body("memory_enabled")),
        "repository" => json_response(200, &a.body("repository")),
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
        "chat.completions" => completion(body),
        "graphql" => json_response(
            200,
            &json!({"data": {"viewer": {"login": "octocat", "copilotEndpoints": {"api": st.api_origin}}}}),
        ),
        "tasks.get" | "tasks.repo_get" => {
            let id = seg.last().copied().unwrap_or_default();
            match find(&st.store.lock().unwrap().sessions, "id", id) {
                Some(s) => json_response(200, &task_of(a, s)),
                None => not_found(),
            }
        }
        "tasks.list" | "tasks.mine" => {
            let param = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let archived = param("is_archived") == Some("true");
            let store = st.store.lock().unwrap();
            let tasks: Vec<Value> = if archived {
                vec![]
            } else {
                sorted(&store.sessions)
                    .iter()
                    .map(|s| task_of(a, s))
                    .collect()
            };
            let mut page = a.body("tasks_page");
            page["total_active_count"] = json!(store.sessions.len());
            page["tasks"] = json!(tasks);
            json_response(200, &page)
        }
        "tasks.create" => create_task(st, seg[2], seg[3], body, now),
        "tasks.events" => {
            let page = q
                .iter()
                .find(|(n, _)| n == "page")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(1);
            let mut ev = a.body("task_events");
            // The template's events and those the agent wrote since, on one page; later pages
            // are empty (a short page ends VS Code's paging).
            if let Some(added) = st.task_events.lock().unwrap().get(seg[2]) {
                let list = ev["events"].as_array_mut().expect("the corpus's events");
                list.extend(added.iter().cloned());
                ev["total"] = json!(list.len());
            }
            if page > 1 {
                ev["events"] = json!([]);
            }
            json_response(200, &ev)
        }
        "tasks.steer" => status_only(a, "task_steered"),
        "tasks.pulls" => json_response(a.answers["task_pull"].status, &a.body("task_pull")),
        "tasks.archive" => {
            let mut t = a.body("task_archived");
            t["id"] = json!(seg[2]);
            if seg[3] == "unarchive" {
                t["archived_at"] = Value::Null;
            }
            json_response(200, &t)
        }
        "mc.create" => json_response(a.answers["mc_session"].status, &a.body("mc_session")),
        "mc.events" => json_response(200, &a.body("mc_events")),
        "mc.commands" => json_response(200, &a.body("mc_commands")),
        "mc.delete" => status_only(a, "mc_deleted"),
        "managed_settings" | "team_customizations" => json_response(200, &a.body("unknown")),
        _ => not_found(),
    }
}

/// `POST /agents/swe/v1/jobs/{o}/{r}`: a job and its session, answered as `job_created`.
pub(crate) fn create_job(
    st: &State,
    owner: &str,
    repo: &str,
    body: &[u8],
    now: u64,
) -> Response<Full<Bytes>> {
    let (req, statement) = match create_body(body, "problem_statement") {
        Ok(parsed) => parsed,
        Err(refusal) => return refusal,
    };
    let mut store = st.store.lock().unwrap();
    let (i, session) = new_session(st, &mut store, &req, &statement, owner, repo, now);
    let (job_id, sid) = (format!("job-{i}"), session["id"].clone());
    store.sessions.push(session);
    let mut job = st.answers.body("job_created");
    job["job_id"] = json!(job_id);
    job["session_id"] = sid;
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

/// `POST {prefix}/repos/{o}/{r}/tasks`: a task (stored as its session, whose id it shares),
/// answered as `task_created`.
pub(crate) fn create_task(
    st: &State,
    owner: &str,
    repo: &str,
    body: &[u8],
    now: u64,
) -> Response<Full<Bytes>> {
    let (req, prompt) = match create_body(body, "prompt") {
        Ok(parsed) => parsed,
        Err(refusal) => return refusal,
    };
    let mut store = st.store.lock().unwrap();
    let (_, session) = new_session(st, &mut store, &req, &prompt, owner, repo, now);
    let mut task = st.answers.body("task_created");
    for k in ["id", "name", "state", "created_at"] {
        task[k] = session[k].clone();
    }
    task["updated_at"] = session["last_updated_at"].clone();
    store.sessions.push(session);
    json_response(st.answers.answers["task_created"].status, &task)
}

/// A create's JSON body and its required text field (`problem_statement` for a job, `prompt`
/// for a task), or the refusal the upstream answers without it.
// The refusal is built once and returned whole (test code; `Response` is what the fake sends).
#[allow(clippy::result_large_err)]
fn create_body(body: &[u8], field: &str) -> Result<(Value, String), Response<Full<Bytes>>> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Err(json_response(
            400,
            &json!({"message": "Problems parsing JSON"}),
        ));
    };
    match req[field].as_str().filter(|s| !s.is_empty()) {
        Some(text) => {
            let text = text.to_string();
            Ok((req, text))
        }
        None => Err(json_response(
            422,
            &json!({"message": format!("{field} is required")}),
        )),
    }
}

/// The next stored session a create makes (queued, named `name`, of `owner/repo`), and its
/// number; the caller stores it.
fn new_session(
    st: &State,
    store: &mut crate::agents_api::Store,
    req: &Value,
    name: &str,
    owner: &str,
    repo: &str,
    now: u64,
) -> (u64, Value) {
    let i = store.next;
    store.next += 1;
    let mut session = st.answers.body("session");
    session["id"] = json!(session_id(i));
    session["name"] = json!(name);
    session["state"] = json!("queued");
    session["created_at"] = json!(rfc3339(now));
    session["last_updated_at"] = json!(rfc3339(now));
    session["event_type"] = req["event_type"].clone();
    session["repo_nwo"] = json!(format!("{owner}/{repo}"));
    (i, session)
}

/// An answer with a status and no body (`text: ""`).
fn status_only(a: &Answers, name: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(a.answers[name].status).unwrap_or(StatusCode::OK);
    r
}

/// The job of `owner/repo` whose `key` is `want`, or 404.
fn job_in(st: &State, owner: &str, repo: &str, key: &str, want: &str) -> Response<Full<Bytes>> {
    let nwo = format!("{owner}/{repo}");
    let store = st.store.lock().unwrap();
    match store
        .jobs
        .iter()
        .find(|j| j[key].as_str() == Some(want) && j["repo_nwo"].as_str().is_none_or(|n| n == nwo))
    {
        Some(j) => json_response(200, &strip_private(j)),
        None => not_found(),
    }
}

/// `POST /chat/completions`: one short assistant message, streamed as OpenAI chunks when the
/// request asks for a stream (the Copilot CLI does), else as one completion object.
pub(crate) fn completion(body: &[u8]) -> Response<Full<Bytes>> {
    let req: Value = serde_json::from_slice(body).unwrap_or_default();
    let model = req["model"].as_str().unwrap_or("gpt-5-mini").to_string();
    let text = "Hello from the fake agents API.";
    if req["stream"].as_bool() != Some(true) {
        return json_response(
            200,
            &json!({"id": "cmpl-1", "object": "chat.completion", "created": unix_now(), "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 7, "total_tokens": 8}}),
        );
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "cmpl-1", "object": "chat.completion.chunk", "created": unix_now(), "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        json!({"id": "cmpl-1", "object": "chat.completion.chunk", "created": unix_now(), "model": model,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 7, "total_tokens": 8}}),
    );
    let mut r = Response::new(Full::new(Bytes::from(sse)));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

/// The read-only GitHub MCP server: enough JSON-RPC for a client's start-up.
pub(crate) fn mcp(body: &[u8]) -> Response<Full<Bytes>> {
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

/// The task behind a stored session (the fake's task id is its session's id).
pub(crate) fn task_of(a: &Answers, s: &Value) -> Value {
    let mut t = a.body("task");
    for k in ["id", "name", "state", "created_at"] {
        t[k] = s[k].clone();
    }
    t["updated_at"] = s["last_updated_at"].clone();
    let mut session = t["sessions"][0].clone();
    for k in ["id", "name", "state", "created_at"] {
        session[k] = s[k].clone();
    }
    session["task_id"] = s["id"].clone();
    session["prompt"] = s["name"].clone();
    session["updated_at"] = s["last_updated_at"].clone();
    t["sessions"] = json!([session]);
    t
}

pub(crate) fn account_of(st: &State, auth: &str) -> usize {
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

pub(crate) fn find<'a>(items: &'a [Value], key: &str, want: &str) -> Option<&'a Value> {
    items.iter().find(|v| v[key].as_str() == Some(want))
}

/// Newest first by `last_updated_at` (RFC 3339 strings sort by time).
pub(crate) fn sorted(sessions: &[Value]) -> Vec<Value> {
    let mut v = sessions.to_vec();
    v.sort_by(|a, b| {
        b["last_updated_at"]
            .as_str()
            .cmp(&a["last_updated_at"].as_str())
    });
    v
}

/// Drops the fake's own bookkeeping (`repo_nwo`), which no real answer is known to carry.
pub(crate) fn strip_private(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("repo_nwo");
    }
    v
}

pub(crate) fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub(crate) fn percent_decode(s: &str) -> String {
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

pub(crate) fn json_response(status: u16, v: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        "application/json; charset=utf-8".parse().unwrap(),
    );
    r
}

pub(crate) fn not_found() -> Response<Full<Bytes>> {
    json_response(
        404,
        &json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
}

/// A session id in the UUID form gh checks (`IsSessionID`).
pub(crate) fn session_id(i: u64) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `secs` since the epoch as RFC 3339 UTC (`2026-11-30T10:00:00Z`).
pub(crate) fn rfc3339(secs: u64) -> String {
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
