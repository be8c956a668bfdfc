//! Network overrides of Weir's own upstream connections: per upstream `connect_to` (like curl's
//! `--connect-to`) and `ca_file` (extra trusted roots), and the top-level `upstream_proxy`.
//! Parsed here; `upstream_net.rs` validates an `[[upstream]]`'s, `load.rs` reports a failure
//! with the file, line and key.

use rustls::pki_types::CertificateDer;
use std::fmt;
use std::path::{Path, PathBuf};

/// Per-upstream connection overrides.
#[derive(Debug, Clone, Default)]
pub struct UpstreamNet {
    /// TCP goes here instead of the origin's host and port; TLS SNI, certificate checks and
    /// `Host` still use the origin's name.
    pub connect_to: Option<HostPort>,
    /// Where `extra_roots` were read from (shown by `weir doctor`).
    pub ca_file: Option<PathBuf>,
    /// Trusted for this upstream in addition to the platform's roots.
    pub extra_roots: Vec<CertificateDer<'static>>,
}

/// A `host:port` pair (IPv6 hosts without brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    /// Parses `host:port`; the port is required.
    pub fn parse(text: &str) -> Result<HostPort, String> {
        let authority: http::uri::Authority = text
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not of the form host:port"))?;
        let port = authority
            .port_u16()
            .ok_or_else(|| format!("`{text}` has no port; write host:port"))?;
        let host = authority.host().trim_matches(['[', ']']).to_string();
        if host.is_empty() || text.contains(['/', '@']) {
            return Err(format!("`{text}` is not of the form host:port"));
        }
        Ok(HostPort { host, port })
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The proxy Weir's own upstream connections are tunnelled through (HTTP CONNECT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    pub address: HostPort,
}

impl UpstreamProxy {
    /// Parses `http://host:port` (an `https://` proxy or credentials in the URL are refused: Weir
    /// speaks plain HTTP CONNECT to the proxy and has nowhere safe to keep a proxy password).
    pub fn parse(text: &str) -> Result<UpstreamProxy, String> {
        let rest = text.strip_prefix("http://").ok_or_else(|| {
            format!("`{text}` must start with http:// (Weir talks plain HTTP CONNECT to the proxy)")
        })?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('@') {
            return Err("credentials in the proxy URL are not supported".to_string());
        }
        if rest.contains(['/', '?', '#']) {
            return Err(format!("`{text}` must be only http://host:port"));
        }
        let address = match HostPort::parse(rest) {
            Ok(a) => a,
            Err(_) if !rest.is_empty() && !rest.contains(':') => HostPort {
                host: rest.to_string(),
                port: 80,
            },
            Err(m) => return Err(m),
        };
        Ok(UpstreamProxy { address })
    }

    /// `http://host:port`, the form hyper-util's CONNECT tunnel takes.
    pub fn uri(&self) -> String {
        format!("http://{}", self.address)
    }
}

/// Every certificate in a PEM file; an unreadable file or one without certificates is an error.
pub fn read_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let certs: Vec<CertificateDer<'static>> = weir_tls::pem_certificates(&bytes)
        .map_err(|e| format!("{} is not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;

    #[test]
    fn host_port_and_proxy_parse() {
        assert_eq!(
            HostPort::parse("127.0.0.1:8443").unwrap(),
            HostPort {
                host: "127.0.0.1".into(),
                port: 8443
            }
        );
        assert_eq!(HostPort::parse("[::1]:1").unwrap().to_string(), "[::1]:1");
        assert!(HostPort::parse("localhost").is_err());
        assert_eq!(
            UpstreamProxy::parse("http://proxy.corp:3128")
                .unwrap()
                .uri(),
            "http://proxy.corp:3128"
        );
        assert_eq!(
            UpstreamProxy::parse("http://proxy.corp/")
                .unwrap()
                .address
                .port,
            80
        );
        assert!(UpstreamProxy::parse("https://p:1").is_err());
        assert!(UpstreamProxy::parse("http://u:pw@p:1").is_err());
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = parse_str(
            "[[upstream]]\nname = \"a\"\norigin = \"https://a.example\"\nconnect_to = \"nope\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:4: key `upstream.connect_to`"),
            "{e}"
        );
        let e = parse_str("[[upstream]]\nname = \"a\"\norigin = \"https://a.example\"\nca_file = \"/nonexistent/ca.pem\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:4: key `upstream.ca_file`: cannot read /nonexistent/ca.pem"),
            "{e}"
        );
        let e = parse_str(
            "intercept = true\nupstream_proxy = \"socks5://x:1\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:2: key `upstream_proxy`"),
            "{e}"
        );
        let e = parse_str("intercept = \"yes\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:1: key `intercept`"),
            "{e}"
        );
    }

    #[test]
    fn defaults_and_hosts() {
        let s = parse_str("", "w.toml").unwrap();
        assert!(s.intercept);
        assert!(s.upstream_proxy.is_none());
        assert_eq!(
            s.intercept_hosts(),
            vec!["githubcopilot.com", "api.github.com"]
        );
        let s = parse_str("intercept = false\nupstream_proxy = \"http://127.0.0.1:3128\"\ndefault_upstreams = false\n[[upstream]]\nname = \"a\"\norigin = \"http://a.example\"\n", "w.toml").unwrap();
        assert!(!s.intercept);
        assert_eq!(s.upstream_proxy.as_ref().unwrap().address.port, 3128);
        assert!(s.intercept_hosts().is_empty());
    }
}
