//! The PROXY protocol (HAProxy's spec, v1 text and v2 binary) on the gateway's clients'
//! listener, for a load balancer that does not keep the client's source address: the balancer
//! writes the client's address in a header before the TLS handshake, and the allow-list is then
//! checked against that address instead of the balancer's.
//!
//! A header is believed only from `gateway.trusted_proxies` (the balancers' own addresses):
//! from anyone else it would let a client claim any address, so it is refused. A trusted
//! balancer must send one (it always does once configured; one that does not is misconfigured,
//! and its address must not pass for a client's). Without `gateway.proxy_protocol` a header is
//! a bad request. Parsing is the `ppp` crate's; this module only reads exactly the header's
//! bytes off the socket, so the TLS handshake that follows is untouched.

use crate::config::Cidr;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The first byte of every TLS connection: a handshake record.
pub(super) const TLS_HANDSHAKE: u8 = 0x16;
/// v1's opening: `PROXY ` (then `TCP4 …\r\n`).
const V1_PREFIX: &[u8] = b"PROXY ";
/// v1 headers are at most 107 bytes, CRLF included.
const V1_MAX: usize = 107;
/// A v2 header's fixed part: the 12-byte signature, version/command, family, length.
const V2_FIXED: usize = 16;
/// v2's address block plus TLVs; balancers send a few hundred bytes at most.
const V2_MAX_REST: usize = 2048;

/// What a connection starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    Tls,
    ProxyV1,
    ProxyV2,
    /// Anything else (plain HTTP, noise).
    Other,
}

/// Why a PROXY header was refused (said in a plain-text 400 before the connection closes).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum ProxyHeaderError {
    #[error("a PROXY protocol header was sent, but this gateway does not read them (gateway.proxy_protocol is off)")]
    NotEnabled,
    #[error("a PROXY protocol header came from {0}, which is not in gateway.trusted_proxies")]
    Untrusted(std::net::IpAddr),
    #[error("the load balancer at {0} (gateway.trusted_proxies) sent no PROXY protocol header")]
    Missing(std::net::IpAddr),
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(String),
    #[error("the PROXY protocol header did not arrive in time")]
    TimedOut,
}

/// Looks at the first bytes without taking them: enough to tell a TLS handshake from a PROXY
/// header (v1 or v2) from anything else. `None`: the peer closed or sent nothing in time.
pub(super) async fn sniff(stream: &TcpStream, timeout: Duration) -> Option<Opening> {
    let v2 = ppp::v2::PROTOCOL_PREFIX;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; 12];
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        let got = &buf[..n];
        if got[0] == TLS_HANDSHAKE {
            return Some(Opening::Tls);
        }
        // Decided as soon as the bytes so far can no longer be (or fully are) a signature.
        let v1 = V1_PREFIX.len().min(n);
        let v2n = v2.len().min(n);
        let maybe_v1 = got[..v1] == V1_PREFIX[..v1];
        let maybe_v2 = got[..v2n] == v2[..v2n];
        if maybe_v1 && n >= V1_PREFIX.len() {
            return Some(Opening::ProxyV1);
        }
        if maybe_v2 && n >= v2.len() {
            return Some(Opening::ProxyV2);
        }
        if !maybe_v1 && !maybe_v2 {
            return Some(Opening::Other);
        }
        // A prefix of a signature so far: wait for the rest (peek returns what is there).
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads exactly one header (of the kind `sniff` saw) and returns the client's address:
/// the header's source, or `peer` itself for a v2 `LOCAL` header (the balancer's own health
/// check) or a v1 `UNKNOWN` one.
pub(super) async fn read_header(
    stream: &mut TcpStream,
    opening: Opening,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<SocketAddr, ProxyHeaderError> {
    let read = async {
        match opening {
            Opening::ProxyV1 => read_v1(stream, peer).await,
            Opening::ProxyV2 => read_v2(stream, peer).await,
            _ => Err(ProxyHeaderError::Malformed("not a PROXY header".into())),
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(ProxyHeaderError::TimedOut))
}

fn io(e: std::io::Error) -> ProxyHeaderError {
    ProxyHeaderError::Malformed(format!("connection failed while reading it: {e}"))
}

async fn read_v1(stream: &mut TcpStream, peer: SocketAddr) -> Result<SocketAddr, ProxyHeaderError> {
    // Byte by byte up to the CRLF: reading further would take the TLS handshake's bytes.
    let mut line = Vec::with_capacity(V1_MAX);
    while !line.ends_with(b"\r\n") {
        if line.len() >= V1_MAX {
            return Err(ProxyHeaderError::Malformed(format!(
                "a v1 header longer than {V1_MAX} bytes"
            )));
        }
        line.push(stream.read_u8().await.map_err(io)?);
    }
    let header = ppp::v1::Header::try_from(line.as_slice())
        .map_err(|e| ProxyHeaderError::Malformed(e.to_string()))?;
    Ok(match header.addresses {
        ppp::v1::Addresses::Tcp4(a) => SocketAddr::from((a.source_address, a.source_port)),
        ppp::v1::Addresses::Tcp6(a) => SocketAddr::from((a.source_address, a.source_port)),
        ppp::v1::Addresses::Unknown => peer,
    })
}

async fn read_v2(stream: &mut TcpStream, peer: SocketAddr) -> Result<SocketAddr, ProxyHeaderError> {
    let mut bytes = vec![0u8; V2_FIXED];
    stream.read_exact(&mut bytes).await.map_err(io)?;
    let rest = usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if rest > V2_MAX_REST {
        return Err(ProxyHeaderError::Malformed(format!(
            "a v2 header announcing {rest} bytes (at most {V2_MAX_REST} are read)"
        )));
    }
    bytes.resize(V2_FIXED + rest, 0);
    stream
        .read_exact(&mut bytes[V2_FIXED..])
        .await
        .map_err(io)?;
    let header = ppp::v2::Header::try_from(bytes.as_slice())
        .map_err(|e| ProxyHeaderError::Malformed(e.to_string()))?;
    if header.command == ppp::v2::Command::Local {
        return Ok(peer);
    }
    match header.addresses {
        ppp::v2::Addresses::IPv4(a) => Ok(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::IPv6(a) => Ok(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::Unspecified => Ok(peer),
        ppp::v2::Addresses::Unix(_) => Err(ProxyHeaderError::Malformed(
            "a Unix-socket source has no address the allow-list could check".into(),
        )),
    }
}

/// Whether `peer` may send a header under `trusted` (`None`: the option is off).
pub(super) fn check_sender(
    trusted: Option<&[Cidr]>,
    peer: SocketAddr,
) -> Result<(), ProxyHeaderError> {
    match trusted {
        None => Err(ProxyHeaderError::NotEnabled),
        Some(list) if list.iter().any(|n| n.contains(peer.ip())) => Ok(()),
        Some(_) => Err(ProxyHeaderError::Untrusted(peer.ip().to_canonical())),
    }
}

/// Whether `peer` is a trusted balancer (which then must send a header).
pub(super) fn is_trusted(trusted: Option<&[Cidr]>, peer: SocketAddr) -> bool {
    trusted.is_some_and(|list| list.iter().any(|n| n.contains(peer.ip())))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(bytes: &'static [u8]) -> (TcpStream, SocketAddr) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut c, bytes)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let (s, peer) = l.accept().await.unwrap();
        (s, peer)
    }

    #[tokio::test]
    async fn reads_exactly_the_header_and_leaves_what_follows() {
        let t = Duration::from_secs(2);
        let (mut s, peer) = pair(b"PROXY TCP4 10.1.2.3 10.0.0.1 5555 8443\r\n\x16rest").await;
        assert_eq!(sniff(&s, t).await, Some(Opening::ProxyV1));
        let client = read_header(&mut s, Opening::ProxyV1, peer, t)
            .await
            .unwrap();
        assert_eq!(client, "10.1.2.3:5555".parse().unwrap());
        assert_eq!(sniff(&s, t).await, Some(Opening::Tls));

        let (s, _) = pair(b"POST / HTTP/1.1\r\n").await;
        assert_eq!(sniff(&s, t).await, Some(Opening::Other));

        let (mut s, peer) = pair(b"PROXY TCP4 10.1.2.3\r\n").await;
        let e = read_header(&mut s, Opening::ProxyV1, peer, t)
            .await
            .unwrap_err();
        assert!(matches!(e, ProxyHeaderError::Malformed(_)), "{e}");
    }

    #[tokio::test]
    async fn v2_proxy_names_the_client_and_v2_local_is_the_balancer_itself() {
        let t = Duration::from_secs(2);
        let src: SocketAddr = "[2001:db8::7]:40000".parse().unwrap();
        let dst: SocketAddr = "[2001:db8::1]:8443".parse().unwrap();
        let proxy = ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            (src, dst),
        )
        .build()
        .unwrap();
        let proxy: &'static [u8] = Box::leak(proxy.into_boxed_slice());
        let (mut s, peer) = pair(proxy).await;
        assert_eq!(sniff(&s, t).await, Some(Opening::ProxyV2));
        assert_eq!(
            read_header(&mut s, Opening::ProxyV2, peer, t).await,
            Ok(src)
        );

        let local = ppp::v2::Builder::new(
            ppp::v2::Version::Two | ppp::v2::Command::Local,
            ppp::v2::AddressFamily::Unspecified | ppp::v2::Protocol::Unspecified,
        )
        .build()
        .unwrap();
        let local: &'static [u8] = Box::leak(local.into_boxed_slice());
        let (mut s, peer) = pair(local).await;
        assert_eq!(sniff(&s, t).await, Some(Opening::ProxyV2));
        assert_eq!(
            read_header(&mut s, Opening::ProxyV2, peer, t).await,
            Ok(peer)
        );
    }

    #[test]
    fn only_trusted_senders() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let lb: SocketAddr = "10.0.0.5:40000".parse().unwrap();
        let other: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        assert_eq!(check_sender(Some(&trusted), lb), Ok(()));
        assert_eq!(
            check_sender(Some(&trusted), other),
            Err(ProxyHeaderError::Untrusted(other.ip()))
        );
        assert_eq!(check_sender(None, lb), Err(ProxyHeaderError::NotEnabled));
        assert!(is_trusted(Some(&trusted), lb) && !is_trusted(None, lb));
    }
}
