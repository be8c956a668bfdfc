//! The developer's tools, each polling as its own source does (times in simulated seconds,
//! divided by the scenario's speed on the wall clock). Sources, read at these commits:
//!
//! - VS Code Copilot Chat, microsoft/vscode-copilot-chat @ 31acd00a:
//!   `src/extension/chatSessions/vscode-node/copilotCloudSessionsProvider.ts`
//!   - `ACTIVE_SESSION_POLL_INTERVAL_MS = 5 * 1000` in a `setInterval`: every running
//!     (`in_progress`/`queued`) session's `GET /agents/sessions/{id}` every 5 s;
//!   - `updateActiveSessionsOnly`: a poll that fails (`getSessionInfo` returns `undefined`
//!     on any non-OK answer, `octoKitServiceImpl.ts`) is skipped with `continue`, so the
//!     session is left out of `stillActiveSessions` and **no longer polled** until the next
//!     `refresh()` re-lists (the background refresh re-lists only when the list's length
//!     changed; a create's success refreshes). Modelled: the session stops being followed and
//!     that counts as a failure the developer would see (a status that never moves on);
//!   - the list (`getAllSessions`) at start (twice: the refresh interval's probe and the view's
//!     `provideChatSessionItems`), then every 5 min (`getRefreshIntervalTime`, 5 min with
//!     history), re-listing the view only when the count changed; a failed list returns `[]`
//!     (an empty view: a failure);
//!   - the list URL as `@vscode/copilot-api` builds it (`URLSearchParams`: `,` → `%2C`,
//!     `/` → `%2F`): `page_size=20&page_number=N&resource_state=draft%2Copen&repo_nwo=…`,
//!     next page only after a full one (`githubAPI.ts` `makeGitHubAPIRequestWithPagination`);
//!   - a create (`invokeRemoteAgent`): `GET …/jobs/{o}/{r}/enabled` (cached 30 min), `POST
//!     /agents/swe/v1/jobs/{o}/{r}`; no `job_id`/`session_id` in the answer is an error shown
//!     to the user; then `waitForJobWithPullRequest`: `GET …/jobs/{o}/{r}/{job_id}` every 2 s
//!     (after each answer) for up to 30 s until it has `pull_request.number`, else "Failed to
//!     retrieve pull request information from job"; success `refresh()`es the list;
//!   - `src/platform/authentication/node/copilotTokenManager.ts`: the token's expiry is taken
//!     as `now + refresh_in + 60`, and a new one is fetched when that is less than 5 min away:
//!     `GET /copilot_internal/v2/token` every `refresh_in + 60 − 300` s, each time with `GET
//!     /copilot_internal/user` beside it (`Promise.all`; microsoft/vscode
//!     `extensions/copilot/…/copilotTokenManager.ts` @ 0facf51e).
//! - VS Code's Task API backend (v2, microsoft/vscode `extensions/copilot/…/taskApiBackend.ts`,
//!   /work/research/clients.md §1): its session list at start-up and every 5 min, each with
//!   `GET api.github.com/user` (for `creator_id`) before the repository's task list.
//! - gh, cli/cli `pkg/cmd/agent-task/` @ 10db389 / 48d6cbb:
//!   - `capi/sessions.go` `ListLatestSessionsForViewer`: `GET /agents/sessions?page_number=N&
//!     page_size=50&sort=last_updated_at%2Cdesc` (`url.Values.Encode`: sorted, `,` → `%2C`),
//!     next page only after a full one; a non-200 is an error and gh exits 1. The developer
//!     runs `gh agent-task list` once a minute;
//!   - `view/view.go` + `shared/log.go`: `view <id> --log --follow` gets the session once, then
//!     `GET /agents/sessions/{id}/logs` every `defaultLogPollInterval` (5 s, slept between
//!     fetches) until a `finish_reason: "stop"` chunk; any error ends the command (exit 1).
//!     Modelled: the developer runs it again 30 s later.
//!
//! Not modelled: the GraphQL calls both make to api.github.com to hydrate pull requests and
//! users (not agent-sessions calls), VS Code's chat log streaming while a chat is open.

use super::tally::Tally;
use crate::client::LabClient;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::{sleep_until, Instant};

pub const REPO: &str = "octo/lab";

/// Everything a tool needs: where to send, how fast time runs, where to count.
#[derive(Clone)]
pub struct Desk {
    pub client: LabClient,
    /// The agent API origin (the token's `endpoints.api`; the lab upstream).
    pub api: String,
    /// The api.github.com origin (a second lab upstream, Weir's `github-api`): the token and
    /// the user calls, and the Task API.
    pub github: String,
    pub speed: f64,
    pub tally: Arc<Tally>,
    pub end: Instant,
}

/// One answer as a tool reads it.
pub(super) struct Got {
    pub status: u16,
    pub body: Bytes,
}

impl Desk {
    /// Simulated seconds → wall-clock duration.
    pub fn sim(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs / self.speed)
    }

    pub(super) fn over(&self) -> bool {
        Instant::now() >= self.end
    }

    /// Sleeps `secs` simulated seconds, or until the hour ends; `false` if it ended.
    pub(super) async fn wait(&self, secs: f64) -> bool {
        let until = (Instant::now() + self.sim(secs)).min(self.end);
        sleep_until(until).await;
        !self.over()
    }

    /// Sends one request as `who` would, records it under `surface`; `ok` decides what the
    /// tool counts as success, and a failure is one the person sees.
    pub(super) async fn send(
        &self,
        surface: &'static str,
        who: Tool,
        method: Method,
        path: &str,
        body: Option<String>,
        ok: impl Fn(&Got) -> bool,
    ) -> Option<Got> {
        self.send_as(surface, who, method, path, body, ok, true)
            .await
    }

    /// [`Desk::send`] for a call whose failure the tool absorbs without showing it (it sends
    /// the batch again, reads the poll as empty, or counts towards a later give-up).
    pub(super) async fn send_quiet(
        &self,
        surface: &'static str,
        who: Tool,
        method: Method,
        path: &str,
        body: Option<String>,
        ok: impl Fn(&Got) -> bool,
    ) -> Option<Got> {
        self.send_as(surface, who, method, path, body, ok, false)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_as(
        &self,
        surface: &'static str,
        who: Tool,
        method: Method,
        path: &str,
        body: Option<String>,
        ok: impl Fn(&Got) -> bool,
        visible: bool,
    ) -> Option<Got> {
        let t0 = Instant::now();
        let got = self.raw(who, method, path, body).await;
        let took = t0.elapsed().mul_f64(self.speed);
        let good = got.as_ref().is_some_and(&ok);
        self.tally.record(surface, took, good, visible);
        got.filter(|_| good)
    }

    async fn raw(
        &self,
        who: Tool,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Option<Got> {
        let origin = match who.on_github() {
            true => &self.github,
            false => &self.api,
        };
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{origin}{path}"))
            .header(http::header::ACCEPT, "application/json");
        for (k, v) in who.headers() {
            b = b.header(*k, *v);
        }
        if body.is_some() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .ok()?;
        let a = self.client.send(req).await.ok()?;
        Some(Got {
            status: a.status.as_u16(),
            body: a.body,
        })
    }
}

/// Which tool sends (its headers, transcribed from its source).
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    /// `@vscode/copilot-api` `_mixinHeaders` adds `X-GitHub-Api-Version: 2026-06-01` and the
    /// editor headers; the agent calls carry the GitHub session token as a bearer.
    VsCode,
    /// gh's HTTP client: its own OAuth token, its user agent.
    Gh,
    /// VS Code's Task API client (`TaskApiHttpClient._authHeaders`): the GitHub OAuth token as
    /// a bearer and `Accept`, no API version, no editor headers.
    VsCodeTasks,
    /// VS Code's Mission Control client (`missionControlApiClient.ts`): the GitHub OAuth token
    /// and `Copilot-Integration-Id` (its value presumed `vscode-chat`).
    VsCodeMission,
    /// VS Code on api.github.com with its GitHub session (`copilotTokenManager.ts`: the token
    /// and `copilot_internal/user`, `Authorization: token`, `X-GitHub-Api-Version:
    /// 2025-04-01`; the octokit service's `GET /user` the same way).
    VsCodeGitHub,
}

impl Tool {
    fn headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Tool::VsCode => &[
                ("authorization", "Bearer gho_lab_vscode"),
                ("x-github-api-version", "2026-06-01"),
                ("editor-version", "vscode/1.105.0"),
                ("editor-plugin-version", "copilot-chat/0.32.0"),
                ("user-agent", "GitHubCopilotChat/0.32.0"),
            ],
            Tool::VsCodeTasks => &[("authorization", "Bearer gho_lab_vscode")],
            Tool::VsCodeMission => &[
                ("authorization", "Bearer gho_lab_vscode"),
                ("copilot-integration-id", "vscode-chat"),
            ],
            Tool::VsCodeGitHub => &[
                ("authorization", "token gho_lab_vscode"),
                ("x-github-api-version", "2025-04-01"),
                ("editor-version", "vscode/1.105.0"),
                ("editor-plugin-version", "copilot-chat/0.32.0"),
                ("user-agent", "GitHubCopilotChat/0.32.0"),
            ],
            Tool::Gh => &[
                ("authorization", "token gho_lab_gh"),
                ("user-agent", "GitHub CLI 2.81.0"),
            ],
        }
    }

    /// Sent to api.github.com (the Task API and the token and user calls), else to the agent
    /// API host.
    fn on_github(self) -> bool {
        matches!(self, Tool::VsCodeTasks | Tool::VsCodeGitHub)
    }
}

pub(super) fn json(g: &Got) -> Option<serde_json::Value> {
    serde_json::from_slice(&g.body).ok()
}

pub(super) fn ok_json(g: &Got) -> bool {
    g.status == 200 && json(g).is_some()
}

/// The sessions in a list answer.
fn sessions(g: &Got) -> Vec<serde_json::Value> {
    json(g)
        .and_then(|v| v.get("sessions").and_then(|s| s.as_array()).cloned())
        .unwrap_or_default()
}

fn running(s: &serde_json::Value) -> bool {
    matches!(
        s.get("state").and_then(|v| v.as_str()),
        Some("in_progress") | Some("queued")
    )
}

/// VS Code's list (all pages); `None` when a page failed (the view shows nothing).
async fn vscode_list(d: &Desk) -> Option<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    for page in 1.. {
        let path = format!(
            "/agents/sessions?page_size=20&page_number={page}&resource_state=draft%2Copen&repo_nwo=octo%2Flab"
        );
        let got = d
            .send(
                "vscode list",
                Tool::VsCode,
                Method::GET,
                &path,
                None,
                ok_json,
            )
            .await?;
        let s = sessions(&got);
        let full = s.len() == 20;
        all.extend(s);
        if !full {
            break;
        }
    }
    Some(all)
}

/// The VS Code window: its list, its session poller, its token.
pub struct VsCode {
    pub desk: Desk,
    /// Sessions the poller follows now.
    active: tokio::sync::Mutex<BTreeSet<String>>,
    /// Length of the last list (the background refresh re-lists only when it changes).
    listed: std::sync::atomic::AtomicUsize,
}

impl VsCode {
    pub fn new(desk: Desk) -> Arc<VsCode> {
        Arc::new(VsCode {
            desk,
            active: tokio::sync::Mutex::new(BTreeSet::new()),
            listed: Default::default(),
        })
    }

    /// `refresh()` + `provideChatSessionItems`: re-list and follow every running session.
    async fn refresh(&self) {
        if let Some(list) = vscode_list(&self.desk).await {
            self.listed
                .store(list.len(), std::sync::atomic::Ordering::Relaxed);
            let mut a = self.active.lock().await;
            *a = list
                .iter()
                .filter(|s| running(s))
                .filter_map(|s| s.get("id").and_then(|i| i.as_str()).map(String::from))
                .collect();
        } else {
            // `getAllSessions` returned []: nothing shown, nothing followed.
            self.active.lock().await.clear();
        }
    }

    /// Start-up, then the background refresh every 5 min.
    pub async fn lists(self: Arc<Self>) {
        let d = &self.desk;
        // The refresh interval's probe, then the view's own list.
        let _ = vscode_list(d).await;
        self.refresh().await;
        while d.wait(300.0).await {
            let before = self.listed.load(std::sync::atomic::Ordering::Relaxed);
            match vscode_list(d).await {
                Some(l) if l.len() != before => self.refresh().await,
                _ => {}
            }
        }
    }

    /// The `setInterval` of 5 s: every followed session, all at once (`Promise.allSettled`).
    pub async fn poller(self: Arc<Self>) {
        let d = self.desk.clone();
        let mut tick = tokio::time::interval(d.sim(5.0));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if d.over() {
                return;
            }
            let ids: Vec<String> = self.active.lock().await.iter().cloned().collect();
            let polls = ids.iter().map(|id| {
                let d = d.clone();
                let id = id.clone();
                async move {
                    let path = format!("/agents/sessions/{id}");
                    let got = d
                        .send(
                            "vscode session",
                            Tool::VsCode,
                            Method::GET,
                            &path,
                            None,
                            ok_json,
                        )
                        .await;
                    (id, got)
                }
            });
            let results = futures_join_all(polls).await;
            let mut still = BTreeSet::new();
            for (id, got) in results {
                let Some(got) = got else {
                    // `continue`: the session silently drops out of the followed set.
                    self.desk.tally.stopped_following();
                    continue;
                };
                if let Some(s) = json(&got) {
                    if let Some(age) = age_of(&s) {
                        self.desk.tally.stale(age.mul_f64(d.speed));
                    }
                    if running(&s) {
                        still.insert(id);
                    }
                }
            }
            *self.active.lock().await = still;
        }
    }

    /// The Copilot token, fetched again when `now + refresh_in + 60` is < 5 min away, with
    /// `GET /copilot_internal/user` beside it (`Promise.all`, the plan and quotas).
    pub async fn token(self: Arc<Self>) {
        let d = &self.desk;
        loop {
            let (got, _) = tokio::join!(
                d.send(
                    "vscode token",
                    Tool::VsCodeGitHub,
                    Method::GET,
                    "/copilot_internal/v2/token",
                    None,
                    |g| ok_json(g) && json(g).is_some_and(|v| v.get("token").is_some()),
                ),
                d.send_quiet(
                    "vscode copilot user",
                    Tool::VsCodeGitHub,
                    Method::GET,
                    "/copilot_internal/user",
                    None,
                    ok_json,
                )
            );
            let refresh_in = got
                .as_ref()
                .and_then(json)
                .and_then(|v| v.get("refresh_in").and_then(|r| r.as_f64()));
            // Lab tokens carry `refresh_in` already scaled: back to simulated seconds. A
            // failed fetch is tried again on the next use, a minute on.
            let next = refresh_in.map_or(60.0, |r| (r * d.speed + 60.0 - 300.0).max(60.0));
            if !d.wait(next).await {
                return;
            }
        }
    }

    /// VS Code's Task API backend lists its sessions (`fetchSessionList`): at start-up, then
    /// every 5 min (sessions exist). For the workspace's repository it asks `GET /user` first
    /// (`getCurrentAuthedUser`, for `creator_id`), then the repository's tasks; a failed
    /// `/user` makes the list `[]` (an empty view: a failure).
    pub async fn task_lists(self: Arc<Self>) {
        let d = &self.desk;
        loop {
            let me = d
                .send(
                    "vscode user",
                    Tool::VsCodeGitHub,
                    Method::GET,
                    "/user",
                    None,
                    ok_json,
                )
                .await;
            let id = me
                .as_ref()
                .and_then(json)
                .and_then(|v| v.get("id").and_then(|i| i.as_u64()));
            if let Some(id) = id {
                let path = format!(
                    "/cmc_internal/api/agents/repos/{REPO}/tasks?per_page=100&creator_id={id}"
                );
                let _ = d
                    .send(
                        "vscode task list",
                        Tool::VsCodeTasks,
                        Method::GET,
                        &path,
                        None,
                        ok_json,
                    )
                    .await;
            }
            if !d.wait(300.0).await {
                return;
            }
        }
    }

    /// One "Delegate to cloud agent": up to two presses, then the job poll.
    pub async fn create(self: Arc<Self>, statement: String) {
        let d = &self.desk;
        d.tally.create(|c| c.intended += 1);
        let enabled = format!("/agents/swe/v1/jobs/{REPO}/enabled");
        let _ = d
            .send(
                "vscode create",
                Tool::VsCode,
                Method::GET,
                &enabled,
                None,
                |g| g.status == 200,
            )
            .await;
        let body = serde_json::json!({
            "problem_statement": statement,
            "event_type": "visual_studio_code_remote_agent_tool_invoked",
            "pull_request": { "title": statement, "base_ref": "main" },
        })
        .to_string();
        let mut job = None;
        for press in 0..2 {
            if press > 0 && !d.wait(10.0).await {
                return;
            }
            d.tally.create(|c| c.presses += 1);
            let got = d
                .send(
                    "vscode create",
                    Tool::VsCode,
                    Method::POST,
                    &format!("/agents/swe/v1/jobs/{REPO}"),
                    Some(body.clone()),
                    |g| {
                        (200..300).contains(&g.status)
                            && json(g).is_some_and(|v| {
                                v.get("job_id").is_some() && v.get("session_id").is_some()
                            })
                    },
                )
                .await;
            if let Some(v) = got.as_ref().and_then(json) {
                d.tally.create(|c| c.accepted += 1);
                job = v.get("job_id").and_then(|j| j.as_str()).map(String::from);
                break;
            }
        }
        let Some(job) = job else { return };
        let t0 = Instant::now();
        let path = format!("/agents/swe/v1/jobs/{REPO}/{job}");
        while t0.elapsed() < d.sim(30.0) {
            let got = d
                .send(
                    "vscode job",
                    Tool::VsCode,
                    Method::GET,
                    &path,
                    None,
                    ok_json,
                )
                .await;
            let pr = got.as_ref().and_then(json).is_some_and(|v| {
                v.pointer("/pull_request/number")
                    .and_then(|n| n.as_u64())
                    .is_some()
            });
            if pr {
                self.refresh().await;
                return;
            }
            if !d.wait(2.0).await {
                return;
            }
        }
        d.tally.fail("vscode job");
    }
}

/// How old a session answer is: now − `last_updated_at`.
pub(super) fn age_of(s: &serde_json::Value) -> Option<Duration> {
    let t = s
        .get("last_updated_at")
        .or_else(|| s.get("updated_at"))?
        .as_str()?;
    let at = parse_rfc3339(t)?;
    Some(SystemTime::now().duration_since(at).unwrap_or_default())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (what the lab upstream writes) to a wall-clock time.
/// `updated_at` is the Task API's spelling of it.
fn parse_rfc3339(t: &str) -> Option<SystemTime> {
    let (date, time) = t.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, ms) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let ms: u64 = ms.parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_millis(ms))
}

/// `Promise.allSettled` without another dependency: each future on its own task.
async fn futures_join_all<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

/// `gh agent-task list`, once a minute.
pub async fn gh_list(d: Desk) {
    loop {
        for page in 1.. {
            let path = format!(
                "/agents/sessions?page_number={page}&page_size=50&sort=last_updated_at%2Cdesc"
            );
            let Some(got) = d
                .send("gh list", Tool::Gh, Method::GET, &path, None, ok_json)
                .await
            else {
                break; // "failed to list sessions: 500 …", exit 1
            };
            if sessions(&got).len() < 50 {
                break;
            }
        }
        if !d.wait(60.0).await {
            return;
        }
    }
}

/// `gh agent-task view <id> --log --follow`, run again 30 s after it fails.
pub async fn gh_follow(d: Desk, id: String) {
    loop {
        let path = format!("/agents/sessions/{id}");
        let ok = d
            .send(
                "gh view --follow",
                Tool::Gh,
                Method::GET,
                &path,
                None,
                ok_json,
            )
            .await
            .is_some();
        if ok {
            let logs = format!("/agents/sessions/{id}/logs");
            let mut first = true;
            loop {
                if !first && !d.wait(5.0).await {
                    return;
                }
                first = false;
                let Some(got) = d
                    .send(
                        "gh view --follow",
                        Tool::Gh,
                        Method::GET,
                        &logs,
                        None,
                        |g| g.status == 200,
                    )
                    .await
                else {
                    break; // the error ends the command
                };
                if std::str::from_utf8(&got.body)
                    .is_ok_and(|l| l.contains("\"finish_reason\":\"stop\""))
                {
                    return; // the session is done: gh exits 0
                }
            }
        }
        if !d.wait(30.0).await {
            return;
        }
    }
}

/// Pauses until `at` simulated seconds after `start` (or the end).
pub async fn at(d: &Desk, start: Instant, secs: f64) -> bool {
    let t = (start + d.sim(secs)).min(d.end);
    sleep_until(t).await;
    !d.over()
}
