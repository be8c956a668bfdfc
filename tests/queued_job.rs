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
//! The upstream is the project's shared fake agents API in the real shapes
//! (`tests/common/agents_api.rs`, answers from `tests/corpus/answers.json`), served over TLS
//! as `api.githubcopilot.com` and reached through Weir's interception, as the clients reach it.

#[path = "common/agents_answers.rs"]
mod agents_answers;
#[path = "common/agents_api.rs"]
mod agents_api;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/tls.rs"]
mod tls;

use agents_api::{AgentsApi, Fault, FaultKind, SeedTask};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tls::TlsWeir;

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
// The upstream: the shared fake agents API, behind Weir's TLS interception
// ---------------------------------------------------------------------------------------

/// The host gh and VS Code send these calls to; the fake serves it and Weir reaches it
/// through `connect_to` + `ca_file`.
const HOST: &str = "api.githubcopilot.com";

/// Both create routes (the jobs API and the Agent Tasks REST API) refused with 503, nothing
/// created, until healed; every read answers as usual.
fn down() -> Vec<Fault> {
    ["jobs.create", "tasks.create"]
        .into_iter()
        .map(|r| Fault {
            route: Some(r),
            kind: FaultKind::Status(503),
            times: None,
        })
        .collect()
}

/// Weir managing [`HOST`] and [`GITHUB_API`] through the fake, with TLS interception, and
/// `config` after it.
async fn weir_for(api: &AgentsApi, config: &str) -> TlsWeir {
    TlsWeir::start(&format!(
        "watch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"https://{HOST}\"\n\
         connect_to = \"{0}\"\nca_file = \"{1}\"\n\
         [[upstream]]\nname = \"github-api\"\norigin = \"https://{GITHUB_API}\"\n\
         connect_to = \"{0}\"\nca_file = \"{1}\"\n{config}\n[network]\ndetect_os = false\n",
        api.addr,
        api.ca_pem.display()
    ))
    .await
}

/// VS Code's Task API host (`@vscode/copilot-api` 0.5.2: the dotcom API).
const GITHUB_API: &str = "api.github.com";

// ---------------------------------------------------------------------------------------
// Calls through Weir
// ---------------------------------------------------------------------------------------

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

/// One call to `https://{HOST}{path}` as a client behind a proxy makes it: CONNECT through
/// Weir (hyper's upgrade), TLS trusting only Weir's CA (SNI = the host), then HTTP/1.1.
async fn call(
    weir: &TlsWeir,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Answer {
    call_on(weir, HOST, method, path, headers, body).await
}

/// [`call`] to `https://{host}{path}`.
async fn call_on(
    weir: &TlsWeir,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Answer {
    use hyper::client::conn::http1;
    let tcp = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let (mut proxy, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn.with_upgrades());
    let target = format!("{host}:443");
    let connect = http::Request::connect(&target)
        .header("host", &target)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let tunnel = proxy.send_request(connect).await.unwrap();
    assert_eq!(tunnel.status(), 200, "CONNECT {target}");
    let tunnel = TokioIo::new(hyper::upgrade::on(tunnel).await.unwrap());
    // Only Weir's CA is trusted; ring is rustls's one provider here (Cargo.toml).
    let mut roots = rustls::RootCertStore::empty();
    roots.add(weir.ca.cert_der().to_vec().into()).unwrap();
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let sni = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(sni, tunnel)
        .await
        .unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let mut rb = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (k, v) in headers {
        rb = rb.header(*k, v);
    }
    let r = sender
        .send_request(rb.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = r.into_parts();
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

async fn get(weir: &TlsWeir, path: &str, token: &str) -> Answer {
    call(weir, "GET", path, &gh_headers(token)[..1], "").await
}

/// Waits (bounded) until the queue item is in `state`; its control-API view.
async fn item_in(weir: &TlsWeir, id: &str, state: &str) -> Value {
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
async fn gh_follows(weir: &TlsWeir, job: &str, sid: &str) -> (gh::Job, gh::Session) {
    let j = get(weir, &format!("{CREATE}/{job}"), "gh-token").await;
    let job = gh::get_job(j.status, &j.body).unwrap_or_else(|e| panic!("{e}: {:?}", j.body));
    let s = get(weir, &format!("/agents/sessions/{sid}"), "gh-token").await;
    let session =
        gh::get_session(s.status, &s.body).unwrap_or_else(|e| panic!("{e}: {:?}", s.body));
    let l = get(weir, &format!("/agents/sessions/{sid}/logs"), "gh-token").await;
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
    let api = AgentsApi::start().await;
    api.set_faults(down());
    let weir = weir_for(&api, CONFIG).await;
    let a = call(&weir, "POST", CREATE, &gh_headers("gh-token"), GH_BODY).await;

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
    assert_eq!(
        api.jobs_in("octo/app").len(),
        0,
        "nothing was created upstream yet"
    );

    // The same create again (the user pressed create twice): the same provisional job.
    let again = call(&weir, "POST", CREATE, &gh_headers("gh-token"), GH_BODY).await;
    let again = gh::create_job(again.status, &again.body).unwrap();
    assert_eq!(
        (again.id.as_str(), again.session_id.as_str()),
        (job.id.as_str(), job.session_id.as_str())
    );

    // While it waits: gh's GetJob, GetSession and logs, and VS Code's calls, from the queue.
    let (j, s) = gh_follows(&weir, &job.id, &job.session_id).await;
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
        &format!("{CREATE}/session/{}", job.session_id),
        "gh-token",
    )
    .await;
    let vj = vscode::get_job(by_session.status, &by_session.body).unwrap();
    assert_eq!(vj["problem_statement"], "Fix the login bug");
    assert!(!vscode::has_pull_request(&vj));
    let si = get(
        &weir,
        &format!("/agents/sessions/{}", job.session_id),
        "gh-token",
    )
    .await;
    let si = vscode::get_session(si.status, &si.body).unwrap();
    assert_eq!(vscode::status_of(&si), "InProgress");
    // Another identity never sees this identity's queued task.
    let other = get(
        &weir,
        &format!("/agents/sessions/{}", job.session_id),
        "someone-else",
    )
    .await;
    assert_eq!(other.status, 404);
    assert!(other.headers.get("weir-queued").is_none());

    // Heal: the replay sends it once; the provisional ids now show the real job and session.
    api.heal();
    let done = item_in(&weir, &queue_id, "done").await;
    let tasks = api.jobs_in("octo/app");
    assert_eq!(tasks.len(), 1, "exactly one session upstream");
    let (job_id, session_id) = (
        tasks[0]["job_id"].as_str().unwrap(),
        tasks[0]["session_id"].as_str().unwrap(),
    );
    assert_eq!(done["result"]["job_id"], job_id);
    // Refused attempts created nothing; the one that got through is the only session.
    let posts = api.count("jobs.create");
    let (j, s) = gh_follows(&weir, &job.id, &job.session_id).await;
    assert_eq!(j.id, job_id, "the real job under the provisional id");
    assert_eq!(
        s.id, session_id,
        "the real session under the provisional id"
    );
    assert_eq!(
        api.count_exact(HOST, "GET", &format!("{CREATE}/{job_id}")),
        1
    );
    let vj = get(
        &weir,
        &format!("{CREATE}/session/{}", job.session_id),
        "gh-token",
    )
    .await;
    let vj = vscode::get_job(vj.status, &vj.body).unwrap();
    assert_eq!(vj["job_id"], job_id);
    assert_eq!(api.jobs_in("octo/app").len(), 1, "still exactly one");
    assert_eq!(
        api.count("jobs.create"),
        posts,
        "nothing sent after it was done"
    );
}

/// A replay the upstream refuses ends the provisional job in the upstream's error shape
/// (gh's `JobError`, `response_status_code` as a string) and its session as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replay_is_a_failed_job_in_the_upstreams_error_shape() {
    let api = AgentsApi::start().await;
    api.set_faults(down());
    let weir = weir_for(&api, CONFIG).await;
    let a = call(&weir, "POST", CREATE, &gh_headers("gh-token"), GH_BODY).await;
    let job = gh::create_job(a.status, &a.body).unwrap();
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    api.set_faults(vec![Fault {
        route: Some("jobs.create"),
        kind: FaultKind::Refused {
            status: 422,
            message: "the base branch does not exist",
        },
        times: None,
    }]);
    item_in(&weir, &queue_id, "failed").await;
    let (j, s) = gh_follows(&weir, &job.id, &job.session_id).await;
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
        &get(&weir, &format!("{CREATE}/{}", job.id), "gh-token")
            .await
            .body,
    )
    .unwrap();
    assert_eq!(
        raw["error"]["response_status_code"], "422",
        "a string, as gh's `,string` wants"
    );
    assert_eq!(api.jobs_in("octo/app").len(), 0);
}

/// `[queue] answer = "accepted"` keeps the 202 with Weir's queue entry.
#[tokio::test]
async fn answer_accepted_keeps_the_202() {
    let api = AgentsApi::start().await;
    api.set_faults(down());
    let cfg = CONFIG.replace("[queue]\n", "[queue]\nanswer = \"accepted\"\n");
    let weir = weir_for(&api, &cfg).await;
    let a = call(&weir, "POST", CREATE, &gh_headers("gh-token"), GH_BODY).await;
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

/// VS Code's Task API backend (`cloudAgentBackend.version` = `v2`): `TaskApiHttpClient` and
/// the `TaskApiBackend` calls that use it, transcribed from microsoft/vscode
/// `extensions/copilot/src/extension/chatSessions/vscode-node/taskApiBackend.ts` (search-index
/// id 54542799572, the newest stored; the request rules are the same at
/// 9a07f2643b6869e6de85c675ae6733ef9c0c9649).
mod vscode_tasks {
    use serde_json::Value;

    /// `TaskApiHttpClient._request`: not `ok` (200–299) throws; `202` and `204` are
    /// `undefined`; anything else is `response.json()` (which throws on a body that is not
    /// JSON).
    pub fn request(status: u16, body: &[u8]) -> Result<Option<Value>, String> {
        if !(200..300).contains(&status) {
            return Err(format!("Task API request failed: {status}"));
        }
        if status == 202 || status == 204 {
            return Ok(None);
        }
        serde_json::from_slice(body)
            .map(Some)
            .map_err(|e| format!("response.json(): {e}"))
    }

    /// `createTask`: `undefined` throws "returned an empty response"; the task's `id` becomes
    /// both the task and the session id (the only field required).
    pub fn create_task(status: u16, body: &[u8]) -> Result<(String, Value), String> {
        let task = request(status, body)?.ok_or("Task API create returned an empty response")?;
        let id = task["id"]
            .as_str()
            .ok_or("the created task has no string id")?;
        Ok((id.to_string(), task))
    }

    /// `getTask`: `undefined` throws; the turn streamer then reads `state` and `sessions`.
    pub fn get_task(status: u16, body: &[u8]) -> Result<Value, String> {
        let task = request(status, body)?.ok_or("Task API get returned an empty response")?;
        task["state"].as_str().ok_or("the task has no state")?;
        Ok(task)
    }

    /// `getTaskEvents`: `undefined` is `{events: [], total: 0}`.
    pub fn get_task_events(status: u16, body: &[u8]) -> Result<(Vec<Value>, Option<u64>), String> {
        let Some(v) = request(status, body)? else {
            return Ok((vec![], Some(0)));
        };
        let events = v["events"].as_array().ok_or("no events array")?.clone();
        Ok((events, v["total"].as_u64()))
    }

    /// `ACTIVE_STATES`: the streamer keeps polling a task in one of these.
    /// `listTasks`/`listRepoTasks`: a `200` whose JSON has `tasks`.
    pub fn list_tasks(status: u16, body: &[u8]) -> Result<Vec<Value>, String> {
        let v = request(status, body)?.ok_or("an empty response")?;
        v["tasks"]
            .as_array()
            .cloned()
            .ok_or_else(|| format!("no tasks: {v}"))
    }

    pub fn is_active(task: &Value) -> bool {
        matches!(
            task["state"].as_str(),
            Some("queued" | "in_progress" | "idle" | "waiting_for_user")
        )
    }

    /// `isCloudCodingAgentTask`: the session list keeps only these.
    pub fn is_cloud_coding_agent_task(task: &Value) -> bool {
        task["agent_collaborators"].as_array().is_some_and(|c| {
            c.iter().any(|c| {
                matches!(
                    c["slug"].as_str(),
                    Some("copilot-developer" | "copilot-swe-agent")
                )
            })
        })
    }

    /// `_authHeaders` plus the body's Content-Type.
    pub fn headers(token: &str) -> Vec<(&'static str, String)> {
        vec![
            ("authorization", format!("Bearer {token}")),
            ("accept", "application/json".into()),
            ("content-type", "application/json".into()),
        ]
    }
}

/// A Task API GET on [`GITHUB_API`] as VS Code's `TaskApiHttpClient` sends it (no body).
async fn vscode_get(weir: &TlsWeir, path: &str, token: &str) -> Answer {
    call_on(
        weir,
        GITHUB_API,
        "GET",
        path,
        &vscode_tasks::headers(token)[..2],
        "",
    )
    .await
}

/// A Task API create during an outage, sent as VS Code's Task API backend sends it, is
/// accepted by `TaskApiHttpClient`'s rules (a `201` task, never the `202` its `createTask`
/// fails on); the provisional task and its events are followed while it waits; after healing
/// exactly one task exists upstream and the provisional id serves the real task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_api_create_during_an_outage_is_a_task_vscode_accepts_and_follows() {
    let api = AgentsApi::start().await;
    api.set_faults(down());
    let weir = weir_for(&api, CONFIG).await;
    let prefix = "/cmc_internal/api/agents";
    let prompt = "Fix the flaky login test";
    // taskApiBackend.ts `createTask`'s body (newest stored version).
    let body = serde_json::json!({
        "prompt": prompt, "event_content": prompt, "problem_statement": prompt,
        "base_ref": "main", "create_pull_request": false,
        "event_type": "visual_studio_code_remote_agent_tool_invoked",
    })
    .to_string();
    let h = vscode_tasks::headers("vscode-token");
    let create = format!("{prefix}/repos/octo/app/tasks");
    let a = call_on(&weir, GITHUB_API, "POST", &create, &h, &body).await;
    assert_eq!(a.status, 201, "{:?}", a.body);
    let (id, task) = vscode_tasks::create_task(a.status, &a.body).unwrap();
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    assert_eq!(task["state"], "queued");
    assert!(vscode_tasks::is_cloud_coding_agent_task(&task), "{task}");
    assert_eq!(
        api.count("tasks.create"),
        1,
        "one attempt, refused by the outage"
    );

    // The turn streamer's poll while it waits: the task and every events page.
    let g = vscode_get(&weir, &format!("{prefix}/tasks/{id}"), "vscode-token").await;
    let waiting = vscode_tasks::get_task(g.status, &g.body).unwrap();
    assert_eq!(waiting["id"], id.as_str());
    assert!(vscode_tasks::is_active(&waiting), "{waiting}");
    let e = vscode_get(
        &weir,
        &format!("{prefix}/tasks/{id}/events?per_page=100&page=1"),
        "vscode-token",
    )
    .await;
    assert_eq!(
        vscode_tasks::get_task_events(e.status, &e.body).unwrap(),
        (vec![], Some(0))
    );
    // Another credential of another account is not answered for it: it goes upstream.
    let other = vscode_get(&weir, &format!("{prefix}/tasks/{id}"), "someone-else").await;
    assert_eq!(other.status, 404, "{:?}", other.body);
    // VS Code's task lists (both of `TaskApiHttpClient`'s) hold the waiting task, first, and
    // its own filter keeps it; another account's list does not.
    let lists = [
        format!("{prefix}/repos/octo/app/tasks?per_page=100&creator_id=1001"),
        format!("{prefix}/tasks?per_page=100"),
    ];
    for url in &lists {
        let l = vscode_get(&weir, url, "vscode-token").await;
        let tasks = vscode_tasks::list_tasks(l.status, &l.body).unwrap();
        assert_eq!(tasks[0]["id"], id.as_str(), "{url}: {tasks:?}");
        assert!(vscode_tasks::is_cloud_coding_agent_task(&tasks[0]));
        let l = vscode_get(&weir, url, "someone-else").await;
        let tasks = vscode_tasks::list_tasks(l.status, &l.body).unwrap();
        assert!(
            tasks.iter().all(|t| t["id"] != id.as_str()),
            "{url}: {tasks:?}"
        );
    }

    // Healed: replayed once; exactly one task upstream, and the provisional id serves it.
    let refused = api.count("tasks.create");
    api.set_faults(vec![]);
    let item = item_in(&weir, &queue_id, "done").await;
    let made: Vec<Value> = api
        .sessions()
        .into_iter()
        .filter(|s| s["name"] == prompt)
        .collect();
    assert_eq!(made.len(), 1, "exactly one task upstream: {made:?}");
    assert_eq!(
        api.count("tasks.create") - refused,
        1,
        "one replay once healed (the outage refused the create and any replay before it)"
    );
    let real = made[0]["id"].as_str().unwrap().to_string();
    assert_eq!(item["result"]["job_id"], real.as_str(), "{item}");
    // Sent: the list is the upstream's again (the provisional task is not added).
    let l = vscode_get(&weir, &lists[1], "vscode-token").await;
    let tasks = vscode_tasks::list_tasks(l.status, &l.body).unwrap();
    assert!(tasks.iter().all(|t| t["id"] != id.as_str()), "{tasks:?}");
    let g = vscode_get(&weir, &format!("{prefix}/tasks/{id}"), "vscode-token").await;
    let sent = vscode_tasks::get_task(g.status, &g.body).unwrap();
    assert_eq!(
        sent["id"],
        real.as_str(),
        "the real task under the provisional id"
    );
    let e = vscode_get(
        &weir,
        &format!("{prefix}/tasks/{id}/events?per_page=100&page=1"),
        "vscode-token",
    )
    .await;
    let (events, total) = vscode_tasks::get_task_events(e.status, &e.body).unwrap();
    assert_eq!(
        (events.len(), total),
        (3, Some(3)),
        "the real task's events"
    );
    // Sending the same create again within the dedupe window joins it: no second task.
    let again = call_on(&weir, GITHUB_API, "POST", &create, &h, &body).await;
    assert!(
        again.status == 201 || again.status == 200,
        "{:?}",
        again.body
    );
    assert_eq!(
        api.sessions()
            .iter()
            .filter(|s| s["name"] == prompt)
            .count(),
        1
    );
}

/// The public Agent Tasks REST API's create (`POST /agents/repos/{o}/{r}/tasks`) is queued
/// the same way: a `201` task.
#[tokio::test]
async fn a_queued_rest_task_create_is_a_task() {
    let api = AgentsApi::start().await;
    api.set_faults(down());
    let weir = weir_for(&api, CONFIG).await;
    let url = "/agents/repos/octo/app/tasks";
    let body = r#"{"prompt":"fix the flaky test"}"#;
    let a = call(&weir, "POST", url, &gh_headers("gh-token"), body).await;
    assert_eq!(a.status, 201, "{:?}", a.body);
    let (id, task) = vscode_tasks::create_task(a.status, &a.body).unwrap();
    assert!(id.contains("-87e1-"), "a provisional id: {id}");
    assert_eq!(task["state"], "queued");
    assert!(a.headers.contains_key("weir-queued"));
}

/// A create that timed out but happened upstream is found by the lookup, through pages of
/// the repository's sessions and the job behind each candidate, and never sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_happened_upstream_is_found_by_the_lookup_and_never_sent_twice() {
    let api = AgentsApi::start().await;
    // Creates are done, then their answer lost (504): the create is in doubt.
    api.fail(Fault {
        route: Some("jobs.create"),
        kind: FaultKind::AnswerLost(504),
        times: None,
    });
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    // 60 older sessions of the repository updated after ours (they fill page 1), two created
    // in the window that are not it (one named like ours), and another
    // repository's session with the same statement (never listed for this repository).
    for i in 0..60 {
        let old = format!("old task {i}");
        api.seed_task(task("octo/app", &old, &old, now - 2 * hour, now + hour));
    }
    let other = "Something else";
    api.seed_task(task("octo/app", other, other, now, now + hour));
    // Named as ours (a title), but its job says otherwise: only the job can tell.
    api.seed_task(task(
        "octo/app",
        "Fix the login bug",
        "Fix the login bug in the admin page",
        now,
        now + hour,
    ));
    let same = "Fix the login bug";
    api.seed_task(task("octo/other", same, same, now, now + 2 * hour));
    let weir = weir_for(&api, CONFIG).await;
    let a = call(&weir, "POST", CREATE, &gh_headers("gh-token"), GH_BODY).await;
    let job = gh::create_job(a.status, &a.body).unwrap();
    assert_eq!(job.status, "queued");
    let queue_id = a.headers["weir-queued"].to_str().unwrap().to_string();
    api.heal();
    let done = item_in(&weir, &queue_id, "done").await;
    assert_eq!(done["result"]["found_by_lookup"], true, "{done}");
    let ours: Vec<Value> = api
        .jobs_in("octo/app")
        .into_iter()
        .filter(|j| j["problem_statement"] == "Fix the login bug")
        .collect();
    assert_eq!(ours.len(), 1, "exactly one session upstream");
    assert_eq!(done["result"]["session_id"], ours[0]["session_id"]);
    assert_eq!(api.count("jobs.create"), 1, "sent once, never again");
    // Listed as the real clients list, through page 2.
    let lists: Vec<String> = api
        .log()
        .into_iter()
        .filter(|l| l.route == "sessions.list")
        .map(|l| l.path_and_query)
        .collect();
    assert_eq!(
        lists,
        [
            "/agents/sessions?page_number=1&page_size=50&repo_nwo=octo%2Fapp&sort=last_updated_at%2Cdesc",
            "/agents/sessions?page_number=2&page_size=50&repo_nwo=octo%2Fapp&sort=last_updated_at%2Cdesc",
        ]
    );
    // Each candidate confirmed by its job; the old sessions were never asked about.
    let asked = api.count("jobs.by_session");
    assert_eq!(asked, 2, "the look-alike (its job differs), then ours");
    // The provisional ids serve the session that was found.
    let (j, s) = gh_follows(&weir, &job.id, &job.session_id).await;
    assert_eq!(
        (Value::from(j.id), Value::from(s.id)),
        (ours[0]["job_id"].clone(), ours[0]["session_id"].clone())
    );
}

/// A task of `repo` to seed: its session's name, its job's statement, created and updated when.
fn task<'a>(
    repo: &'a str,
    name: &'a str,
    problem_statement: &'a str,
    created_at: SystemTime,
    last_updated_at: SystemTime,
) -> SeedTask<'a> {
    SeedTask {
        repo,
        name,
        problem_statement,
        created_at,
        last_updated_at,
    }
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

/// A Task API turn as VS Code's `TaskTurnStreamer` follows it (the task and its events page
/// asked together, until the task is no longer active) never ends without its last events,
/// even when the events copy Weir holds is younger than the task copy (#29: the devhour run
/// lost 62 events on Oct 29 so). Here the events page was fetched after the task, then the
/// agent writes its last event and completes the task: the next poll finds the task's copy
/// stale and the events' fresh. Before `task_events`, the task's refresh (waited for) said
/// `completed` beside the events' older copy, and the streamer stopped without the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_turn_never_ends_without_its_last_events() {
    let api = AgentsApi::start().await;
    let now = SystemTime::now();
    let id = api.seed_task(task("octo/app", "Fix it", "Fix it", now, now));
    api.set_task_state(&id, "in_progress");
    // A Task API copy is fresh for a third of the view's TTL: 1 s here.
    let config = format!("{CONFIG}[classes.view]\nfresh_ttl = \"3s\"\n");
    let weir = weir_for(&api, &config).await;
    let prefix = "/cmc_internal/api/agents";
    let task_url = format!("{prefix}/tasks/{id}");
    let events_url = format!("{prefix}/tasks/{id}/events?per_page=100&page=1");
    let poll = || async {
        let (t, e) = tokio::join!(
            vscode_get(&weir, &task_url, "vscode-token"),
            vscode_get(&weir, &events_url, "vscode-token")
        );
        let task = vscode_tasks::get_task(t.status, &t.body).unwrap();
        let (events, _) = vscode_tasks::get_task_events(e.status, &e.body).unwrap();
        (task, events)
    };
    let started = tokio::time::Instant::now();
    let t = vscode_get(&weir, &task_url, "vscode-token").await;
    assert!(vscode_tasks::is_active(
        &vscode_tasks::get_task(t.status, &t.body).unwrap()
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = vscode_get(&weir, &events_url, "vscode-token").await;
    let (first, _) = vscode_tasks::get_task_events(e.status, &e.body).unwrap();
    let last = api.add_task_event(&id, "Done: the test is fixed.");
    api.set_task_state(&id, "completed");
    // Past the task copy's 1 s, within the events copy's.
    tokio::time::sleep_until(started + Duration::from_millis(1200)).await;
    let mut seen: Vec<String> = first
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let mut polls = 0;
    loop {
        polls += 1;
        let (task, events) = poll().await;
        seen.extend(events.iter().map(|e| e["id"].as_str().unwrap().to_string()));
        if !vscode_tasks::is_active(&task) {
            break;
        }
        assert!(polls < 30, "the task never completed through Weir");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        seen.contains(&last),
        "the streamer stopped after {polls} poll(s) without the task's last event {last}: saw {seen:?}"
    );
}
