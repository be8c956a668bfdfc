//! The one name lookup of a connection Weir opens to a host it does not manage. The addresses
//! checked against the private ranges are the addresses connected to: a name whose DNS answer
//! changes between a check and a connect (rebinding) cannot slip through, and a lookup that
//! fails is a failed connection, never a pass. Managed upstreams are never checked (they are
//! the config's own choice); with an `upstream_proxy`, that proxy resolves names and the check
//! of what it reaches is its job.

use hyper_util::client::legacy::connect::dns::Name;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_service::Service;

/// A connection to `host` was refused because it is, or resolves to, the private `ip`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`{host}` {} {ip}, a loopback, link-local, private or reserved address; Weir does not proxy there unless `allow_private_targets = true` is set in its config file", if host.parse::<IpAddr>().is_ok() { "is" } else { "resolves to" })]
pub struct Refused {
    pub host: String,
    pub ip: IpAddr,
}

/// Resolves `host:port` once and, when `refuse_private`, fails with [`Refused`] (inside the
/// `io::Error`) if any address is private. The addresses returned are the ones to connect to.
pub async fn lookup(host: &str, port: u16, refuse_private: bool) -> io::Result<Vec<SocketAddr>> {
    let bare = host.trim_matches(['[', ']']);
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port)).await?.collect(),
    };
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("`{bare}` resolves to no address"),
        ));
    }
    if refuse_private {
        if let Some(a) = addrs.iter().find(|a| is_private(a.ip())) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                Refused {
                    host: bare.to_string(),
                    ip: a.ip(),
                },
            ));
        }
    }
    Ok(addrs)
}

/// The [`Refused`] somewhere in an error's cause chain (the HTTP connector boxes it).
pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let found = err.downcast_ref::<Refused>().or_else(|| {
            err.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Refused>())
        });
        if let Some(r) = found {
            return Some(r.clone());
        }
        cur = err.source();
    }
    None
}

/// The HTTP connector's resolver: [`lookup`], checking when `refuse_private`. (IP literals
/// never reach a resolver; the pipeline checks those before it forwards.)
#[derive(Clone, Copy, Debug, Default)]
pub struct Resolver {
    pub refuse_private: bool,
}

impl Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let refuse = self.refuse_private;
        Box::pin(async move {
            // The connector puts the port in; 0 is what hyper-util's own resolver returns.
            Ok(lookup(name.as_str(), 0, refuse).await?.into_iter())
        })
    }
}

/// Loopback, unspecified, "this network", link-local, private (RFC 1918, unique local),
/// shared address space (100.64.0.0/10, which holds cloud metadata addresses), multicast,
/// broadcast, documentation and other reserved ranges; IPv6 forms that carry an IPv4 address
/// (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are judged by that address.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_private_v4(v4),
            None => is_private_v6(v6),
        },
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        // 0.0.0.0/8, "this network": connecting to it reaches this host on Linux.
        || a == 0
        // 100.64.0.0/10, shared address space (carrier NAT; 100.100.100.200 is a metadata address).
        || (a == 100 && (b & 0xc0) == 64)
        // 192.0.0.0/24 protocol assignments, 198.18.0.0/15 benchmarking, 240.0.0.0/4 reserved.
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b & 0xfe) == 18)
        || a >= 240
        // Documentation: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24.
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`,
/// deprecated but still routed by some stacks), NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`)
/// address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    // `::` and `::1` are IPv6's own unspecified and loopback; both are private either way.
    if s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(tail);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fe80::/10 link-local, fc00::/7 unique local, fec0::/10 deprecated site-local.
        || (first & 0xffc0) == 0xfe80
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfec0
        // 2001:db8::/32 documentation.
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
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
            "100.64.0.1",
            "100.100.100.200",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:100.100.100.200",
            "::127.0.0.1",
            "::169.254.169.254",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
        ] {
            assert!(is_private(p.parse().unwrap()), "{p}");
        }
        for p in [
            "140.82.112.6",
            "172.32.0.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "198.20.0.1",
            "2606:50c0:8000::154",
            "::ffff:140.82.112.6",
            "::140.82.112.6",
            "64:ff9b::8c52:7006",
        ] {
            assert!(!is_private(p.parse().unwrap()), "{p}");
        }
    }

    #[tokio::test]
    async fn literals_and_names_are_checked_once_and_refusals_are_typed() {
        let e = lookup("localhost", 80, true).await.unwrap_err();
        let r = refusal_in(&e).expect("a typed refusal");
        assert!(r.to_string().contains("allow_private_targets"), "{r}");
        assert!(r.to_string().contains("resolves to"), "{r}");
        let e = lookup("[::1]", 443, true).await.unwrap_err();
        assert!(refusal_in(&e).unwrap().to_string().contains("is ::1"));
        let ok = lookup("localhost", 80, false).await.unwrap();
        assert!(ok.iter().all(|a| a.port() == 80 && a.ip().is_loopback()));
        let ok = lookup("140.82.112.6", 443, true).await.unwrap();
        assert_eq!(ok, vec!["140.82.112.6:443".parse().unwrap()]);
    }
}
