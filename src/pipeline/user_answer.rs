//! Phase 8, for a client's own `GET /user` on the `github-api` upstream: its answer names the
//! credential's account, so the account directory reads it ([`crate::accounts`]'s `learn`)
//! instead of sending a `/user` of its own. The answer reaches the client unchanged.

use super::context::Answer;
use crate::accounts::{Accounts, UserCall};
use crate::problem::{Problem, ProblemKind};
use http::{Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use std::time::Duration;

/// A `/user` body is about 1.5 KB; one larger than this is passed on unread.
const MAX_READ: u64 = 64 * 1024;

/// Reads `answer` for `call`'s credential; returns it as it came.
pub(super) async fn learn(accounts: &Accounts, call: UserCall, answer: Answer) -> Answer {
    let resp = answer?;
    match resp.status() {
        StatusCode::UNAUTHORIZED => {
            accounts.learn(&call, resp.status(), resp.headers(), b"", Duration::ZERO);
            return Ok(resp);
        }
        StatusCode::OK => {}
        _ => return Ok(resp),
    }
    // Only a body whose whole length is known and small (a cached or buffered answer: Weir
    // caches `/user` like a view, so it always is) is read; a stream is left alone.
    if resp.body().size_hint().exact().is_none_or(|n| n > MAX_READ) {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let Ok(body) = body.collect().await else {
        // An in-memory body does not fail; if one did, a problem, never a body shorter than
        // its `Content-Length`.
        return Err(Problem::new(
            StatusCode::BAD_GATEWAY,
            ProblemKind::Connection,
            "the upstream's answer to GET /user broke off",
        ));
    };
    let body = body.to_bytes();
    // Weir's copy says how old it is, in whole seconds (rounded down: a copy is taken as a
    // second older than it says, so one made just before a 401 is never dated after it); a
    // fresh answer has no `Age`.
    let age = super::respond::age_of(&parts.headers)
        .map(|a| a + Duration::from_secs(1))
        .unwrap_or_default();
    accounts.learn(&call, parts.status, &parts.headers, &body, age);
    Ok(Response::from_parts(parts, crate::body::full(body)))
}
