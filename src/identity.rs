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

/// A request's credential headers, as its identity reads them: its `Authorization` values
/// and its `Cookie` values. Found by lookup ([`Credentials::of`]), or by the request's one
/// pass over its headers (`pipeline::headers::Glance`), which fills in the first value of
/// each name and whether there are more.
pub struct Credentials<'a> {
    map: &'a HeaderMap,
    pub authorization: Values<'a>,
    pub cookie: Values<'a>,
}

/// The values of one credential header: none, one, or more (then read from the map, in order).
#[derive(Clone, Copy)]
pub enum Values<'a> {
    None,
    One(&'a http::HeaderValue),
    Many,
}

impl<'a> Values<'a> {
    fn of(all: http::header::GetAll<'a, http::HeaderValue>) -> Values<'a> {
        let mut it = all.iter();
        match (it.next(), it.next()) {
            (None, _) => Values::None,
            (Some(v), None) => Values::One(v),
            (Some(_), Some(_)) => Values::Many,
        }
    }
}

impl<'a> Credentials<'a> {
    /// None found yet in `map` (for a caller that fills them in itself).
    pub fn none(map: &'a HeaderMap) -> Credentials<'a> {
        Credentials {
            map,
            authorization: Values::None,
            cookie: Values::None,
        }
    }

    /// The credential headers of `map`, by lookup.
    pub fn of(map: &'a HeaderMap) -> Credentials<'a> {
        Credentials {
            map,
            authorization: Values::of(map.get_all(http::header::AUTHORIZATION)),
            cookie: Values::of(map.get_all(http::header::COOKIE)),
        }
    }

    /// Whether there is any (as [`has_credential`] says).
    fn present(&self) -> bool {
        !matches!(
            (self.authorization, self.cookie),
            (Values::None, Values::None)
        )
    }

    /// The `Authorization` and `Cookie` values, when there is at most one of each (the usual
    /// request).
    fn single(&self) -> Option<Single<'a>> {
        let one = |v: Values<'a>| match v {
            Values::None => Some(None),
            Values::One(v) => Some(Some(v.as_bytes())),
            Values::Many => None,
        };
        Some((one(self.authorization)?, one(self.cookie)?))
    }

    /// Writes the identity's input to `out`: each `Authorization` value, then each `Cookie`
    /// value, as its name, its length (little-endian `u64`) and its bytes, an
    /// `Authorization`'s scheme in one spelling ([`put_canonical_scheme`]: as long as the one
    /// it replaces).
    fn lay_out(&self, out: &mut impl Sink) {
        use http::header::{AUTHORIZATION, COOKIE};
        for (name, values) in [(AUTHORIZATION, self.authorization), (COOKIE, self.cookie)] {
            let authorization = name == AUTHORIZATION;
            let spelled = name.as_str().as_bytes();
            let mut put = |v: &http::HeaderValue| {
                let v = v.as_bytes();
                out.room(spelled.len() + 8 + v.len());
                out.put(spelled);
                out.put(&(v.len() as u64).to_le_bytes());
                match authorization {
                    true => put_canonical_scheme(out, v),
                    false => out.put(v),
                }
            };
            match values {
                Values::None => {}
                Values::One(v) => put(v),
                Values::Many => self.map.get_all(&name).iter().for_each(put),
            }
        }
    }

    /// Whether [`Credentials::lay_out`] would write exactly `input`, compared in time that
    /// depends on the lengths only (one caller's secret against another's bytes: a gateway's
    /// connections can come from a load balancer that pools callers).
    fn laid_out_as(&self, input: &[u8]) -> bool {
        let mut same = Same {
            want: input,
            at: 0,
            differ: 0,
            fits: true,
        };
        self.lay_out(&mut same);
        same.fits && same.at == input.len() && same.differ == 0
    }
}

/// A request's one `Authorization` value and one `Cookie` value, each if any.
type Single<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Where a credential's layout goes: the buffer it is hashed from, or a comparison with the
/// layout remembered.
trait Sink {
    /// Room for `more` bytes, before they are put.
    fn room(&mut self, more: usize);
    fn put(&mut self, bytes: &[u8]);
    /// `bytes`, lower-cased.
    fn put_lower(&mut self, bytes: &[u8]);
}

/// The layout written out, in a buffer that holds credential bytes ([`room_for`]).
struct Buffer<'b>(&'b mut Vec<u8>);

impl Sink for Buffer<'_> {
    fn room(&mut self, more: usize) {
        room_for(self.0, more);
    }
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn put_lower(&mut self, bytes: &[u8]) {
        self.0.extend(bytes.iter().map(u8::to_ascii_lowercase));
    }
}

/// The layout compared with `want` as it is made: `differ` gathers the differing bits, `fits`
/// says the layout has not run past `want`'s end.
struct Same<'w> {
    want: &'w [u8],
    at: usize,
    differ: u64,
    fits: bool,
}

impl Sink for Same<'_> {
    fn room(&mut self, _: usize) {}
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at.saturating_add(bytes.len());
        match self.want.get(self.at..end) {
            Some(want) => self.differ |= differing_bits(want, bytes),
            None => self.fits = false,
        }
        self.at = end;
    }
    fn put_lower(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.put(&[b.to_ascii_lowercase()]);
        }
    }
}

/// The bits in which `a` and `b` differ, ORed together (`a` and `b` of one length: the bytes
/// past the shorter are not compared), in time that depends on the length only: eight bytes
/// at a time, the last eight (overlapping the words before) for a length that is no multiple
/// of eight.
fn differing_bits(a: &[u8], b: &[u8]) -> u64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
    if n < 8 {
        return a
            .iter()
            .zip(b)
            .fold(0u64, |acc, (x, y)| acc | u64::from(x ^ y));
    }
    let last = word(&a[n - 8..]) ^ word(&b[n - 8..]);
    a.chunks_exact(8)
        .zip(b.chunks_exact(8))
        .fold(last, |acc, (x, y)| acc | (word(x) ^ word(y)))
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
        self.caller_of(&Credentials::of(headers))
    }

    /// [`IdentityKey::caller`] of credentials already found ([`Credentials`]).
    ///
    /// Each `Authorization` value, then each `Cookie` value, is laid out as its header's name,
    /// its length (so ("ab","c") and ("a","bc") differ) and its bytes (an `Authorization`'s
    /// scheme in one spelling), and the layout is hashed with the install's key.
    ///
    /// A client polling on a kept-alive connection sends one credential again and again; its
    /// keyed blake3 was ~1k of a cache hit's instructions (callgrind). So the identity of the
    /// connection's last credential is remembered ([`per_connection`]), and the headers are
    /// compared with that credential's layout where they are, in constant time, without being
    /// laid out: only another credential is laid out (in the thread's reused buffer, zeroed
    /// after) and hashed. The bytes are compared, never a hash of them, so one credential's
    /// identity is never another's.
    pub fn caller_of(&self, c: &Credentials<'_>) -> (Identity, bool) {
        let identity = CONNECTION
            .try_with(|conn| {
                let Ok(mut last) = conn.credential.try_borrow_mut() else {
                    return self.hashed(c, None);
                };
                if last.filled && last.key == self.0 && last.holds(c) {
                    return last.identity;
                }
                self.hashed(c, Some(&mut last))
            })
            // Outside a connection (a replay, a lookup, a test): hashed every time.
            .unwrap_or_else(|_| self.hashed(c, None));
        (identity, c.present())
    }

    /// The keyed hash of `c`'s layout, remembered in `last` when given. The layout is written
    /// in one buffer and hashed once (blake3's cost per `update` on short parts is more than
    /// the hashing); the buffer is the thread's own, reused: no allocation per request.
    fn hashed(&self, c: &Credentials<'_>, last: Option<&mut LastCredential>) -> Identity {
        with_scratch(|buf| {
            c.lay_out(&mut Buffer(buf));
            let identity = Identity(*blake3::keyed_hash(&self.0, buf).as_bytes());
            if let Some(last) = last {
                last.remember(&self.0, c, buf, identity);
            }
            // The credential's bytes do not stay in the thread's buffer after the request.
            zeroize::Zeroize::zeroize(buf.as_mut_slice());
            identity
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

/// The last credential one client connection's requests carried, the key it was hashed with,
/// and the identity it gave. Lives in the connection's task ([`per_connection`]): never shared
/// with another connection, never logged (no `Debug`), and zeroed when replaced and when the
/// connection ends.
///
/// The credential is kept as it was sent when it was at most one `Authorization` and one
/// `Cookie` (`kept`: their lengths; `input`: their bytes, one after the other), so the next
/// request's values are compared with it whole, in one pass; else as laid out for the hash
/// ([`Credentials::laid_out_as`]).
struct LastCredential {
    filled: bool,
    key: [u8; 32],
    kept: Kept,
    input: Vec<u8>,
    identity: Identity,
}

/// How [`LastCredential`] keeps its credential.
#[derive(Clone, Copy, PartialEq)]
enum Kept {
    /// As sent: the `Authorization` value's length, the `Cookie` value's, if any.
    AsSent(Option<usize>, Option<usize>),
    /// As laid out for the hash (more than one value of a name).
    LaidOut,
}

impl LastCredential {
    /// Inputs longer than this (a huge cookie) are not kept: the copy would cost more than
    /// the hash it saves.
    const KEEP: usize = 1024;

    fn new() -> LastCredential {
        LastCredential {
            filled: false,
            key: [0; 32],
            kept: Kept::LaidOut,
            input: Vec::new(),
            identity: Identity([0; 32]),
        }
    }

    /// Keeps `c` (laid out as `layout`), which gave `identity` under `key`.
    fn remember(&mut self, key: &[u8; 32], c: &Credentials<'_>, layout: &[u8], identity: Identity) {
        self.forget();
        if layout.len() > Self::KEEP {
            return;
        }
        match c.single() {
            Some((authorization, cookie)) => {
                self.kept = Kept::AsSent(authorization.map(<[u8]>::len), cookie.map(<[u8]>::len));
                // Room for both first: grown between them, the buffer would free the first
                // value's bytes unzeroed.
                let both = authorization.map_or(0, <[u8]>::len) + cookie.map_or(0, <[u8]>::len);
                self.input.reserve(both);
                for v in [authorization, cookie].into_iter().flatten() {
                    self.input.extend_from_slice(v);
                }
            }
            None => {
                self.kept = Kept::LaidOut;
                self.input.extend_from_slice(layout);
            }
        }
        self.key = *key;
        self.identity = identity;
        self.filled = true;
    }

    /// Whether `c` is the credential kept, compared in time that depends on the lengths only
    /// (one caller's secret against another's bytes: a gateway's connections can come from a
    /// load balancer that pools callers).
    fn holds(&self, c: &Credentials<'_>) -> bool {
        match (self.kept, c.single()) {
            (Kept::AsSent(a_len, c_len), Some((authorization, cookie))) => {
                if a_len != authorization.map(<[u8]>::len) || c_len != cookie.map(<[u8]>::len) {
                    return false;
                }
                let (a, k) = (authorization.unwrap_or(b""), cookie.unwrap_or(b""));
                let Some((kept_a, kept_k)) = self.input.split_at_checked(a.len()) else {
                    return false;
                };
                kept_k.len() == k.len()
                    && (differing_bits(kept_a, a) | differing_bits(kept_k, k)) == 0
            }
            (Kept::LaidOut, None) => c.laid_out_as(&self.input),
            _ => false,
        }
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
    a.len() == b.len() && differing_bits(a, b) == 0
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

/// An `Authorization` value with its scheme in one spelling: the scheme is case-insensitive
/// (RFC 9110 §11.1), the credential after it is not. The Copilot CLI sends `bearer` on one call
/// and `Bearer` on the others: one token, so one identity (one account lookup, one cache
/// entry). The usual spellings (`Bearer`, `token`, `Basic`) are kept as they are, so the
/// identities of existing cache entries and queued items do not change; any other scheme is
/// lower-cased. A value without a scheme (a bare token) is used as it is.
///
/// Written straight into the layout, never into a copy of its own (a copy of the credential
/// would be freed with the credential still in it).
fn put_canonical_scheme(out: &mut impl Sink, v: &[u8]) {
    let Some(sp) = v.iter().position(|b| *b == b' ') else {
        out.put(v);
        return;
    };
    let (scheme, rest) = v.split_at(sp);
    // Compared without lower-casing a copy first (this runs for every request).
    if scheme.eq_ignore_ascii_case(b"bearer") {
        out.put(b"Bearer");
    } else if scheme.eq_ignore_ascii_case(b"token") {
        out.put(b"token");
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        out.put(b"Basic");
    } else {
        out.put_lower(scheme);
    }
    out.put(rest);
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

    /// Header maps with every shape of credential: none, one `Authorization` (schemes in
    /// several spellings, lengths around a word), a `Cookie`, both, and more than one of each.
    fn credential_shapes() -> Vec<HeaderMap> {
        let mut shapes = vec![HeaderMap::new()];
        for auth in [
            "token a",
            "token b",
            "Token a",
            "Bearer gho_1234567",
            "bearer gho_1234567",
            "Bearer gho_1234568",
            "Bearer gho_12345678",
            "",
            "x",
        ] {
            shapes.push(hdrs(auth));
        }
        let mut h = HeaderMap::new();
        h.insert(http::header::COOKIE, "s=1".parse().unwrap());
        shapes.push(h.clone());
        h.insert(http::header::AUTHORIZATION, "token a".parse().unwrap());
        shapes.push(h.clone());
        h.append(http::header::COOKIE, "t=2".parse().unwrap());
        shapes.push(h.clone());
        let mut two = hdrs("token a");
        two.append(http::header::AUTHORIZATION, "token b".parse().unwrap());
        shapes.push(two.clone());
        two.append(http::header::AUTHORIZATION, "c".parse().unwrap());
        shapes.push(two);
        // The same bytes split differently between the two names.
        let mut split = HeaderMap::new();
        split.insert(http::header::AUTHORIZATION, "token ab".parse().unwrap());
        split.insert(http::header::COOKIE, "c".parse().unwrap());
        shapes.push(split);
        let mut split = HeaderMap::new();
        split.insert(http::header::AUTHORIZATION, "token a".parse().unwrap());
        split.insert(http::header::COOKIE, "bc".parse().unwrap());
        shapes.push(split);
        shapes
    }

    /// On one connection, whatever credential came before, each request gets the identity
    /// its credential gets outside any connection (hashed afresh): the memo never answers for
    /// another credential, whether it kept the last one as sent or as laid out.
    #[tokio::test]
    async fn the_memo_answers_only_for_the_same_credential() {
        let k = IdentityKey::new([7; 32]);
        let shapes = credential_shapes();
        let want: Vec<_> = shapes.iter().map(|h| k.caller(h)).collect();
        per_connection(async {
            for (i, a) in shapes.iter().enumerate() {
                for (j, b) in shapes.iter().enumerate() {
                    assert_eq!(k.caller(a), want[i], "{a:?}");
                    assert_eq!(k.caller(b), want[j], "{b:?} after {a:?}");
                    assert_eq!(k.caller(b), want[j], "{b:?} again");
                }
            }
        })
        .await;
        // Distinct credentials, distinct identities (the spellings of one scheme aside).
        for (i, a) in shapes.iter().enumerate() {
            for (j, b) in shapes.iter().enumerate() {
                assert_eq!(
                    want[i].0 == want[j].0,
                    layout(a) == layout(b),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    fn layout(h: &HeaderMap) -> Vec<u8> {
        let mut buf = Vec::new();
        Credentials::of(h).lay_out(&mut Buffer(&mut buf));
        buf
    }

    /// The word-wise comparison finds a difference in any bit of any byte, at every length.
    #[test]
    fn differing_bits_finds_every_difference() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(differing_bits(&a, &a), 0, "{n}");
            assert!(constant_time_eq(&a, &a));
            for at in 0..n {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[at] ^= 1 << bit;
                    assert_ne!(differing_bits(&a, &b), 0, "{n} {at} {bit}");
                    assert!(!constant_time_eq(&a, &b));
                }
            }
        }
        assert!(!constant_time_eq(b"ab", b"abc"));
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
