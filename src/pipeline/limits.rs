//! The request limits, each applied in one place: the header-size cap by the front door
//! (`super::front`, every request before anything else) and the client rate limit by the
//! driver (`super::admit_and_run`) — each (surface, identity) may send only so many requests
//! that would reach an upstream (GCRA). Cache hits and requests joining a running flight reach
//! none, so they are never limited.

use super::identity::Caller;
use super::state::ClientRateLimit;
use crate::config::Limits;
use crate::problem::{Problem, ProblemKind};
use http::StatusCode;

/// The cap on a header section of `size` bytes (`super::headers::header_bytes`).
pub(crate) fn header_size(limits: &Limits, size: usize) -> Result<(), Problem> {
    if size > limits.max_header_bytes {
        return Err(Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProblemKind::HeaderTooLarge,
            format!("the request headers are {size} bytes; Weir accepts at most {} (limits.max_header_bytes)", limits.max_header_bytes),
        ));
    }
    Ok(())
}

pub(super) fn client_rate(
    rate_limiter: &arc_swap::ArcSwap<ClientRateLimit>,
    who: Caller,
) -> Result<(), Problem> {
    let rl = rate_limiter.load();
    let Some(limiter) = &rl.limiter else {
        return Ok(());
    };
    match limiter.check(&(who.surface, who.identity)) {
        Ok(_) => Ok(()),
        Err(t) => {
            let h = t.header_values();
            let mut p = Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                ProblemKind::RateLimited,
                format!(
                    "this {} client is sending requests faster than Weir's per-client limit (rate_limit.burst / rate_limit.per)",
                    who.surface.as_str()
                ),
            )
            .retry_after(t.retry_after);
            p.headers.push(("ratelimit-policy", h.policy));
            p.headers.push(("ratelimit", h.ratelimit));
            Err(p)
        }
    }
}
