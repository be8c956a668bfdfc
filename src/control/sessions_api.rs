//! `/_weir/api/sessions`, both calls need the control secret (titles are problem statements,
//! repositories may be private):
//! - `GET`: the companion's state and the recent sessions of the stored token's account, as
//!   the poller last saw them (no upstream call: it reads what Weir holds);
//! - `POST {repository, problem_statement, base_branch?, idempotency_key?}`: a new task, sent
//!   with the stored token through Weir's create path (duplicate suppression, durable queue).
//!   `201` created / `202` queued with `{outcome, ...}`; a refusal is a problem.

use super::{json, read_json, require_secret, token_api, Control};
use crate::body::Body;
use crate::config::RouteClass;
use crate::problem::{Problem, ProblemKind};
use crate::sessions::create::{NewTask, Outcome};
use crate::status::{SessionSummary, SessionsStatus};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;
use std::sync::Arc;

/// The `GET` answer: the status part plus the sessions themselves.
#[derive(Serialize)]
struct View {
    #[serde(flatten)]
    status: SessionsStatus,
    sessions: Vec<SessionSummary>,
}

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, &req)?;
    if req.method() == Method::GET {
        let status = ctl.sessions.status();
        let sessions = status.recent.clone();
        return Ok(json(&View { status, sessions }));
    }
    let body = read_json(req).await?;
    let task = NewTask::from_json(&body)
        .map_err(|e| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, ProblemKind::BadRequest, e))?;
    let Some(token) = token_api::stored_token(ctl).await else {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            ProblemKind::NoToken,
            "no GitHub token is stored: store one with `weir token set` or the token panel, then create the task again",
        ));
    };
    let Some(up) = crate::sessions::agents_upstream(&ctl.proxy.upstreams, &token) else {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::Internal,
            "no upstream is configured to send the task to",
        ));
    };
    let origin = ctl.proxy.upstreams.get(up).settings.origin.to_string();
    let loopback = crate::sessions::loopback(&ctl.proxy, RouteClass::Create);
    let outcome = task.send(&loopback, &origin, &token).await.map_err(|e| {
        Problem::new(
            StatusCode::BAD_GATEWAY,
            ProblemKind::Internal,
            format!("the task did not get through Weir's create path: {e}"),
        )
    })?;
    match outcome {
        Outcome::Created { status, .. } | Outcome::Queued { status, .. } => {
            let mut r = json(&outcome);
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Ok(r)
        }
        Outcome::Refused { status, body } => Err(refused(status, &body)),
    }
}

/// A refused task as a problem. GitHub's 401/403 become a 502 `auth` problem: a 401 from this
/// endpoint would read as "the control secret was refused".
fn refused(status: u16, body: &serde_json::Value) -> Problem {
    let said = ["detail", "message"]
        .iter()
        .find_map(|k| body.get(*k).and_then(|v| v.as_str()))
        .unwrap_or("")
        .chars()
        .take(500)
        .collect::<String>();
    let (code, kind) = match status {
        401 | 403 => (StatusCode::BAD_GATEWAY, ProblemKind::Auth),
        429 => (StatusCode::TOO_MANY_REQUESTS, ProblemKind::RateLimited),
        400..=499 => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            ProblemKind::Fatal,
        ),
        _ => (StatusCode::BAD_GATEWAY, ProblemKind::ServerError),
    };
    let who = if kind == ProblemKind::Auth {
        "GitHub refused the stored token"
    } else {
        "the task was refused"
    };
    let detail = if said.is_empty() {
        format!("{who} ({status})")
    } else {
        format!("{who} ({status}): {said}")
    };
    Problem::new(code, kind, detail)
}
