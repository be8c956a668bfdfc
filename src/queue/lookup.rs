//! The in-doubt lookup (see [`super::replay`]'s in-doubt rule): before an item that may already
//! have reached the upstream is sent again, the repository's sessions are listed with the item's
//! credential as the real clients list them (`page_number`/`page_size`, `repo_nwo`,
//! `sort=last_updated_at,desc`), page by page through the window that can hold the create
//! (bounded: [`MAX_PAGES`] pages, [`MAX_CANDIDATES`] candidates). A session created in the
//! window is confirmed by the job behind it (`GET /agents/swe/v1/jobs/{o}/{r}/session/{id}`):
//! the session object has no problem statement, the job has.
//!
//! **The stored token stands in.** When an in-doubt item's own credential is gone (keychain
//! entry deleted, or Weir restarted with in-memory credentials), the lookup is made with the
//! GitHub token stored in the keychain (`PUT /_weir/api/token`), but only when that token
//! belongs to the same GitHub account as the item's credential did (both resolved with
//! `GET /user`, see [`crate::accounts`]). Found: the item is `done`. Not found: it is `failed`
//! — the stored token is only ever used to look, never to send the create.

use super::credential::Credential;
use super::replay::Replayer;
use super::Queue;
use crate::accounts::Resolution;
use crate::config::{RouteClass, UpstreamIndex};
use crate::identity::Identity;
use crate::problem::Problem;
use crate::upstream::{AttemptPolicy, Replayable};
use bytes::Bytes;
use http::{header, HeaderValue};
use http::{HeaderMap, Method, Uri};
use weir_store::Item;

impl Replayer {
    /// Looks an in-doubt item up upstream (see the module's in-doubt rule), through the same
    /// admission and attempt phases as any list call.
    pub(super) async fn lookup(
        &self,
        up: UpstreamIndex,
        item: &Item,
        credential: &Credential,
        scope: Option<crate::identity::Identity>,
    ) -> Lookup {
        let (Some(repo), Some(statement)) = (&item.repo, &item.problem_statement) else {
            return Lookup::Unverifiable;
        };
        if super::provisional::is_task_create(item.path_and_query.split('?').next().unwrap_or("")) {
            return self.lookup_task(up, item, credential, scope, repo).await;
        }
        let Some((owner, name)) = repo.split_once('/') else {
            return Lookup::Unverifiable;
        };
        let since = item.last_attempt_at.unwrap_or(item.created_at) - WINDOW_SLACK_MS;
        let headers = lookup_headers(item, credential);
        let reads = Reads::of(item);
        // First the window's sessions (pages, bounded), then the jobs of those created in it.
        let mut candidates: Vec<(serde_json::Value, String)> = Vec::new();
        let mut complete = false;
        for page in 1..=MAX_PAGES {
            let list = format!(
                "/agents/sessions?page_number={page}&page_size={PAGE_SIZE}&repo_nwo={}&sort=last_updated_at%2Cdesc",
                query_escape(repo)
            );
            let v = match self
                .get_json(up, RouteClass::List, &list, &headers, scope, &reads)
                .await
            {
                Ok(Some(v)) => v,
                Ok(None) => return Lookup::Unknown("the session list answered 404".into()),
                Err(l) => return l,
            };
            let Some(sessions) = v.get("sessions").and_then(|s| s.as_array()) else {
                return Lookup::Unknown("the session list has no `sessions` array".into());
            };
            candidates.extend(
                sessions
                    .iter()
                    .filter(|s| time_of(s, "created_at").is_some_and(|c| c >= since))
                    .filter_map(|s| Some((s.clone(), s.get("id")?.as_str()?.to_string()))),
            );
            // A short page is the end of the list; newest-updated first, so once a page ends
            // before the window nothing further can have been created in it.
            let ended_before = sessions
                .last()
                .and_then(|s| time_of(s, "last_updated_at").or_else(|| time_of(s, "created_at")))
                .is_some_and(|t| t < since);
            if sessions.len() < PAGE_SIZE || ended_before {
                complete = true;
                break;
            }
        }
        if !complete {
            return Lookup::Unknown(format!(
                "the window holds more than {} sessions; not verified",
                MAX_PAGES * PAGE_SIZE
            ));
        }
        // Those whose name is the statement's start first (gh names a session by its
        // statement, VS Code by a title made from it): the likeliest costs one job read.
        candidates.sort_by_key(|(s, _)| !named_for(s, statement));
        for (s, sid) in candidates.iter().take(MAX_CANDIDATES) {
            // The session has no problem statement; the job behind it does.
            let job = format!(
                "/agents/swe/v1/jobs/{}/{}/session/{}",
                path_escape(owner),
                path_escape(name),
                path_escape(sid)
            );
            let job = match self
                .get_json(up, RouteClass::View, &job, &headers, scope, &reads.job())
                .await
            {
                Ok(Some(j)) => j,
                // Another repository's session (or no job behind it): not this create.
                Ok(None) => continue,
                Err(l) => return l,
            };
            let said = job.get("problem_statement").and_then(|p| p.as_str());
            if said.map(str::trim) == Some(statement.trim()) {
                return Lookup::Found(Box::new(weir_store::ItemResult {
                    found_by_lookup: true,
                    job_id: job.get("job_id").and_then(weir_store::ItemResult::id_text),
                    session_id: Some(sid.to_string()),
                    pull_request: job.get("pull_request").filter(|p| !p.is_null()).cloned(),
                    session: Some(s.clone()),
                    ..weir_store::ItemResult::default()
                }));
            }
        }
        if candidates.len() > MAX_CANDIDATES {
            return Lookup::Unknown(format!(
                "{} sessions were created in the window, more than the {MAX_CANDIDATES} whose job Weir reads; not verified",
                candidates.len()
            ));
        }
        Lookup::NotFound
    }

    /// The in-doubt lookup of a Task API create: the repository's tasks (one page of
    /// [`TASK_PAGE`], newest first as the Task API lists them), then each task created in the
    /// window read whole (`GET …/tasks/{id}`), whose `sessions[].prompt` is compared with the
    /// create's `prompt`. What the server records as a session's prompt is known only from the
    /// spec's type (`AgentTaskSession.prompt`), so a task in the window that cannot be matched
    /// either way (no prompt) leaves the item in doubt: it is never sent again on a guess.
    async fn lookup_task(
        &self,
        up: UpstreamIndex,
        item: &Item,
        credential: &Credential,
        scope: Option<crate::identity::Identity>,
        repo: &str,
    ) -> Lookup {
        let body: serde_json::Value = serde_json::from_slice(&item.body).unwrap_or_default();
        let Some(prompt) = body.get("prompt").and_then(|p| p.as_str()) else {
            return Lookup::Unverifiable;
        };
        let Some((owner, name)) = repo.split_once('/') else {
            return Lookup::Unverifiable;
        };
        let prefix = super::provisional::task_prefix(&item.path_and_query);
        let since = item.last_attempt_at.unwrap_or(item.created_at) - WINDOW_SLACK_MS;
        let headers = lookup_headers(item, credential);
        let reads = Reads::of(item);
        let list = format!(
            "{prefix}/repos/{}/{}/tasks?per_page={TASK_PAGE}",
            path_escape(owner),
            path_escape(name)
        );
        let v = match self
            .get_json(up, RouteClass::List, &list, &headers, scope, &reads)
            .await
        {
            Ok(Some(v)) => v,
            Ok(None) => return Lookup::Unknown("the task list answered 404".into()),
            Err(l) => return l,
        };
        let Some(tasks) = v.get("tasks").and_then(|t| t.as_array()) else {
            return Lookup::Unknown("the task list has no `tasks` array".into());
        };
        let candidates: Vec<&str> = tasks
            .iter()
            .filter(|t| time_of(t, "created_at").is_some_and(|c| c >= since))
            .filter_map(|t| t.get("id")?.as_str())
            .collect();
        if tasks.len() >= TASK_PAGE && candidates.len() == tasks.len() {
            return Lookup::Unknown(format!(
                "more than {TASK_PAGE} tasks were created in the window; not verified"
            ));
        }
        let mut unmatched = 0;
        for id in candidates.iter().take(MAX_CANDIDATES) {
            let path = format!("{prefix}/tasks/{}", path_escape(id));
            // A task's sessions grow (a follow-up adds one): read as a list is, not as a job.
            let task = match self
                .get_json(up, RouteClass::View, &path, &headers, scope, &reads)
                .await
            {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(l) => return l,
            };
            let prompts: Vec<&str> = task
                .get("sessions")
                .and_then(|s| s.as_array())
                .map(|s| s.iter().filter_map(|s| s.get("prompt")?.as_str()).collect())
                .unwrap_or_default();
            if prompts.iter().any(|p| p.trim() == prompt.trim()) {
                return Lookup::Found(Box::new(weir_store::ItemResult {
                    found_by_lookup: true,
                    job_id: Some((*id).to_string()),
                    ..weir_store::ItemResult::default()
                }));
            }
            if prompts.is_empty() {
                unmatched += 1;
            }
        }
        if unmatched > 0 || candidates.len() > MAX_CANDIDATES {
            return Lookup::Unknown(format!(
                "{} task(s) created in the window could not be compared with this create; not verified",
                unmatched.max(candidates.len().saturating_sub(MAX_CANDIDATES))
            ));
        }
        Lookup::NotFound
    }

    /// One GET with the item's credential: the JSON answer, `None` for a 404, or what the
    /// lookup comes to when it cannot be read. A read made in this window that the item may
    /// use is used again; past the window's budget nothing is read and the lookup is deferred
    /// (see [`super::lookup_budget`]).
    async fn get_json(
        &self,
        up: UpstreamIndex,
        class: RouteClass,
        path: &str,
        headers: &HeaderMap,
        scope: Option<crate::identity::Identity>,
        reads: &Reads,
    ) -> Result<Option<serde_json::Value>, Lookup> {
        let uri: Uri = path
            .parse()
            .map_err(|e: http::uri::InvalidUri| Lookup::Unknown(e.to_string()))?;
        // One snapshot for the read: its budget and its attempt.
        let settings = self.upstreams.settings_now();
        let (limit, window) = (settings.queue.lookup_reads, settings.queue.lookup_window);
        let key = (up, reads.identity.clone());
        if let Some(v) = self
            .lookups
            .cached(&key, path, reads.not_before, reads.immutable, window)
        {
            return Ok(Some(v));
        }
        if let Err(e) = self.lookups.take(&key, limit, window) {
            return Err(Lookup::Deferred(e.0));
        }
        let req = Replayable {
            method: &Method::GET,
            uri: &uri,
            headers,
            body: Bytes::new(),
            identity: scope,
        };
        // One upstream request per read the budget counted: a read that fails is read again
        // on the item's next try, not retried here.
        let policy = AttemptPolicy {
            max_attempts: 1,
            ..AttemptPolicy::for_request(&Method::GET, true)
        };
        // The class the lookup reads it as, counted against the path's breaker family.
        let route = crate::config::Route {
            class,
            family: self.upstreams.route_of(&Method::GET, uri.path()).family,
        };
        match self
            .upstreams
            .call_buffered(&settings, up, route, req, policy, None)
            .await
        {
            Ok(a) if a.response.status() == http::StatusCode::NOT_FOUND => Ok(None),
            Ok(a) if a.response.status().is_success() => {
                let v: serde_json::Value = serde_json::from_slice(a.response.body())
                    .map_err(|e| Lookup::Unknown(format!("{path} answered no JSON: {e}")))?;
                let now = crate::time_fmt::now_ms();
                self.lookups
                    .keep(&key, path, now, &v, reads.immutable, window);
                Ok(Some(v))
            }
            Ok(a) => Err(Lookup::Unknown(format!(
                "{path} answered {}",
                a.response.status()
            ))),
            Err(p) if is_closed(&p) => Err(Lookup::NotNow),
            Err(p) => Err(Lookup::Unknown(p.detail)),
        }
    }
}

/// What one item's lookup may reuse of the reads made in the window (see
/// [`super::lookup_budget`]): its identity's, made no earlier than `not_before`, or any made in
/// the window when the answer never changes (`immutable`: a job's statement).
struct Reads {
    identity: String,
    not_before: i64,
    immutable: bool,
}

impl Reads {
    /// The item's last attempt, or its queueing when never attempted (a create queued in doubt
    /// by the client's path is stored after its attempt ended): a read made since then could
    /// show the create, as the item's own read at that moment would.
    fn of(item: &Item) -> Reads {
        Reads {
            identity: item.identity.clone(),
            not_before: item.created_at.max(item.last_attempt_at.unwrap_or(0)),
            immutable: false,
        }
    }

    fn job(&self) -> Reads {
        Reads {
            identity: self.identity.clone(),
            not_before: self.not_before,
            immutable: true,
        }
    }
}

/// Sessions are listed as the real clients list them: `page_number`/`page_size` (both
/// clients), `repo_nwo` (VS Code's repository filter) and `sort=last_updated_at,desc` (gh's
/// sort), 50 to a page (gh's page size).
const PAGE_SIZE: usize = 50;
/// One page of a repository's tasks is read (the Task API's largest, as VS Code asks it).
const TASK_PAGE: usize = 100;
/// At most this many pages (500 sessions of one repository in the window) are read.
const MAX_PAGES: usize = 10;
/// At most this many candidates (sessions created in the window) have their job read.
const MAX_CANDIDATES: usize = 50;
/// The window opens this long before the item's last attempt (clocks differ).
const WINDOW_SLACK_MS: i64 = 60_000;

/// The item's credential and the client headers it was sent with (`Copilot-Integration-Id`,
/// `X-GitHub-Api-Version`, `User-Agent`, …), so the lookup is asked as that client asks.
fn lookup_headers(item: &Item, credential: &Credential) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in &item.headers {
        if matches!(
            k.as_str(),
            "content-type" | "idempotency-key" | "x-request-id"
        ) {
            continue;
        }
        if let (Ok(k), Ok(v)) = (
            header::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.append(k, v);
        }
    }
    credential.apply_to(&mut headers);
    headers
}

/// Whether the session's name is the statement, or the start of its first line.
fn named_for(session: &serde_json::Value, statement: &str) -> bool {
    let name = session
        .get("name")
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .trim();
    let first = statement.lines().next().unwrap_or("").trim();
    !name.is_empty() && (name == statement.trim() || first.starts_with(name))
}

/// A time field (RFC 3339, or unix seconds) in unix ms.
fn time_of(v: &serde_json::Value, key: &str) -> Option<i64> {
    let c = v.get(key)?;
    c.as_str()
        .and_then(crate::time_fmt::parse_rfc3339_ms)
        .or_else(|| c.as_i64().map(|s| s * 1000))
}

/// A query value as Go's `url.QueryEscape` writes it (what gh sends).
fn query_escape(s: &str) -> String {
    escape(s, b"-_.~")
}

/// A path segment as Go's `url.PathEscape` writes it.
fn path_escape(s: &str) -> String {
    escape(s, b"-_.~$&+,;=:@")
}

fn escape(s: &str, keep: &[u8]) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || keep.contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Replayer {
    /// Looks an in-doubt item whose credential is gone up with the stored token of the same
    /// account. `None`: there is no such token (none stored, another account, the item's
    /// account unknown), so the item is failed for its missing credential.
    pub(super) async fn lookup_with_stored_token(
        &self,
        q: &Queue,
        up: UpstreamIndex,
        item: &Item,
    ) -> Option<Lookup> {
        let (credential, scope) = self.stored_token_of_account(q, item).await?;
        Some(self.lookup(up, item, &credential, Some(scope)).await)
    }

    /// The stored GitHub token as a credential (and its identity), when it belongs to the
    /// same account as the item's own credential.
    async fn stored_token_of_account(
        &self,
        q: &Queue,
        item: &Item,
    ) -> Option<(Credential, Identity)> {
        let owner = self.accounts.record(&Identity::from_hex(&item.identity)?)?;
        let account = crate::secrets::Account::GithubToken.as_str();
        let token = q.secrets.get(account).await.ok()??;
        let auth = HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, auth.clone());
        let id = self.accounts.identify(&h);
        let rec = match self.accounts.record(&id) {
            Some(r) => r,
            None => match self
                .accounts
                .resolve_now(&self.upstreams, id, auth.clone())
                .await
            {
                Resolution::Account(r) => r,
                _ => return None,
            },
        };
        if rec.account_id != owner.account_id {
            tracing::info!(item = item.id, "the stored GitHub token is another account's; it is not used for this item's lookup");
            return None;
        }
        Some((Credential::authorization(auth), id))
    }
}

/// The gate refused the attempt (nothing was sent).
fn is_closed(p: &Problem) -> bool {
    use crate::problem::ProblemKind;
    !p.maybe_sent
        && matches!(
            p.kind,
            ProblemKind::BreakerOpen | ProblemKind::RateLimited | ProblemKind::Overloaded
        )
}

/// What the lookup found.
#[derive(Debug, PartialEq)]
pub(super) enum Lookup {
    /// Boxed: a result is a few hundred bytes, the other outcomes a word.
    Found(Box<weir_store::ItemResult>),
    NotFound,
    Unverifiable,
    /// The upstream's gate is closed; nothing was asked.
    NotNow,
    /// The window's lookup reads for this upstream and credential are spent; the item waits
    /// this long, for the next window (nothing is sent, nothing failed).
    Deferred(std::time::Duration),
    Unknown(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_go_does() {
        assert_eq!(query_escape("octo/app"), "octo%2Fapp");
        assert_eq!(
            query_escape("last_updated_at,desc"),
            "last_updated_at%2Cdesc"
        );
        assert_eq!(path_escape("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn times_are_read_in_both_forms() {
        let v = serde_json::json!({"a": "2026-11-30T08:00:00Z", "b": 1_764_489_600});
        assert_eq!(time_of(&v, "b"), Some(1_764_489_600_000));
        assert!(time_of(&v, "a").is_some());
        assert_eq!(time_of(&v, "c"), None);
    }
}
