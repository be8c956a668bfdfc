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
        // Length-prefix each part so ("ab","c") and ("a","bc") differ. The parts are laid out
        // in one buffer and hashed once (blake3's cost per `update` on short parts is more than
        // the hashing: callgrind); the bytes are the same, so identities do not change. The
        // buffer is the thread's own, reused: no allocation per request.
        with_scratch(|buf| {
            for name in [http::header::AUTHORIZATION, http::header::COOKIE] {
                for v in headers.get_all(&name) {
                    let v = match name == http::header::AUTHORIZATION {
                        true => canonical_scheme(v.as_bytes()),
                        false => std::borrow::Cow::Borrowed(v.as_bytes()),
                    };
                    buf.extend_from_slice(name.as_str().as_bytes());
                    buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
                    buf.extend_from_slice(&v);
                }
            }
            Identity(*blake3::keyed_hash(&self.0, &buf[..]).as_bytes())
        })
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

/// Runs `f` with an empty byte buffer: the thread's own, reused from call to call, so laying
/// out a hash's input allocates nothing per request (the identity here, the cache key in
/// `crate::cache`). A buffer grown past 4 KiB (a huge cookie) is not kept. Should `f` ever
/// run inside another `with_scratch` on the same thread, it gets a fresh buffer.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    use std::cell::RefCell;
    const KEEP: usize = 4096;
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let r = f(&mut buf);
            if buf.capacity() > KEEP {
                *buf = Vec::new();
            }
            r
        }
        Err(_) => f(&mut Vec::with_capacity(256)),
    })
}

/// An `Authorization` value with its scheme in one spelling: the scheme is case-insensitive
/// (RFC 9110 §11.1), the credential after it is not. The Copilot CLI sends `bearer` on one call
/// and `Bearer` on the others: one token, so one identity (one account lookup, one cache
/// entry). The usual spellings (`Bearer`, `token`, `Basic`) are kept as they are, so the
/// identities of existing cache entries and queued items do not change; any other scheme is
/// lower-cased. A value without a scheme (a bare token) is used as it is.
fn canonical_scheme(v: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    let Some(sp) = v.iter().position(|b| *b == b' ') else {
        return Cow::Borrowed(v);
    };
    let (scheme, rest) = v.split_at(sp);
    // Compared without lower-casing a copy first (this runs for every request).
    let canonical: Cow<'_, [u8]> = if scheme.eq_ignore_ascii_case(b"bearer") {
        Cow::Borrowed(b"Bearer")
    } else if scheme.eq_ignore_ascii_case(b"token") {
        Cow::Borrowed(b"token")
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        Cow::Borrowed(b"Basic")
    } else {
        Cow::Owned(scheme.to_ascii_lowercase())
    };
    if canonical.as_ref() == scheme {
        return Cow::Borrowed(v);
    }
    let mut out = canonical.into_owned();
    out.extend_from_slice(rest);
    Cow::Owned(out)
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

    /// The scheme is case-insensitive (RFC 9110), the credential is not; the usual spelling
    /// hashes exactly as before (so stored identities stay valid).
    #[test]
    fn the_scheme_is_case_insensitive() {
        let k = IdentityKey::new([7; 32]);
        let bearer = k.identify(&hdrs("Bearer gho_abc"));
        assert_eq!(k.identify(&hdrs("bearer gho_abc")), bearer);
        assert_eq!(k.identify(&hdrs("BEARER gho_abc")), bearer);
        assert_ne!(k.identify(&hdrs("Bearer GHO_ABC")), bearer);
        assert_ne!(k.identify(&hdrs("token gho_abc")), bearer);
        assert_eq!(k.identify(&hdrs("Token a")), k.identify(&hdrs("token a")));
        assert_eq!(k.identify(&hdrs("OTHER x")), k.identify(&hdrs("other x")));
        assert_ne!(k.identify(&hdrs("gho_abc")), k.identify(&hdrs("GHO_ABC")));
        let mut before = blake3::Hasher::new_keyed(&[7; 32]);
        let v = b"Bearer gho_abc";
        before.update(b"authorization");
        before.update(&(v.len() as u64).to_le_bytes());
        before.update(v);
        assert_eq!(bearer.as_bytes(), before.finalize().as_bytes());
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
