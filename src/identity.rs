//! Caller identity: a keyed hash of the credentials a request carries. The cache and the
//! coalescing map are keyed by it, so one identity's answer is never served to another, and the
//! raw credential is never persisted, logged or printed (a connection keeps its last one in
//! memory, zeroed when replaced or closed: [`per_connection`]).

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
        self.caller(headers).0
    }

    /// [`IdentityKey::identify`], and whether the request carries a credential at all (as
    /// [`has_credential`] says), found in the same look at the headers.
    pub fn caller(&self, headers: &HeaderMap) -> (Identity, bool) {
        // Length-prefix each part so ("ab","c") and ("a","bc") differ. The parts are laid out
        // in one buffer and hashed once (blake3's cost per `update` on short parts is more than
        // the hashing: callgrind); the bytes are the same, so identities do not change. The
        // buffer is the thread's own, reused: no allocation per request.
        const NAMES: [http::header::HeaderName; 2] =
            [http::header::AUTHORIZATION, http::header::COOKIE];
        with_scratch(|buf| {
            for name in NAMES {
                let authorization = name == http::header::AUTHORIZATION;
                let spelled = name.as_str().as_bytes();
                for v in headers.get_all(&name) {
                    let v = v.as_bytes();
                    room_for(buf, spelled.len() + 8 + v.len());
                    buf.extend_from_slice(spelled);
                    // A canonical scheme is as long as the one it replaces.
                    buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
                    match authorization {
                        true => put_canonical_scheme(buf, v),
                        false => buf.extend_from_slice(v),
                    }
                }
            }
            // Every `Authorization` or `Cookie` value put its name in: empty means neither.
            let found = (self.remembered(buf), !buf.is_empty());
            // The credential's bytes do not stay in the thread's buffer after the request.
            zeroize::Zeroize::zeroize(buf.as_mut_slice());
            found
        })
    }

    /// The identity of a laid-out input `input`: the one this connection's last credential
    /// gave when `input` is the same bytes under the same key ([`per_connection`]), else the
    /// keyed hash. A client polling on a kept-alive connection sends one credential again and
    /// again; its keyed blake3 was ~1k of a cache hit's instructions (callgrind). The bytes are
    /// compared, never a hash of them, so one credential's identity is never another's.
    fn remembered(&self, input: &[u8]) -> Identity {
        let hash = || Identity(*blake3::keyed_hash(&self.0, input).as_bytes());
        CONNECTION
            .try_with(|c| {
                let Ok(mut last) = c.credential.try_borrow_mut() else {
                    return hash();
                };
                // Compared in constant time: one caller's secret against another's bytes (a
                // gateway's connections can come from a load balancer that pools callers).
                if last.filled && last.key == self.0 && constant_time_eq(&last.input, input) {
                    return last.identity;
                }
                let identity = hash();
                last.remember(&self.0, input, identity);
                identity
            })
            // Outside a connection (a replay, a lookup, a test): hashed every time.
            .unwrap_or_else(|_| hash())
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

/// The last credential one client connection's requests carried (its laid-out bytes, as
/// [`IdentityKey::identify`] hashes them), the key it was hashed with, and the identity it
/// gave. Lives in the connection's task ([`per_connection`]): never shared with another
/// connection, never logged (no `Debug`), and zeroed when replaced and when the connection
/// ends.
struct LastCredential {
    filled: bool,
    key: [u8; 32],
    input: Vec<u8>,
    identity: Identity,
}

impl LastCredential {
    /// Inputs longer than this (a huge cookie) are not kept: the copy would cost more than
    /// the hash it saves.
    const KEEP: usize = 1024;

    fn new() -> LastCredential {
        LastCredential {
            filled: false,
            key: [0; 32],
            input: Vec::new(),
            identity: Identity([0; 32]),
        }
    }

    fn remember(&mut self, key: &[u8; 32], input: &[u8], identity: Identity) {
        self.forget();
        if input.len() > Self::KEEP {
            return;
        }
        self.input.extend_from_slice(input);
        self.key = *key;
        self.identity = identity;
        self.filled = true;
    }

    /// Zeroes what is kept (the whole buffer, spare capacity included).
    fn forget(&mut self) {
        use zeroize::Zeroize;
        self.filled = false;
        self.input.zeroize();
        self.key.zeroize();
    }
}

impl Drop for LastCredential {
    fn drop(&mut self) {
        self.forget();
    }
}

/// What one client connection's task keeps: its last credential (here) and its spare timers
/// (`crate::server::timers`). One task-local for both, boxed: a scope is entered and left at
/// every poll of the connection, its value swapped in and out, and two scopes cost ~0.4k
/// instructions per pass-through request.
pub(crate) struct PerConnection {
    credential: std::cell::RefCell<LastCredential>,
    /// `crate::server::timers`'s spares.
    pub(crate) timers: std::cell::RefCell<Vec<std::pin::Pin<Box<tokio::time::Sleep>>>>,
}

tokio::task_local! {
    static CONNECTION: Box<PerConnection>;
}

/// Runs `f` with the task's connection state, if the task is a client connection's
/// ([`per_connection`]).
pub(crate) fn with_connection<R>(f: impl FnOnce(&PerConnection) -> R) -> Option<R> {
    CONNECTION.try_with(|c| f(c)).ok()
}

/// Runs one client connection's future (`conn`: hyper's connection, which polls the requests
/// it serves in place) with a memo of its last credential, so a client that sends the same
/// credential on every request of a kept-alive connection has it hashed once
/// ([`IdentityKey::identify`]). A request polled outside the connection's task (an HTTP/2
/// stream that had to wait, then ran as a task of its own) hashes as before.
pub(crate) fn per_connection<F: std::future::Future>(
    conn: F,
) -> impl std::future::Future<Output = F::Output> {
    let state = PerConnection {
        credential: std::cell::RefCell::new(LastCredential::new()),
        timers: std::cell::RefCell::new(Vec::new()),
    };
    CONNECTION.scope(Box::new(state), conn)
}

/// Whether two secrets are equal, in time that depends on their lengths only (the control
/// secret, the gateway's admin token, a connection's remembered credential).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
/// Makes room for `more` bytes in a buffer that holds credential bytes: when it must grow,
/// they are copied into the larger buffer and the old one is zeroed before it is freed (a
/// `Vec` that grows by itself frees the old allocation as it was).
fn room_for(buf: &mut Vec<u8>, more: usize) {
    if buf.capacity() - buf.len() >= more {
        return;
    }
    let mut grown = Vec::with_capacity((buf.len() + more).max(2 * buf.capacity()));
    grown.extend_from_slice(buf);
    zeroize::Zeroize::zeroize(buf);
    *buf = grown;
}

/// Written straight into the layout, never into a copy of its own (a copy of the credential
/// would be freed with the credential still in it).
fn put_canonical_scheme(buf: &mut Vec<u8>, v: &[u8]) {
    let Some(sp) = v.iter().position(|b| *b == b' ') else {
        buf.extend_from_slice(v);
        return;
    };
    let (scheme, rest) = v.split_at(sp);
    // Compared without lower-casing a copy first (this runs for every request).
    if scheme.eq_ignore_ascii_case(b"bearer") {
        buf.extend_from_slice(b"Bearer");
    } else if scheme.eq_ignore_ascii_case(b"token") {
        buf.extend_from_slice(b"token");
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        buf.extend_from_slice(b"Basic");
    } else {
        buf.extend(scheme.iter().map(u8::to_ascii_lowercase));
    }
    buf.extend_from_slice(rest);
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

    /// Within one connection the remembered identity is only ever that of the same bytes
    /// under the same key: credentials in turn each get the identity they get outside any
    /// connection; the memo is consulted (a planted identity comes back for the same bytes
    /// only); and another connection starts with nothing remembered.
    #[tokio::test]
    async fn a_connection_remembers_only_the_same_credential() {
        let (k, k2) = (IdentityKey::new([7; 32]), IdentityKey::new([8; 32]));
        let want = |key: &IdentityKey, auth: &str| key.identify(&hdrs(auth));
        let (a, b, a2) = (
            want(&k, "token a"),
            want(&k, "token b"),
            want(&k2, "token a"),
        );
        let none = k.identify(&HeaderMap::new());
        per_connection(async {
            for _ in 0..2 {
                for (auth, id) in [
                    ("token a", a),
                    ("token a", a),
                    ("token b", b),
                    ("Token b", b),
                ] {
                    assert_eq!(k.identify(&hdrs(auth)), id, "{auth}");
                    assert_eq!(k2.identify(&hdrs(auth)) == a2, auth.ends_with('a'));
                }
                assert_eq!(k.identify(&HeaderMap::new()), none);
                let mut cookie = hdrs("token a");
                cookie.insert(http::header::COOKIE, "s=1".parse().unwrap());
                assert_ne!(k.identify(&cookie), a);
            }
            // The memo is what answers the same bytes: a planted identity comes back for them,
            // and never for another credential.
            assert_eq!(k.identify(&hdrs("token a")), a);
            let planted = Identity([9; 32]);
            CONNECTION.with(|c| c.credential.borrow_mut().identity = planted);
            assert_eq!(k.identify(&hdrs("token a")), planted);
            assert_eq!(k.identify(&hdrs("token b")), b);
            assert_eq!(k.identify(&hdrs("token a")), a);
        })
        .await;
        per_connection(async {
            CONNECTION.with(|c| {
                assert!(
                    !c.credential.borrow().filled,
                    "a new connection remembers nothing"
                )
            });
            assert_eq!(k.identify(&hdrs("token b")), b);
        })
        .await;
    }

    /// Whether a request is credentialed is read in the identity's own look at the headers:
    /// the same answer as `has_credential`.
    #[test]
    fn credentialed_as_has_credential_says() {
        let k = IdentityKey::new([7; 32]);
        let mut cookie = HeaderMap::new();
        cookie.insert(http::header::COOKIE, "s=1".parse().unwrap());
        let mut empty_auth = HeaderMap::new();
        empty_auth.insert(http::header::AUTHORIZATION, "".parse().unwrap());
        let mut other = HeaderMap::new();
        other.insert(http::header::ACCEPT, "*/*".parse().unwrap());
        for h in [hdrs("token a"), cookie, empty_auth, other, HeaderMap::new()] {
            assert_eq!(k.caller(&h).1, has_credential(&h), "{h:?}");
            assert_eq!(k.caller(&h).0, k.identify(&h));
        }
    }

    /// A buffer grown for a longer credential keeps what it held, and has the room asked for.
    #[test]
    fn room_for_keeps_the_bytes_it_moves() {
        let mut buf = b"authorization".to_vec();
        buf.shrink_to_fit();
        room_for(&mut buf, 5000);
        assert_eq!(buf, b"authorization");
        assert!(buf.capacity() - buf.len() >= 5000);
        let cap = buf.capacity();
        room_for(&mut buf, 10);
        assert_eq!(buf.capacity(), cap, "no growth when the room is there");
    }

    #[test]
    fn key_matters_and_debug_hides_token() {
        let a = IdentityKey::new([1; 32]).identify(&hdrs("token secret"));
        let b = IdentityKey::new([2; 32]).identify(&hdrs("token secret"));
        assert_ne!(a, b);
        assert!(!format!("{a:?}").contains("secret"));
    }
}
