//! Copilot API hosts announced in answers passing through Weir: a token answer's
//! `endpoints.api` (`GET api.github.com/copilot_internal/v2/token`, the `token` class) names the
//! host the account's agent calls go to. A `*.githubcopilot.com` host no configured upstream
//! covers is managed from then on (see `crate::upstream::learned`).

use super::state::Proxy;
use crate::cache::Stored;
use crate::config::RouteClass;

/// Called with every upstream answer the cache phase fetched.
pub(super) fn observe(proxy: &Proxy, class: RouteClass, stored: &Stored) {
    if class != RouteClass::Token || !stored.is_success() {
        return;
    }
    if let Some(body) = super::token_age::decoded_body(&stored.headers, &stored.body) {
        proxy.upstreams.learn_from(&body);
    }
}
