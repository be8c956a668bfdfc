//! Phase 1, classify: where a request is going — a CONNECT tunnel, a managed upstream (and
//! the route class there), or anything else (passed through untouched). Requests for Weir
//! itself are recognised first, by [`is_for_weir`], and never enter the pipeline.

use super::state::{is_own_host_name, Proxy};
use crate::config::{route, Route, Settings, UpstreamIndex};
use crate::upstream::Upstreams;
use http::{Method, Request};

/// Where a request is going.
pub(super) enum Target {
    Connect,
    /// A managed upstream (by index) and the request's route there (class and family).
    Managed(UpstreamIndex, Route),
    /// Anything else: passed through untouched; the target's port (the scheme's default when
    /// the URI names none), `None` when the request names no host.
    Unmanaged(Option<u16>),
}

/// Requests for Weir's own control API and dashboard: origin-form, or absolute-form naming
/// Weir itself.
pub(crate) fn is_for_weir<B>(proxy: &Proxy, req: &Request<B>) -> bool {
    if req.method() == Method::CONNECT {
        return false;
    }
    let Some(authority) = req.uri().authority() else {
        return true;
    };
    authority.port_u16().unwrap_or(80) == proxy.port && is_own_host_name(authority.host())
}

/// `settings` is the request's one snapshot: the upstream and its route class are found in the
/// same version.
pub(super) fn target<B>(upstreams: &Upstreams, settings: &Settings, req: &Request<B>) -> Target {
    if req.method() == Method::CONNECT {
        return Target::Connect;
    }
    let uri = req.uri();
    let Some(authority) = uri.authority() else {
        return Target::Unmanaged(None);
    };
    let scheme = uri.scheme_str().unwrap_or("http");
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let port = authority.port_u16().unwrap_or(default_port);
    // A configured upstream, or a Copilot API host learned from a token answer.
    match upstreams.find(settings, scheme, authority.host(), port) {
        Some(up) => Target::Managed(up, route(&settings.routes, req.method(), uri.path())),
        None => Target::Unmanaged(Some(port)),
    }
}
