//! Phase 1, classify: where a request is going — a CONNECT tunnel, a managed upstream (and
//! the route class there), or anything else (passed through untouched). Requests for Weir
//! itself are recognised first, by [`is_for_weir`], and never enter the pipeline.

use super::state::{is_own_host_name, Proxy};
use crate::config::{route, Route, Settings, UpstreamIndex};
use crate::upstream::Upstreams;
use http::{Method, Request};
use std::sync::Arc;

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
    // A proxied request names another port (its upstream's): read from the end alone, it is
    // not Weir's, without splitting the host out (~0.2k instructions of every request).
    if trailing_port(authority.as_str()).is_some_and(|p| p != proxy.port) {
        return false;
    }
    let (host, port) = host_and_port(authority, 80);
    port == proxy.port && is_own_host_name(host)
}

/// The port of an authority that ends in `:digits` (at most five, a `u16`), as `http` reads
/// it: whatever comes before (a host, user info, an IPv6 literal in brackets), the port is
/// what follows the last `:`. `None` for anything else (no port, or not a `u16`).
fn trailing_port(s: &str) -> Option<u16> {
    let b = s.as_bytes();
    let mut at = b.len();
    let mut port: u32 = 0;
    let mut scale = 1;
    while at > 0 && b.len() - at < 5 && b[at - 1].is_ascii_digit() {
        port += u32::from(b[at - 1] - b'0') * scale;
        scale *= 10;
        at -= 1;
    }
    let digits = at < b.len();
    let colon = at > 0 && b[at - 1] == b':';
    match digits && colon {
        true => u16::try_from(port).ok(),
        false => None,
    }
}

/// The route table's answer for `method` and `path`: the one this thread found last when the
/// request is the same method and path under the same settings version, else the table's. A
/// client polling one list asks it again and again, and a path no rule names (pass-through's
/// `other`) tried every rule (~2.3k instructions, callgrind). The memo holds its settings
/// version weakly: the allocation stays, so its address is never reused while it is
/// remembered, but a superseded version's contents (an upstream proxy's password, say) are
/// dropped with its last strong holder, not kept by every worker thread.
fn remembered_route(settings: &Arc<Settings>, method: &Method, path: &str) -> Route {
    use std::cell::RefCell;
    struct Last {
        settings: std::sync::Weak<Settings>,
        method: Method,
        path: String,
        route: Route,
    }
    thread_local! {
        static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
    }
    fn same(remembered: &std::sync::Weak<Settings>, now: &Arc<Settings>) -> bool {
        std::ptr::eq(remembered.as_ptr(), Arc::as_ptr(now))
    }
    // Paths past this are not kept (the copy would cost more than the match).
    const KEEP: usize = 512;
    LAST.with(|cell| {
        let Ok(mut last) = cell.try_borrow_mut() else {
            return route(&settings.routes, method, path);
        };
        if let Some(l) = last.as_ref() {
            if same(&l.settings, settings) && l.method == *method && l.path == path {
                return l.route;
            }
        }
        let found = route(&settings.routes, method, path);
        if path.len() <= KEEP {
            match last.as_mut() {
                // The path's buffer is reused; the settings are cloned only when they changed.
                Some(l) => {
                    if !same(&l.settings, settings) {
                        l.settings = Arc::downgrade(settings);
                    }
                    l.method = method.clone();
                    l.path.clear();
                    l.path.push_str(path);
                    l.route = found;
                }
                None => {
                    *last = Some(Last {
                        settings: Arc::downgrade(settings),
                        method: method.clone(),
                        path: path.to_owned(),
                        route: found,
                    })
                }
            }
        }
        found
    })
}

/// An authority's host and port (`default` when it names none), as `Authority::host` and
/// `Authority::port_u16` give them. The usual `host:port` is split at its last `:` in one
/// byte scan; `http`'s own parse (a char-by-char search from each end, per call) was ~0.7k
/// of a cache hit's instructions (callgrind). Anything else (user info, an IPv6 literal, a
/// port that is not a `u16`) is left to `http`.
fn host_and_port(authority: &http::uri::Authority, default: u16) -> (&str, u16) {
    let s = authority.as_str();
    let b = s.as_bytes();
    // The port's digits, read from the end (at most five: a `u16`).
    let mut at = b.len();
    let mut port: u32 = 0;
    let mut scale = 1;
    while at > 0 && b.len() - at < 5 && b[at - 1].is_ascii_digit() {
        port += u32::from(b[at - 1] - b'0') * scale;
        scale *= 10;
        at -= 1;
    }
    let plain = !b.contains(&b'@') && !b.contains(&b'[');
    if plain && port <= u32::from(u16::MAX) {
        match (at.checked_sub(1).map(|c| b[c]), at == b.len()) {
            // `host:digits`, or `host:` (no port: the default).
            (Some(b':'), true) => return (&s[..at - 1], default),
            (Some(b':'), false) => return (&s[..at - 1], port as u16),
            // No `:` at all: a bare host (its digits, if any, are the host's).
            _ if !b.contains(&b':') => return (s, default),
            _ => {}
        }
    }
    (authority.host(), authority.port_u16().unwrap_or(default))
}

/// `settings` is the request's one snapshot: the upstream and its route class are found in the
/// same version.
pub(super) fn target<B>(
    upstreams: &Upstreams,
    settings: &Arc<Settings>,
    req: &Request<B>,
) -> Target {
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
    let (host, port) = host_and_port(authority, default_port);
    // A configured upstream, or a Copilot API host learned from a token answer.
    match upstreams.find(settings, scheme, host, port) {
        Some(up) => Target::Managed(up, remembered_route(settings, req.method(), uri.path())),
        None => Target::Unmanaged(Some(port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::Authority;

    /// The remembered route is only ever the table's answer for the same method, path and
    /// settings version: requests in turn each get what the table says, and another settings
    /// version (another table) is asked afresh.
    #[test]
    fn a_remembered_route_is_the_tables_answer() {
        let a = Arc::new(Settings::default());
        let mut other = Settings::default();
        other.routes.clear();
        let b = Arc::new(other);
        let paths = [
            "/agents/sessions",
            "/agents/sessions/abc",
            "/repos/o/r",
            "/agents/sessions",
        ];
        for _ in 0..2 {
            for s in [&a, &a, &b, &a] {
                for m in [Method::GET, Method::POST] {
                    for p in paths {
                        assert_eq!(
                            remembered_route(s, &m, p),
                            route(&s.routes, &m, p),
                            "{m} {p}"
                        );
                    }
                }
            }
        }
        assert_ne!(
            remembered_route(&a, &Method::GET, "/agents/sessions"),
            remembered_route(&b, &Method::GET, "/agents/sessions"),
        );
    }

    /// The port read from the end is `http`'s port whenever it is given (and then decides
    /// alone that a request is not Weir's).
    #[test]
    fn a_trailing_port_is_https_port() {
        for a in [
            "api.github.com",
            "api.github.com:443",
            "127.0.0.1:8080",
            "localhost:",
            "h:0",
            "h:65535",
            "h:0080",
            "12345",
            "h:8a",
            "user@h:81",
            "user:pw@h",
            "[::1]",
            "[::1]:8443",
            "Example.COM.:80",
        ] {
            let Ok(auth) = a.parse::<Authority>() else {
                continue;
            };
            if let Some(p) = trailing_port(a) {
                assert_eq!(Some(p), auth.port_u16(), "{a}");
            }
        }
        assert_eq!(trailing_port("h:8080"), Some(8080));
        assert_eq!(trailing_port("[::1]:8443"), Some(8443));
        assert_eq!(trailing_port("h:123456"), None);
        assert_eq!(trailing_port("12345"), None);
        assert_eq!(trailing_port("user:pw@h"), None);
    }

    /// The quick split gives what `http`'s own parse gives, for every shape of authority.
    #[test]
    fn host_and_port_as_http_reads_them() {
        for a in [
            "api.github.com",
            "api.github.com:443",
            "127.0.0.1:8080",
            "localhost:",
            "h:0",
            "h:65535",
            "h:99999",
            "h:0080",
            "h:123456",
            "12345",
            "127.0.0.1",
            "h:8a",
            "user@h:81",
            "user:pw@h",
            "[::1]",
            "[::1]:8443",
            "Example.COM.:80",
        ] {
            let Ok(auth) = a.parse::<Authority>() else {
                continue;
            };
            for default in [80, 443] {
                let want = (auth.host(), auth.port_u16().unwrap_or(default));
                assert_eq!(host_and_port(&auth, default), want, "{a}");
            }
        }
    }
}
