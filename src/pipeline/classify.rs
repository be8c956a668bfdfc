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

/// What [`target`] found last on this thread, under the settings version `settings`: which
/// configured upstream `scheme` and `authority` name (`up`, `None`: none), and the route
/// table's answer for `method` and `path`. A client polling one list sends the same target
/// again and again: splitting its authority and matching it against the upstreams' origins
/// was ~0.55k of a cache hit's instructions, and a path no rule names (pass-through's `other`)
/// tried every rule (~2.3k, callgrind); comparing the bytes with the last ones is ~0.1k.
///
/// Only the configured upstreams are remembered: which one an origin names depends on the
/// settings version alone, where a learned host can be learned or dropped at any time (so it
/// is looked up every time). The memo holds its settings version weakly: the allocation
/// stays, so its address is never reused while it is remembered, but a superseded version's
/// contents (an upstream proxy's password, say) are dropped with its last strong holder, not
/// kept by every worker thread.
struct Last {
    settings: std::sync::Weak<Settings>,
    origin: Option<RememberedOrigin>,
    route: Option<RememberedRoute>,
}

struct RememberedOrigin {
    scheme: String,
    authority: String,
    up: Option<UpstreamIndex>,
}

struct RememberedRoute {
    method: Method,
    path: String,
    route: Route,
}

/// Texts past this are not kept (the copy would cost more than the match).
const KEEP: usize = 512;

/// Puts `text` in `buf`, reusing its allocation.
fn keep(buf: &mut String, text: &str) {
    buf.clear();
    buf.push_str(text);
}

impl Last {
    /// The configured upstream that `scheme://authority` names.
    fn configured(
        &mut self,
        settings: &Settings,
        scheme: &str,
        authority: &http::uri::Authority,
    ) -> Option<UpstreamIndex> {
        let a = authority.as_str();
        if let Some(o) = &self.origin {
            if o.authority == a && o.scheme == scheme {
                return o.up;
            }
        }
        let (host, port) = host_and_port(authority, default_port(scheme));
        let up = settings.upstream_for(scheme, host, port);
        if a.len() <= KEEP {
            let o = self.origin.get_or_insert_with(|| RememberedOrigin {
                scheme: String::new(),
                authority: String::new(),
                up,
            });
            keep(&mut o.scheme, scheme);
            keep(&mut o.authority, a);
            o.up = up;
        }
        up
    }

    /// The route table's answer for `method` and `path`.
    fn route(&mut self, settings: &Settings, method: &Method, path: &str) -> Route {
        if let Some(r) = &self.route {
            if r.method == *method && r.path == path {
                return r.route;
            }
        }
        let found = route(&settings.routes, method, path);
        if path.len() <= KEEP {
            let r = self.route.get_or_insert_with(|| RememberedRoute {
                method: Method::GET,
                path: String::new(),
                route: found,
            });
            r.method = method.clone();
            keep(&mut r.path, path);
            r.route = found;
        }
        found
    }
}

/// Runs `f` with this thread's [`Last`] for `settings` (emptied when it was another version's);
/// with a fresh one when the thread's is in use or gone.
fn with_last<R>(settings: &Arc<Settings>, f: impl FnOnce(&mut Last) -> R) -> R {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
    }
    let fresh = || Last {
        settings: Arc::downgrade(settings),
        origin: None,
        route: None,
    };
    let mut f = Some(f);
    let remembered = LAST.try_with(|cell| {
        let mut last = cell.try_borrow_mut().ok()?;
        let l = last.get_or_insert_with(fresh);
        if !std::ptr::eq(l.settings.as_ptr(), Arc::as_ptr(settings)) {
            *l = fresh();
        }
        f.take().map(|f| f(l))
    });
    match (remembered, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(&mut fresh()),
        // `f` ran only when it answered.
        (_, None) => unreachable!("the memo's closure ran and answered"),
    }
}

/// The port a URI of `scheme` means when it names none.
fn default_port(scheme: &str) -> u16 {
    match scheme.eq_ignore_ascii_case("https") {
        true => 443,
        false => 80,
    }
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
/// same version. The last target is remembered ([`Last`]).
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
    with_last(settings, |last| {
        // A configured upstream, else a Copilot API host learned from a token answer
        // (`Upstreams::find`'s order).
        let up = match last.configured(settings, scheme, authority) {
            Some(up) => up,
            None => {
                let (host, port) = host_and_port(authority, default_port(scheme));
                match upstreams.learned.find(scheme, host, port) {
                    Some(up) => up,
                    None => return Target::Unmanaged(Some(port)),
                }
            }
        };
        Target::Managed(up, last.route(settings, req.method(), uri.path()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::Authority;

    /// The remembered route and upstream are only ever what the table and the origins say
    /// for the same method, path, scheme, authority and settings version: requests in turn
    /// each get what a fresh look gives, and another settings version (another table, other
    /// upstreams) is asked afresh.
    #[test]
    fn a_remembered_target_is_a_fresh_looks() {
        let config = |port: u16| {
            let toml = format!(
                "default_upstreams = false\n[[upstream]]\nname = \"a\"\norigin = \"http://127.0.0.1:{port}\"\n\n[[upstream]]\nname = \"b\"\norigin = \"https://api.example.com\"\n"
            );
            crate::config::parse_str(&toml, "test").unwrap()
        };
        let a = Arc::new(config(9000));
        let mut other = config(9001);
        other.routes.clear();
        let b = Arc::new(other);
        let targets = [
            "http://127.0.0.1:9000/agents/sessions",
            "http://127.0.0.1:9000/agents/sessions/abc",
            "http://127.0.0.1:9001/agents/sessions",
            "https://api.example.com/repos/o/r",
            "https://API.example.com:443/repos/o/r",
            "http://api.example.com/repos/o/r",
            "http://127.0.0.1:9000/agents/sessions",
            "http://elsewhere.example/agents/sessions",
        ];
        let fresh = |s: &Settings, m: &Method, t: &http::Uri| {
            let a = t.authority().unwrap();
            let scheme = t.scheme_str().unwrap();
            let (host, port) = host_and_port(a, default_port(scheme));
            s.upstream_for(scheme, host, port)
                .map(|up| (up, route(&s.routes, m, t.path())))
        };
        for _ in 0..2 {
            for s in [&a, &a, &b, &a] {
                for m in [Method::GET, Method::POST] {
                    for t in targets {
                        let uri: http::Uri = t.parse().unwrap();
                        let got = with_last(s, |last| {
                            let a = uri.authority().unwrap();
                            let up = last.configured(s, uri.scheme_str().unwrap(), a)?;
                            Some((up, last.route(s, &m, uri.path())))
                        });
                        assert_eq!(got, fresh(s, &m, &uri), "{m} {t}");
                    }
                }
            }
        }
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
