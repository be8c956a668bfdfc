//! Phase 7, rescue: what Weir answers when the upstream could not. A cacheable request gets a
//! still-usable stale copy (stale-if-error, RFC 5861) instead of an upstream fault; a create
//! goes to the durable queue (see [`super::create`]). The fallback origin is tried inside the
//! attempt phase (`upstream::attempt`), where it is known whether the primary took the request.

use super::record::{Event, Outcome};
use super::respond;
use crate::body::Body;
use crate::cache::Stored;
use crate::problem::Problem;
use http::{Response, StatusCode};
use std::sync::Arc;

/// A stale copy when there is one young enough (its `Cache-Status` says `detail=` why), else
/// the problem.
pub(super) fn stale_or(
    stale: Option<Arc<Stored>>,
    seen: &Outcome,
    problem: Problem,
    detail: &str,
) -> Result<Response<Body>, Problem> {
    match stale {
        Some(s) => {
            seen.saw(Event::StaleHit);
            Ok(respond::cached(
                &s,
                &format!("weir; hit; fwd=stale; detail={detail}"),
            ))
        }
        None => Err(problem),
    }
}

/// The upstream answered with an error: a stale copy beats it when the error is the
/// upstream's fault or a rate limit (5xx, 429, GitHub's secondary-limit 403), never for a
/// client error like 404, which passes as it came.
pub(super) fn after_upstream_error(
    stale: Option<Arc<Stored>>,
    seen: &Outcome,
    failed: &Stored,
    fwd: &str,
) -> Response<Body> {
    let status = failed.status.as_u16();
    let upstream_fault = failed.status.is_server_error()
        || failed.status == StatusCode::TOO_MANY_REQUESTS
        || weir_resilience::classify_response(failed.status, &failed.headers, &failed.body)
            == weir_resilience::Kind::RateLimited;
    match stale {
        Some(s) if upstream_fault => {
            seen.saw(Event::StaleHit);
            respond::cached(&s, &format!("weir; hit; fwd=stale; fwd-status={status}"))
        }
        _ => respond::cached(failed, &format!("{fwd}; fwd-status={status}")),
    }
}
