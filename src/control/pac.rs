//! `GET /proxy.pac`: a proxy auto-config script that sends only the managed upstreams to Weir
//! and everything else `DIRECT`, for browsers and tools that take a PAC URL
//! (`chromium --proxy-pac-url=http://127.0.0.1:PORT/proxy.pac`, OS proxy settings).
//!
//! Managed hosts get `PROXY 127.0.0.1:PORT; DIRECT`: when Weir is not running, the browser
//! finds the proxy refusing connections and goes `DIRECT` instead of failing (the PAC itself
//! is kept by the browser once fetched; see docs/pac.md for what happens at a cold start).

use crate::body::Body;
use crate::config::Settings;
use http::Response;

pub const CONTENT_TYPE: &str = "application/x-ns-proxy-autoconfig";

/// The PAC script for this engine's managed upstreams and listening port.
pub(crate) fn script(settings: &Settings, port: u16) -> String {
    // `; DIRECT`: tools keep working while Weir is gone (Weir's policies then do not apply).
    let proxy = format!(
        "PROXY {}; DIRECT",
        crate::pipeline::host_for(settings.listen.ip(), port)
    );
    let mut rules = String::new();
    // Every Copilot API host, so a per-plan host Weir learns at run time (a token answer's
    // `endpoints.api`) goes through Weir without a new PAC: one the browser kept still covers
    // it. Weir tunnels a host it does not manage untouched, as `DIRECT` would.
    if settings
        .upstreams
        .iter()
        .any(|u| crate::config::is_copilot_host(u.origin.host()))
    {
        rules.push_str(&format!(
            "  if (scheme === \"https\" && (host === \"{d}\" || dnsDomainIs(host, \".{d}\"))) return \"{proxy}\";\n",
            d = crate::config::COPILOT_DOMAIN
        ));
    }
    for u in &settings.upstreams {
        // Host names in a PAC are compared lower-case; the origin's host already is. The port
        // is left out on purpose: browsers pass only the host to FindProxyForURL.
        rules.push_str(&format!(
            "  if (scheme === \"{}\" && host === {}) return \"{proxy}\";\n",
            u.origin.scheme().as_str(),
            js_string(u.origin.host())
        ));
    }
    format!(
        "// Weir: only the managed upstreams go through Weir; everything else is DIRECT.\n\
         function FindProxyForURL(url, host) {{\n  \
         host = host.toLowerCase();\n  \
         var scheme = url.substring(0, url.indexOf(\":\")).toLowerCase();\n\
         {rules}  return \"DIRECT\";\n}}\n"
    )
}

pub(crate) fn response(settings: &Settings, port: u16) -> Response<Body> {
    crate::control::text(CONTENT_TYPE, script(settings, port))
}

/// A JavaScript string literal (host names are plain ASCII, but never trust that in code).
fn js_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_names_managed_hosts_only() {
        let settings = crate::config::parse_str(
            "[[upstream]]\nname = \"a\"\norigin = \"https://api.githubcopilot.com\"\n[[upstream]]\nname = \"b\"\norigin = \"http://127.0.0.1:8080\"\n",
            "t.toml",
        )
        .unwrap();
        let pac = script(&settings, 9347);
        assert!(pac.contains("if (scheme === \"https\" && host === \"api.githubcopilot.com\") return \"PROXY 127.0.0.1:9347; DIRECT\";"), "{pac}");
        assert!(pac.contains("host === \"127.0.0.1\""), "{pac}");
        assert!(pac.contains("if (scheme === \"https\" && (host === \"githubcopilot.com\" || dnsDomainIs(host, \".githubcopilot.com\"))) return \"PROXY 127.0.0.1:9347; DIRECT\";"), "{pac}");
        // The built-in hosts, with no config at all.
        let pac = script(&crate::config::Settings::default(), 9347);
        for h in [
            "api.individual.githubcopilot.com",
            "api.business.githubcopilot.com",
            "api.enterprise.githubcopilot.com",
            "api.github.com",
        ] {
            assert!(pac.contains(&format!("host === \"{h}\"")), "{h}: {pac}");
        }
        // No Copilot host managed: no domain rule.
        let none = crate::config::parse_str("default_upstreams = false\n[[upstream]]\nname = \"b\"\norigin = \"http://127.0.0.1:8080\"\n", "t.toml").unwrap();
        assert!(!script(&none, 9347).contains("dnsDomainIs"));
        assert!(pac.trim_end().ends_with("return \"DIRECT\";\n}"), "{pac}");
    }
}
