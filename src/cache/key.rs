//! Cache and coalescing keys: method, normalised URL, identity and the request headers that
//! change the response. Two requests share a key only if they would get the same answer.

use crate::identity::Identity;
use http::{HeaderMap, HeaderName, Method};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// A key from an already-computed 32-byte hash (e.g. a create's dedupe key).
    pub fn from_bytes(b: [u8; 32]) -> CacheKey {
        CacheKey(b)
    }

    /// The key's 32 bytes (the disk cache's row id and its records' associated data).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A key derived from this one for another purpose (`label`), equal to no request's key.
    pub fn derive(&self, label: &[u8]) -> CacheKey {
        let mut h = blake3::Hasher::new();
        h.update(b"weir derived key\0");
        h.update(label);
        h.update(&self.0);
        CacheKey(*h.finalize().as_bytes())
    }

    pub fn new(
        upstream: usize,
        method: &Method,
        path_and_query: &str,
        identity: &Identity,
        headers: &HeaderMap,
        key_headers: &[HeaderName],
    ) -> CacheKey {
        let mut h = blake3::Hasher::new();
        let mut part = |b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        part(&(upstream as u64).to_le_bytes());
        part(method.as_str().as_bytes());
        part(normalise(path_and_query).as_bytes());
        part(identity.as_bytes());
        for name in key_headers {
            part(name.as_str().as_bytes());
            for v in headers.get_all(name) {
                part(v.as_bytes());
            }
        }
        CacheKey(*h.finalize().as_bytes())
    }
}

/// Sorts query parameters so `?a=1&b=2` and `?b=2&a=1` share a key; drops empty `&` pieces.
pub fn normalise(path_and_query: &str) -> String {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, q),
        None => (path_and_query, ""),
    };
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    params.sort_unstable();
    if params.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", params.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::IdentityKey;

    #[test]
    fn query_order_does_not_matter_but_identity_does() {
        let k = IdentityKey::new([0; 32]);
        let mut a = HeaderMap::new();
        a.insert("authorization", "token a".parse().unwrap());
        let mut b = HeaderMap::new();
        b.insert("authorization", "token b".parse().unwrap());
        let (ia, ib) = (k.identify(&a), k.identify(&b));
        let hk = [HeaderName::from_static("accept")];
        let key =
            |p: &str, i: &Identity, h: &HeaderMap| CacheKey::new(0, &Method::GET, p, i, h, &hk);
        assert_eq!(
            key("/s?page_size=2&sort=x", &ia, &a),
            key("/s?sort=x&page_size=2", &ia, &a)
        );
        assert_ne!(key("/s", &ia, &a), key("/s", &ib, &b));
        let mut a2 = a.clone();
        a2.insert("accept", "text/html".parse().unwrap());
        assert_ne!(key("/s", &ia, &a), key("/s", &ia, &a2));
    }
}
