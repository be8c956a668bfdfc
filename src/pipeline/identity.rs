//! Phase 2, identity: who is asking — the tool (by `User-Agent`) and the keyed hash of the
//! credential (`Authorization` + `Cookie`), never the credential itself.

use crate::identity::{Credentials, Identity, IdentityKey};
use crate::surface::Surface;
use http::HeaderValue;

/// Who is asking: the tool and the credential hash.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub surface: Surface,
    pub identity: Identity,
    /// The request carries `Authorization` or `Cookie`.
    pub credentialed: bool,
}

impl Caller {
    /// The identity a rate limit is scoped to; `None` for a request without a credential
    /// (a throttle then concerns everyone behind this address).
    pub fn scope(&self) -> Option<Identity> {
        self.credentialed.then_some(self.identity)
    }
}

/// The surface alone (counted for every request, managed or not), from the request's
/// `User-Agent` (its first value, as the front door's pass found it: `super::headers::Glance`).
pub(super) fn surface_of(user_agent: Option<&HeaderValue>) -> Surface {
    Surface::from_user_agent(user_agent.and_then(|v| v.to_str().ok()))
}

/// The caller of a request with credential headers `c`.
pub(super) fn caller(key: &IdentityKey, surface: Surface, c: &Credentials<'_>) -> Caller {
    let (identity, credentialed) = key.caller_of(c);
    Caller {
        surface,
        identity,
        credentialed,
    }
}
