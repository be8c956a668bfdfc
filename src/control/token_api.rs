//! `PUT/DELETE /_weir/api/token`: store or remove a GitHub token in the OS keychain (account
//! `github-token`). It is never sent back; the status document only says whether one is stored.
//! The sessions companion ([`crate::sessions`]) polls with it; every change wakes its poller.
//! `POST /_weir/api/token/reload` re-reads the keychain after `weir token set|forget` changed
//! it from outside.
//! The in-doubt lookup uses it when a queued item's own credential is gone and the token belongs
//! to the same GitHub account (`crate::queue::lookup`).

use super::Control;
use super::{json, read_json, require_secret};
use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use crate::secrets::Account;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

pub const ACCOUNT: &str = Account::GithubToken.as_str();

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, &req)?;
    let Some(q) = ctl.proxy.queue.open() else {
        return Err(unavailable("the keychain store is not open"));
    };
    if !q.secrets.kind().is_persistent() {
        return Err(unavailable(
            "no persistent secret store is open (no OS keychain, and [secrets] store = \"keychain\" or [queue] credentials = \"memory\")",
        ));
    }
    match *req.method() {
        Method::PUT => {
            let body = read_json(req).await?;
            let token = body
                .get("token")
                .and_then(|t| t.as_str())
                .map(str::trim)
                .unwrap_or("");
            if token.is_empty() || token.len() > 1024 || token.chars().any(char::is_whitespace) {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemKind::BadRequest,
                    "body must be {\"token\": \"<a GitHub token>\"} with no spaces",
                ));
            }
            q.secrets
                .put(ACCOUNT, token.to_string())
                .await
                .map_err(|e| unavailable(&e.to_string()))?;
            ctl.token_stored
                .store(true, std::sync::atomic::Ordering::Relaxed);
            ctl.sessions.token_changed();
            Ok(json(&serde_json::json!({"stored": true})))
        }
        Method::DELETE => {
            q.secrets.delete(ACCOUNT).await;
            ctl.token_stored
                .store(false, std::sync::atomic::Ordering::Relaxed);
            ctl.sessions.token_changed();
            Ok(json(&serde_json::json!({"stored": false})))
        }
        _ => Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::NotFound,
            "use PUT or DELETE",
        )),
    }
}

/// `POST /_weir/api/token/reload`: the keychain entry changed outside Weir (`weir token`);
/// read whether one is stored again and wake the sessions poller. Needs the secret.
pub(crate) async fn reload(
    ctl: &Arc<Control>,
    req: &Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, req)?;
    let stored = is_stored(ctl).await;
    ctl.token_stored
        .store(stored, std::sync::atomic::Ordering::Relaxed);
    ctl.sessions.token_changed();
    Ok(json(&serde_json::json!({"stored": stored})))
}

/// The stored token, for Weir's own calls with it (the new-task form). Never logged or sent
/// back.
pub(crate) async fn stored_token(ctl: &Control) -> Option<String> {
    match ctl.proxy.queue.open() {
        Some(q) if q.secrets.kind().is_persistent() => q
            .secrets
            .get(ACCOUNT)
            .await
            .ok()
            .flatten()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
        _ => None,
    }
}

/// Whether a token is stored (never the token itself).
pub(crate) async fn is_stored(ctl: &Control) -> bool {
    match ctl.proxy.queue.open() {
        Some(q) if q.secrets.kind().is_persistent() => {
            matches!(q.secrets.get(ACCOUNT).await, Ok(Some(_)))
        }
        _ => false,
    }
}

fn unavailable(why: &str) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ProblemKind::QueueUnavailable,
        format!("cannot store the token: {why}"),
    )
}
