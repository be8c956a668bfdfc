//! `scheme://host[:port]` origins of managed upstreams.

use std::fmt;

/// The fields are private and made only by [`Origin::parse`], so the URI authority derived
/// from host and port cannot drift from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: Scheme,
    host: String,
    port: u16,
    /// `host[:port]` as a URI authority, made once at parse: every upstream attempt's URI
    /// takes a cheap clone of it instead of formatting and parsing the text again.
    uri_authority: http::uri::Authority,
    /// The same text as the `Host` header of a request to this origin, made once at parse.
    host_header: http::HeaderValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl Origin {
    /// Parses `scheme://host[:port]` with nothing after it (a trailing `/` is tolerated).
    pub fn parse(text: &str) -> Result<Origin, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("`{text}` is not of the form scheme://host[:port]"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => return Err(format!("scheme `{other}` is not http or https")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}` must be only scheme://host[:port], with no path, query or user"
            ));
        }
        let authority: http::uri::Authority = rest
            .parse()
            .map_err(|_| format!("`{rest}` is not a valid host[:port]"))?;
        // Canonical: lower case and without the root's trailing dot, so a name is kept and
        // looked up the same way (`api.github.com.` is `api.github.com`).
        let host = authority
            .host()
            .trim_matches(['[', ']'])
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        let uri_authority: http::uri::Authority = authority_of(&host, port, scheme)
            .parse()
            .map_err(|_| format!("`{rest}` is not a valid host[:port]"))?;
        let host_header = http::HeaderValue::from_str(uri_authority.as_str())
            .map_err(|_| format!("`{rest}` is not a valid host[:port]"))?;
        Ok(Origin {
            scheme,
            host,
            port,
            uri_authority,
            host_header,
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host, lower-case, without IPv6 brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's default when none was written.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        // The port first (one compare), and the host's brackets and trailing dots trimmed as
        // bytes: `trim_matches` with a char set walks chars (every request asks each upstream).
        let mut h = host.as_bytes();
        while let [b'[' | b']', rest @ ..] = h {
            h = rest;
        }
        while let [rest @ .., b'[' | b']'] = h {
            h = rest;
        }
        while let [rest @ .., b'.'] = h {
            h = rest;
        }
        self.port == port
            && self.host.as_bytes().eq_ignore_ascii_case(h)
            && self.scheme.as_str().eq_ignore_ascii_case(scheme)
    }

    /// `scheme://authority` + `pq`: the URI of a request to this origin. Built from parts, not
    /// by formatting and re-parsing a string (it runs once per upstream attempt).
    pub fn uri(&self, pq: http::uri::PathAndQuery) -> Result<http::Uri, http::Error> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.uri_scheme());
        parts.authority = Some(self.uri_authority.clone());
        parts.path_and_query = Some(pq);
        Ok(http::Uri::from_parts(parts)?)
    }

    /// [`Origin::uri`] for a request whose target is `target`: the target itself (a cheap
    /// clone) when it already names this origin byte for byte — a proxy client's absolute
    /// URI for the upstream it is configured with —, else the origin's scheme and authority
    /// with the target's path and query.
    pub fn uri_for(&self, target: &http::Uri) -> Result<http::Uri, http::Error> {
        if self.names(target) {
            return Ok(target.clone());
        }
        let pq = target
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        self.uri(pq)
    }

    /// Whether `target` is already [`Origin::uri_for`]'s answer: an absolute URI naming this
    /// origin byte for byte, with a path.
    pub fn names(&self, target: &http::Uri) -> bool {
        target.scheme_str() == Some(self.scheme.as_str())
            && target.path_and_query().is_some()
            && target
                .authority()
                .is_some_and(|a| a.as_str() == self.uri_authority.as_str())
    }

    fn uri_scheme(&self) -> http::uri::Scheme {
        match self.scheme {
            Scheme::Http => http::uri::Scheme::HTTP,
            Scheme::Https => http::uri::Scheme::HTTPS,
        }
    }

    /// The `Host` header of a request to this origin: [`Origin::uri`]'s authority (a cheap
    /// clone; every upstream attempt sets it).
    pub fn host_header(&self) -> &http::HeaderValue {
        &self.host_header
    }

    /// `host:port` (brackets around IPv6), as used in a URI authority.
    pub fn authority(&self) -> String {
        authority_of(&self.host, self.port, self.scheme)
    }
}

fn authority_of(host: &str, port: u16, scheme: Scheme) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == scheme.default_port() {
        host
    } else {
        format!("{host}:{port}")
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.authority())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_defaults_port() {
        let o = Origin::parse("https://api.githubcopilot.com").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("api.githubcopilot.com", 443));
        let o = Origin::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(o.port, 8080);
        assert!(o.matches("http", "127.0.0.1", 8080));
        assert_eq!(o.to_string(), "http://127.0.0.1:8080");
        assert_eq!(o.host_header(), "127.0.0.1:8080");
        let o = Origin::parse("https://[::1]:443").unwrap();
        assert_eq!(
            o.host_header(),
            o.uri(http::uri::PathAndQuery::from_static("/"))
                .unwrap()
                .authority()
                .unwrap()
                .as_str()
        );
    }

    /// A target that names the origin byte for byte is sent as it is; any other (origin form,
    /// another spelling of the host, another port or scheme) gets the origin's scheme and
    /// authority with its own path and query.
    #[test]
    fn a_target_naming_the_origin_is_kept_and_any_other_is_aimed() {
        let o = Origin::parse("http://127.0.0.1:8080").unwrap();
        let same: http::Uri = "http://127.0.0.1:8080/repos/o/r?page=2".parse().unwrap();
        assert_eq!(o.uri_for(&same).unwrap(), same);
        for (target, want) in [
            (
                "/repos/o/r?page=2",
                "http://127.0.0.1:8080/repos/o/r?page=2",
            ),
            ("http://LOCALHOST:8080/x", "http://127.0.0.1:8080/x"),
            ("http://127.0.0.1:9090/x", "http://127.0.0.1:8080/x"),
            ("https://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
            ("http://u@127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
        ] {
            let t: http::Uri = target.parse().unwrap();
            assert_eq!(o.uri_for(&t).unwrap().to_string(), want, "{target}");
        }
        let tls = Origin::parse("https://api.github.com").unwrap();
        let t: http::Uri = "https://api.github.com/user".parse().unwrap();
        assert_eq!(tls.uri_for(&t).unwrap(), t);
        assert_eq!(
            tls.uri_for(&"/user".parse().unwrap()).unwrap().to_string(),
            "https://api.github.com/user"
        );
    }

    /// Issue 31, item 1: a name is canonical when kept (no trailing dot, lower case) and
    /// matched the same way.
    #[test]
    fn a_trailing_dot_is_not_part_of_the_name() {
        let o = Origin::parse("https://API.x.githubcopilot.com./").unwrap();
        assert_eq!(o.host(), "api.x.githubcopilot.com");
        assert_eq!(o.to_string(), "https://api.x.githubcopilot.com");
        assert!(o.matches("https", "api.x.githubcopilot.com.", 443));
        assert!(o.matches("https", "API.X.githubcopilot.com", 443));
        assert!(Origin::parse("https://./").is_err());
    }

    /// An IPv6 literal matches with its brackets (as a URI's host has them) or without; the
    /// port and the scheme still decide.
    #[test]
    fn an_ipv6_host_matches_with_or_without_brackets() {
        let o = Origin::parse("http://[::1]:8080").unwrap();
        assert!(o.matches("http", "[::1]", 8080));
        assert!(o.matches("HTTP", "::1", 8080));
        assert!(!o.matches("http", "[::1]", 8081));
        assert!(!o.matches("https", "[::1]", 8080));
        assert!(!o.matches("http", "[::2]", 8080));
        assert!(!o.matches("http", "", 8080));
    }

    #[test]
    fn rejects_paths_and_bad_schemes() {
        assert!(Origin::parse("https://x.com/api").is_err());
        assert!(Origin::parse("ftp://x.com").is_err());
        assert!(Origin::parse("x.com").is_err());
    }
}
