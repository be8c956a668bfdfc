//! Header handling shared by every proxied exchange: hop-by-hop removal (RFC 9110 §7.6.1),
//! request ids, and the header-size cap.

use http::{header, HeaderMap, HeaderName, HeaderValue};

pub(crate) use crate::server::REQUEST_ID;
pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// Headers that describe one connection, never the message; a proxy must not forward them.
/// Typed names, so removing them never parses a string. A `static`, not a `const`: each use of
/// a `const` array made and dropped a fresh copy of the nine names.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including every header the `Connection` header names.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    // Most messages carry none: one look at the few names present is cheaper than nine
    // hashed removals of absent ones (those were ~2 % of a pass-through request), and one
    // match on each name's text cheaper than comparing it with nine names in turn (0.8k
    // instructions per pass-through request, its two messages).
    if !h.keys().any(is_hop_by_hop) {
        return;
    }
    if h.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = h
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
            .collect();
        for n in named {
            h.remove(n);
        }
    }
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`] (names are lower case).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The client's `X-Request-Id` if it sent a sane one, else a new random id.
pub fn request_id(h: &HeaderMap) -> HeaderValue {
    if let Some(v) = h.get(&REQUEST_ID) {
        if !v.is_empty() && v.len() <= 128 && v.to_str().is_ok() {
            return v.clone();
        }
    }
    // 32 hex digits written in place, two per byte: this runs for every request.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // One u128 (four words of the thread's generator), not sixteen u8s (a word each).
    let id = rand::random::<u128>().to_be_bytes();
    let mut buf = [0u8; 32];
    for (pair, b) in buf.chunks_exact_mut(2).zip(id) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xf)];
    }
    // Owned in place: the id is cloned (the request's copy and the answer's), and a value
    // copied from a slice allocated a second time on its first clone.
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(buf))
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// Bytes of the header section as received (names, values and separators).
pub fn header_bytes(h: &HeaderMap) -> usize {
    h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert("connection", "close, x-secret-hop".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert("proxy-authorization", "Basic x".parse().unwrap());
        h.insert("accept", "*/*".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }

    /// Each hop-by-hop header alone is found (the quick look must not miss one), and a message
    /// with none keeps every header.
    #[test]
    fn each_hop_by_hop_header_alone_is_stripped() {
        for name in &HOP_BY_HOP {
            let mut h = HeaderMap::new();
            h.insert(name.clone(), "x".parse().unwrap());
            h.insert("accept", "*/*".parse().unwrap());
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name}");
        }
        let mut h = HeaderMap::new();
        h.insert("accept", "*/*".parse().unwrap());
        h.append("x-a", "1".parse().unwrap());
        h.append("x-a", "2".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 3);
    }

    /// The quick look names the same nine headers as the list the removals use, and no other.
    #[test]
    fn the_quick_look_knows_the_same_names() {
        for name in &HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
        }
        for other in [
            "accept",
            "authorization",
            "host",
            "x-request-id",
            "tee",
            "upgrade-insecure-requests",
            "keep-alive-x",
        ] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(other)), "{other}");
        }
    }

    #[test]
    fn keeps_client_request_id() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", "abc".parse().unwrap());
        assert_eq!(request_id(&h), "abc");
        let id = request_id(&HeaderMap::new());
        assert_eq!(id.len(), 32);
        assert!(id.as_bytes().iter().all(u8::is_ascii_hexdigit), "{id:?}");
        assert_ne!(request_id(&HeaderMap::new()), id);
    }
}
