//! Caller identity: a keyed hash of the credentials a request carries. The cache and the
//! coalescing map are keyed by it, so one identity's answer is never served to another, and the
//! raw credential is never stored, logged or printed.

use http::HeaderMap;
use std::fmt;

/// A keyed BLAKE3 hash of `Authorization` and `Cookie`. Displayed as a short prefix only.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity([u8; 32]);

impl Identity {
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
    /// A short, non-reversible label for logs and statistics.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    /// Parses [`Identity::hex`] back (a queued item keeps its identity as hex).
    pub fn from_hex(s: &str) -> Option<Identity> {
        let mut b = [0u8; 32];
        hex::decode_to_slice(s, &mut b).ok()?;
        Some(Identity(b))
    }
}

/// Whether a request carries a credential (`Authorization` or `Cookie`) at all.
pub fn has_credential(headers: &HeaderMap) -> bool {
    headers.contains_key(http::header::AUTHORIZATION) || headers.contains_key(http::header::COOKIE)
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", self.short())
    }
}

/// Derives identities with a per-install secret key, so the hashes are useless outside this
/// install (no offline guessing of tokens from a leaked hash).
#[derive(Clone)]
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    pub fn new(key: [u8; 32]) -> IdentityKey {
        IdentityKey(key)
    }
    pub fn random() -> IdentityKey {
        IdentityKey(rand::random())
    }

    pub fn identify(&self, headers: &HeaderMap) -> Identity {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        // Length-prefix each part so ("ab","c") and ("a","bc") differ.
        for name in [http::header::AUTHORIZATION, http::header::COOKIE] {
            for v in headers.get_all(&name) {
                h.update(name.as_str().as_bytes());
                h.update(&(v.len() as u64).to_le_bytes());
                h.update(v.as_bytes());
            }
        }
        Identity(*h.finalize().as_bytes())
    }

    /// The identity that the credentials of one GitHub account with the same access share
    /// (see `crate::accounts`): keyed like a credential's, in its own domain, so it can equal
    /// no credential's hash.
    pub fn shared(&self, account_id: u64, grants_repo: bool) -> Identity {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"weir account share v1\0");
        h.update(&account_id.to_le_bytes());
        h.update(&[u8::from(grants_repo)]);
        Identity(*h.finalize().as_bytes())
    }

    /// [`IdentityKey::shared`] narrowed to one OAuth app (`share = "app"`), in a domain of its
    /// own so it equals no account-wide sharing identity.
    pub fn shared_app(&self, account_id: u64, grants_repo: bool, client_id: &str) -> Identity {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"weir app share v1\0");
        h.update(&account_id.to_le_bytes());
        h.update(&[u8::from(grants_repo)]);
        h.update(client_id.as_bytes());
        Identity(*h.finalize().as_bytes())
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdentityKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdrs(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, auth.parse().unwrap());
        h
    }

    #[test]
    fn different_tokens_different_identities() {
        let k = IdentityKey::new([7; 32]);
        assert_ne!(k.identify(&hdrs("token a")), k.identify(&hdrs("token b")));
        let a = k.identify(&hdrs("token a"));
        assert_eq!(Identity::from_hex(&a.hex()), Some(a));
        assert_eq!(Identity::from_hex("zz"), None);
        assert_eq!(k.identify(&hdrs("token a")), k.identify(&hdrs("token a")));
    }

    #[test]
    fn key_matters_and_debug_hides_token() {
        let a = IdentityKey::new([1; 32]).identify(&hdrs("token secret"));
        let b = IdentityKey::new([2; 32]).identify(&hdrs("token secret"));
        assert_ne!(a, b);
        assert!(!format!("{a:?}").contains("secret"));
    }
}
