//! Managed host names: how they are normalised, and what the CA's DNS name constraints permit.
//!
//! # What a DNS subtree permits (RFC 5280 §4.2.1.10)
//! A permitted `dNSName` subtree `api.github.com` matches that exact name **and every name made by
//! adding labels on the left** (`x.api.github.com`, `a.b.api.github.com`). It does not match
//! siblings or parents (`github.com`, `uploads.github.com`) or names that merely end with the same
//! characters (`evilapi.github.com`). X.509 has no way to permit one exact name without its
//! subdomains, so the CA is somewhat wider than the list; [`crate::LeafIssuer`] is not: it issues
//! only for names that are exactly on the list. All names below the managed hosts belong to the
//! same owner (GitHub), so a stolen CA key still cannot impersonate any other organisation's site.
//!
//! The CA also excludes every IPv4 and IPv6 address (`0.0.0.0/0`, `::/0`): without that, name
//! constraints on DNS names alone would leave IP-address certificates unconstrained.

use std::net::IpAddr;

use rustls::pki_types::DnsName;

use crate::TlsError;

/// Lower-cases `host`, drops one trailing dot, and checks it is a DNS name Weir can manage
/// (no IP literal, no wildcard, no leading dot).
pub fn normalize_host(host: &str) -> Result<String, TlsError> {
    let invalid = |reason| TlsError::InvalidHost {
        host: host.to_owned(),
        reason,
    };
    let trimmed = host.trim();
    let name = trimmed
        .strip_suffix('.')
        .unwrap_or(trimmed)
        .to_ascii_lowercase();
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(invalid("IP addresses cannot be managed hosts"));
    }
    if name.contains('*') {
        return Err(invalid("wildcards are not allowed"));
    }
    if name.starts_with('.') {
        return Err(invalid("a leading dot is not allowed"));
    }
    DnsName::try_from(name.as_str()).map_err(|_| invalid("not a valid DNS name"))?;
    Ok(name)
}

/// Normalises every host, drops duplicates (keeping first-seen order) and refuses an empty list,
/// because a CA without permitted subtrees would be unconstrained.
pub fn normalize_list(hosts: &[String]) -> Result<Vec<String>, TlsError> {
    let mut out: Vec<String> = Vec::with_capacity(hosts.len());
    for host in hosts {
        let name = normalize_host(host)?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    if out.is_empty() {
        return Err(TlsError::NoPermittedHosts);
    }
    Ok(out)
}

/// True when the permitted DNS subtree `subtree` covers `name` under RFC 5280 rules (see the
/// module docs). Both are expected to be normalised.
pub fn subtree_permits(subtree: &str, name: &str) -> bool {
    if name == subtree {
        return true;
    }
    name.len() > subtree.len()
        && name.ends_with(subtree)
        && name.as_bytes()[name.len() - subtree.len() - 1] == b'.'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_case_and_trailing_dot() {
        assert_eq!(normalize_host("API.GitHub.com.").unwrap(), "api.github.com");
    }

    #[test]
    fn rejects_ip_wildcard_empty_and_garbage() {
        for bad in [
            "",
            ".",
            "127.0.0.1",
            "::1",
            "*.github.com",
            ".github.com",
            "a b.com",
        ] {
            assert!(
                matches!(normalize_host(bad), Err(TlsError::InvalidHost { .. })),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn list_dedupes_and_refuses_empty() {
        let hosts = vec![
            "a.example".to_owned(),
            "A.example.".to_owned(),
            "b.example".to_owned(),
        ];
        assert_eq!(
            normalize_list(&hosts).unwrap(),
            vec!["a.example", "b.example"]
        );
        assert!(matches!(
            normalize_list(&[]),
            Err(TlsError::NoPermittedHosts)
        ));
    }

    #[test]
    fn subtree_semantics() {
        assert!(subtree_permits("api.github.com", "api.github.com"));
        assert!(subtree_permits("api.github.com", "x.api.github.com"));
        assert!(!subtree_permits("api.github.com", "evilapi.github.com"));
        assert!(!subtree_permits("api.github.com", "github.com"));
        assert!(!subtree_permits(
            "api.github.com",
            "api.github.com.evil.example"
        ));
    }
}
