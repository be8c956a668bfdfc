//! `/_weir/api/handoffs`: local-agent hand-off offers (#14). Every call needs the control
//! secret (offers name repositories and carry problem statements; confirming starts a
//! program).
//!
//! - `GET /_weir/api/handoffs`: `{configured, offers: [..], recent: [..]}`;
//! - `GET /_weir/api/handoffs/{id}`: one offer (or what its create became);
//! - `POST /_weir/api/handoffs/{id}/confirm`: runs the local agent once (409 after that);
//! - `POST /_weir/api/handoffs/{id}/decline`: back to the queue; nothing runs;
//! - `POST /_weir/api/handoffs` `{repo, problem_statement, base_branch?}`: an offer made by
//!   hand (the tray, scripts), answered `201` with `Location`.

use super::{json, read_json, require_secret, Control};
use crate::body::Body;
use crate::handoff::{HandoffError, HandoffRequest};
use crate::problem::{Problem, ProblemKind};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
    rest: &str,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, &req)?;
    let h = &ctl.proxy.handoffs;
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match (req.method().clone(), parts.as_slice()) {
        (Method::GET, []) => {
            let offers = h.list().await.map_err(problem)?;
            let status = h.status();
            Ok(json(&serde_json::json!({
                "configured": status.configured,
                "offers": offers,
                "recent": status.recent,
            })))
        }
        (Method::POST, []) => {
            let body = read_json(req).await?;
            let field = |k: &str| body.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let (Some(repo), Some(statement)) = (field("repo"), field("problem_statement")) else {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemKind::BadRequest,
                    "body must be {\"repo\": \"owner/repo\", \"problem_statement\": \"…\"}",
                ));
            };
            if repo.split('/').count() != 2 || repo.split('/').any(str::is_empty) {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemKind::BadRequest,
                    format!("`{repo}` is not \"owner/repo\""),
                ));
            }
            let upstream = ctl
                .proxy
                .upstreams
                .list
                .first()
                .map(|u| u.settings.name.clone())
                .unwrap_or_default();
            let offer = h
                .offer(HandoffRequest {
                    upstream,
                    repo,
                    problem_statement: statement,
                    base_branch: field("base_branch"),
                    rule: "manual".into(),
                    create: None,
                })
                .await
                .map_err(problem)?;
            let id: i64 = offer.id.parse().unwrap_or_default();
            let view = h.get(id).await.map_err(problem)?;
            let mut r = json(&view);
            *r.status_mut() = StatusCode::CREATED;
            if let Ok(v) = HeaderValue::from_str(&offer.location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            Ok(r)
        }
        (Method::GET, [id]) => Ok(json(&h.get(parse(id)?).await.map_err(problem)?)),
        (Method::POST, [id, "confirm"]) => {
            let view = h.confirm(parse(id)?).await.map_err(problem)?;
            let mut r = json(&view);
            // Started, not finished: the outcome is recorded when the command ends.
            *r.status_mut() = StatusCode::ACCEPTED;
            Ok(r)
        }
        (Method::POST, [id, "decline"]) => Ok(json(&h.decline(parse(id)?).await.map_err(problem)?)),
        (m, _) => Err(Problem::new(
            StatusCode::NOT_FOUND,
            ProblemKind::NotFound,
            format!("no hand-off endpoint at {m} /_weir/api/handoffs{rest}"),
        )),
    }
}

fn parse(id: &str) -> Result<i64, Problem> {
    id.parse().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("`{id}` is not an offer id"),
        )
    })
}

fn problem(e: HandoffError) -> Problem {
    let kind = match &e {
        HandoffError::NotFound { .. } => ProblemKind::NotFound,
        HandoffError::Answered { .. } | HandoffError::AlreadyQueued { .. } => {
            ProblemKind::HandoffAnswered
        }
        HandoffError::QueueUnavailable(_) => ProblemKind::QueueUnavailable,
        HandoffError::NotConfigured
        | HandoffError::NoCheckout { .. }
        | HandoffError::OptionLike { .. }
        | HandoffError::Gateway => ProblemKind::HandoffUnavailable,
    };
    Problem::new(e.status(), kind, e.to_string())
}
