//! Client rate limits: each (surface, identity) may send only so many requests that would
//! reach an upstream (GCRA via governor). Cache hits are never limited.

use crate::engine::Shared;
use crate::identity::Identity;
use crate::problem::{Problem, ProblemKind};
use crate::surface::Surface;
use http::StatusCode;

/// Who is asking: the tool and the credential hash.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub surface: Surface,
    pub identity: Identity,
}

pub fn check(shared: &Shared, who: Caller) -> Result<(), Problem> {
    let Some(limiter) = &shared.rate_limiter else {
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
