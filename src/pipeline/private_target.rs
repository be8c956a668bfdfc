//! Private targets: a request or CONNECT that Weir does not manage must not reach loopback,
//! link-local or private addresses, or any web page and local tool pointed at Weir could use it
//! to reach services on this machine (the cloud metadata address, admin ports) or its network.
//! The host is resolved and every address checked, so a public name that resolves to 127.0.0.1
//! is refused too. `allow_private_targets = true` turns the check off; managed upstreams are
//! never checked (they are the config's own choice).
//!
//! The check resolves the name itself, and the connection resolves it again: a name whose DNS
//! answer changes between the two (rebinding) is not caught. Clients that need local hosts
//! should list them in `NO_PROXY` (`weir env` does for localhost).

use crate::problem::{Problem, ProblemKind};
use http::StatusCode;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Refuses `host:port` when it is, or resolves to, a private address. A name that does not
/// resolve passes: the connection then fails on its own (or an `upstream_proxy` resolves it).
pub(super) async fn check(allow: bool, host: &str, port: u16) -> Result<(), Problem> {
    if allow {
        return Ok(());
    }
    let bare = host.trim_matches(['[', ']']);
    let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => match tokio::net::lookup_host((bare, port)).await {
            Ok(a) => a.map(|s| s.ip()).collect(),
            Err(_) => return Ok(()),
        },
    };
    match addrs.into_iter().find(|ip| is_private(*ip)) {
        None => Ok(()),
        Some(ip) => Err(Problem::new(
            StatusCode::FORBIDDEN,
            ProblemKind::ForbiddenTarget,
            format!(
                "`{host}:{port}` is not a managed upstream and {} {ip}, a loopback, link-local or private address; Weir does not proxy there unless `allow_private_targets = true` is set in its config file",
                if bare.parse::<IpAddr>().is_ok() { "is" } else { "resolves to" }
            ),
        )),
    }
}

/// Loopback, unspecified, link-local, private (RFC 1918 / unique local) or broadcast.
pub(crate) fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_v4(v4),
            None => is_private_v6(v6),
        },
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        // 0.0.0.0/8, "this network": connecting to it reaches this host on Linux.
        || ip.octets()[0] == 0
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        // fe80::/10 link-local, fc00::/7 unique local.
        || (first & 0xffc0) == 0xfe80
        || (first & 0xfe00) == 0xfc00
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges() {
        for p in [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_private(p.parse().unwrap()), "{p}");
        }
        for p in [
            "140.82.112.6",
            "172.32.0.1",
            "8.8.8.8",
            "2606:50c0:8000::154",
            "fec0::1",
            "::ffff:140.82.112.6",
        ] {
            assert!(!is_private(p.parse().unwrap()), "{p}");
        }
    }

    #[tokio::test]
    async fn names_are_resolved_and_the_setting_turns_it_off() {
        let p = check(false, "localhost", 80).await.unwrap_err();
        assert_eq!(p.kind, ProblemKind::ForbiddenTarget);
        assert!(p.detail.contains("allow_private_targets"));
        assert!(check(false, "[::1]", 443).await.is_err());
        assert!(check(true, "localhost", 80).await.is_ok());
        assert!(check(false, "140.82.112.6", 443).await.is_ok());
    }
}
