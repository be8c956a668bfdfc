//! Phase 2, identity: who is asking — the tool (by `User-Agent`) and the keyed hash of the
//! credential (`Authorization` + `Cookie`), never the credential itself.

use crate::identity::{Identity, IdentityKey};
use crate::surface::Surface;
use http::{header, HeaderMap};

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

/// The surface alone (counted for every request, managed or not).
pub(super) fn surface_of(h: &HeaderMap) -> Surface {
    Surface::from_user_agent(h.get(header::USER_AGENT).and_then(|v| v.to_str().ok()))
}

pub(super) fn caller(key: &IdentityKey, surface: Surface, h: &HeaderMap) -> Caller {
    let (identity, credentialed) = key.caller(h);
    Caller {
        surface,
        identity,
        credentialed,
    }
}
