//! Follow-up calls for a create Weir queued (issue 20). A queued create was answered with
//! provisional job and session ids ([`crate::queue::provisional`]); the clients then follow
//! them with the calls gh and VS Code make after a create:
//!
//! - `GET /agents/swe/v1/jobs/{o}/{r}/{job_id}` (gh `GetJob`, VS Code `getJobByJobId`);
//! - `GET /agents/swe/v1/jobs/{o}/{r}/session/{session_id}` (VS Code `getJobBySessionId`);
//! - `GET /agents/sessions/{session_id}` (gh `GetSession`, VS Code `getSessionInfo`);
//! - `GET /agents/sessions/{session_id}/logs` (gh `GetSessionLogs`, VS Code `getSessionLogs`);
//! - for a Task API create, under `/cmc_internal/api/agents` or `/agents`: `GET …/tasks/{id}`
//!   and `GET …/repos/{o}/{r}/tasks/{id}` (VS Code `getTask`, polled every 2 s by its turn
//!   streamer) and `GET …/tasks/{id}/events` (`getTaskEvents`, every page every 2 s).
//!
//! While the create waits (or after it failed) Weir answers these from its queue. Once it was
//! sent, the request goes on with the real id in place of the provisional one, through the
//! usual cache and attempt phases, so the client sees the real job and session. The mapping
//! lives on the queue item (SQLite or PostgreSQL) for as long as the item is kept: seven days
//! after it ended (`queue::replay::KEEP_ENDED`).
//!
//! Only the credential that queued the create, or another credential of the same GitHub
//! account, is answered: anyone else's request goes upstream unchanged (and finds nothing).
//! An id that merely looks provisional but is not in the queue goes upstream too.

use super::identity::Caller;
use crate::accounts::Accounts;
use crate::body::Body;
use crate::queue::provisional::{self, Owner, Stage};
use crate::queue::QueueState;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use weir_store::Item;

/// Which follow-up call a path is, and the id it names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call<'a> {
    Job {
        repo: String,
        id: &'a str,
    },
    JobOfSession {
        repo: String,
        id: &'a str,
    },
    Session {
        id: &'a str,
    },
    Logs {
        id: &'a str,
    },
    /// A Task API task (the provisional task id is the item's job id).
    Task {
        id: &'a str,
    },
    TaskEvents {
        id: &'a str,
    },
}

impl<'a> Call<'a> {
    fn parse(path: &'a str) -> Option<Call<'a>> {
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segs.as_slice() {
            ["agents", "swe", "v1", "jobs", o, r, "session", id] => Some(Call::JobOfSession {
                repo: format!("{o}/{r}"),
                id,
            }),
            ["agents", "swe", "v1", "jobs", o, r, id] => Some(Call::Job {
                repo: format!("{o}/{r}"),
                id,
            }),
            ["agents", "sessions", id] => Some(Call::Session { id }),
            ["agents", "sessions", id, "logs"] => Some(Call::Logs { id }),
            ["cmc_internal", "api", "agents", "tasks", id] | ["agents", "tasks", id] => {
                Some(Call::Task { id })
            }
            ["cmc_internal", "api", "agents", "repos", _, _, "tasks", id]
            | ["agents", "repos", _, _, "tasks", id] => Some(Call::Task { id }),
            ["cmc_internal", "api", "agents", "tasks", id, "events"]
            | ["agents", "tasks", id, "events"] => Some(Call::TaskEvents { id }),
            _ => None,
        }
        .filter(|c| provisional::is_provisional(c.id()))
    }

    fn id(&self) -> &'a str {
        match self {
            Call::Job { id, .. }
            | Call::JobOfSession { id, .. }
            | Call::Session { id }
            | Call::Logs { id }
            | Call::Task { id }
            | Call::TaskEvents { id } => id,
        }
    }

    /// Whether `item` is the create this call names (the id of the right kind, the same
    /// repository).
    fn names(&self, item: &Item) -> bool {
        let Some(ids) = &item.provisional else {
            return false;
        };
        match self {
            Call::Job { repo, id } => ids.job_id == *id && item.repo.as_deref() == Some(repo),
            Call::JobOfSession { repo, id } => {
                ids.session_id == *id && item.repo.as_deref() == Some(repo)
            }
            Call::Session { id } | Call::Logs { id } => ids.session_id == *id,
            Call::Task { id } | Call::TaskEvents { id } => {
                ids.job_id == *id && provisional::is_task_create(path_of(item))
            }
        }
    }

    /// The real id to ask the upstream for, once the create was sent.
    fn real<'s>(&self, job: Option<&'s str>, session: Option<&'s str>) -> Option<&'s str> {
        match self {
            Call::Job { .. } | Call::Task { .. } | Call::TaskEvents { .. } => job,
            _ => session,
        }
    }
}

/// What to do with a request.
pub(super) enum Follow {
    /// Not a provisional id Weir answers for (or now the real id): go on with the request.
    Pass(Request<Incoming>),
    /// Weir's answer from the queue.
    Answer(Response<Body>),
}

/// Whether `req` could be a follow-up call [`follow`] answers or rewrites: a GET, with a path
/// long enough to hold a provisional id, while the queue is open. The phases ask this first,
/// so nearly every request skips `follow` (and the making of its future) altogether.
pub(super) fn may_follow(queue: &QueueState, req: &Request<Incoming>) -> bool {
    req.method() == Method::GET
        && req.uri().path().len() > PROVISIONAL_ID_LEN
        && queue.open().is_some()
}

/// A provisional id's length (a UUID's), behind at least one `/` in a path that names one.
const PROVISIONAL_ID_LEN: usize = 36;

/// Answers (or rewrites) a follow-up call for a provisional id; anything else passes as it
/// came. Runs after the identity phase and before the cache phase.
pub(super) async fn follow(
    queue: &QueueState,
    accounts: &Accounts,
    req: Request<Incoming>,
    who: &Caller,
) -> Follow {
    if req.method() != Method::GET {
        return Follow::Pass(req);
    }
    let Some(q) = queue.open() else {
        return Follow::Pass(req);
    };
    // Every call this answers names a provisional id as one of its segments: a path with none
    // (nearly every request) passes without the copy and the parse below.
    if !req.uri().path().split('/').any(provisional::is_provisional) {
        return Follow::Pass(req);
    }
    let path = req.uri().path().to_string();
    let Some(call) = Call::parse(&path) else {
        return Follow::Pass(req);
    };
    let item = match q.store.find_by_provisional_id(call.id()).await {
        Ok(Some(item)) if call.names(&item) && same_account(accounts, &item, who) => item,
        Ok(_) => return Follow::Pass(req),
        Err(e) => {
            // The queue cannot be read: the upstream cannot know the id either, so say why.
            tracing::warn!(error = %e, "cannot read the create queue for a provisional id");
            return Follow::Answer(json(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({"message": format!("Weir cannot read its create queue: {e}")}),
                None,
            ));
        }
    };
    if let Stage::Done {
        job_id, session_id, ..
    } = provisional::stage(&item)
    {
        if let Some(real) = call.real(job_id.as_deref(), session_id.as_deref()) {
            return Follow::Pass(with_real_id(req, call.id(), real));
        }
    }
    let owner = owner(accounts, &item);
    let body = match call {
        Call::Job { .. } | Call::JobOfSession { .. } => provisional::job(&item, owner.as_ref()),
        Call::Session { .. } => provisional::session(&item, owner.as_ref()),
        Call::Task { .. } => provisional::task(&item, owner.as_ref()),
        // No event yet: what VS Code's `getTaskEvents` reads as "nothing so far" (its paging
        // stops at an empty page).
        Call::TaskEvents { .. } => Some(serde_json::json!({"events": [], "total": 0})),
        // No log lines yet: an empty log is what both clients read as "nothing so far"
        // (gh's renderer skips it; its follow loop appends what comes later).
        Call::Logs { .. } => {
            let mut r = Response::new(crate::body::full(Bytes::new()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            mark(&mut r, item.id);
            return Follow::Answer(r);
        }
    };
    match body {
        Some(v) => Follow::Answer(json(StatusCode::OK, &v, Some(item.id))),
        None => Follow::Pass(req),
    }
}

/// The item's path without its query.
pub(super) fn path_of(item: &Item) -> &str {
    item.path_and_query.split('?').next().unwrap_or("")
}

/// The credential that queued it, or one of the same GitHub account (as the accounts rule
/// resolved them); never anyone else's.
pub(super) fn same_account(accounts: &Accounts, item: &Item, who: &Caller) -> bool {
    if !who.credentialed {
        return false;
    }
    if item.identity == who.identity.hex() {
        return true;
    }
    let theirs =
        crate::identity::Identity::from_hex(&item.identity).and_then(|id| accounts.record(&id));
    match (theirs, accounts.record(&who.identity)) {
        (Some(a), Some(b)) => a.account_id == b.account_id,
        _ => false,
    }
}

pub(super) fn owner(accounts: &Accounts, item: &Item) -> Option<Owner> {
    let id = crate::identity::Identity::from_hex(&item.identity)?;
    accounts.record(&id).map(|r| Owner {
        user_id: r.account_id,
        login: r.login.clone(),
    })
}

/// The request with `real` in place of the provisional id (the last occurrence in the path;
/// the query is kept). Unchanged if the new URI would not parse (it always does: `real` is
/// percent-encoded).
fn with_real_id(mut req: Request<Incoming>, provisional: &str, real: &str) -> Request<Incoming> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let Some(at) = pq.rfind(provisional) else {
        return req;
    };
    let real = percent_encode_segment(real);
    let new_pq = format!("{}{real}{}", &pq[..at], &pq[at + provisional.len()..]);
    let mut parts = req.uri().clone().into_parts();
    if let Ok(p) = new_pq.parse() {
        parts.path_and_query = Some(p);
        if let Ok(u) = Uri::from_parts(parts) {
            *req.uri_mut() = u;
        }
    }
    req
}

/// An id from the upstream, safe as one path segment.
fn percent_encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn json(status: StatusCode, v: &serde_json::Value, queued: Option<i64>) -> Response<Body> {
    let mut r = Response::new(crate::body::full(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = queued {
        mark(&mut r, id);
    }
    r
}

/// `Weir-Queued: {id}` and `Cache-Control: no-store` (the answer changes as the item moves).
fn mark(r: &mut Response<Body>, id: i64) {
    r.headers_mut()
        .insert(super::create::QUEUED_HEADER, HeaderValue::from(id));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_follow_up_calls_are_recognised_for_provisional_ids_only() {
        let p = "0a1b2c3d-4e5f-87e1-9a0b-0c1d2e3f4a5b";
        let real = "e2fa49d2-f164-4a56-ab99-498090b8fcdf";
        assert_eq!(
            Call::parse(&format!("/agents/swe/v1/jobs/octo/app/{p}")),
            Some(Call::Job {
                repo: "octo/app".into(),
                id: p
            })
        );
        assert_eq!(
            Call::parse(&format!("/agents/swe/v1/jobs/octo/app/session/{p}")),
            Some(Call::JobOfSession {
                repo: "octo/app".into(),
                id: p
            })
        );
        assert_eq!(
            Call::parse(&format!("/agents/sessions/{p}")),
            Some(Call::Session { id: p })
        );
        assert_eq!(
            Call::parse(&format!("/agents/sessions/{p}/logs")),
            Some(Call::Logs { id: p })
        );
        for prefix in ["/cmc_internal/api/agents", "/agents"] {
            assert_eq!(
                Call::parse(&format!("{prefix}/tasks/{p}")),
                Some(Call::Task { id: p })
            );
            assert_eq!(
                Call::parse(&format!("{prefix}/repos/octo/app/tasks/{p}")),
                Some(Call::Task { id: p })
            );
            assert_eq!(
                Call::parse(&format!("{prefix}/tasks/{p}/events")),
                Some(Call::TaskEvents { id: p })
            );
            assert_eq!(Call::parse(&format!("{prefix}/tasks/{real}")), None);
        }
        assert_eq!(Call::parse(&format!("/agents/sessions/{real}")), None);
        assert_eq!(Call::parse("/agents/swe/v1/jobs/octo/app"), None);
        assert_eq!(Call::parse("/agents/sessions"), None);
    }
}
