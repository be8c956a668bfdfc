//! Cache and coalescing keys: method, normalised URL, identity and the request headers that
//! change the response. Two requests share a key only if they would get the same answer.

use crate::config::UpstreamSettings;
use crate::identity::Identity;
use http::{HeaderMap, HeaderName, Method};

/// The first part hashed into every request's key: the layout's version. v2 names the upstream.
/// v1 (unmarked) began with the upstream's position as a little-endian u64 in the same
/// length-prefixed part; these eight bytes read that way are a number far past any position
/// (positions are `u32`), so no v1 input equals a v2 input.
pub const KEY_VERSION: &[u8] = b"weir.k/2";

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

    /// The key of a request to `upstream`. The upstream is hashed by its `name` (a configured
    /// `[[upstream]]`'s, or `learned:HOST` for a learned Copilot host), never by its position:
    /// positions change when `[[upstream]]` tables are reordered or a learned host takes another
    /// slot, and the disk cache keeps keys across restarts (issue #21: a reorder served one
    /// upstream's stored answer for another's request).
    ///
    /// The input starts with [`KEY_VERSION`], so no key of this layout equals one of the
    /// earlier layout (the upstream's position as a u64). Rows stored under old keys are not
    /// converted: `persist` loads them as it loads any row (their seal is bound to their own
    /// key bytes, so they open), no request's key equals theirs any more, and they go when
    /// they expire (deleted at a start after `expires_at`) or the byte budget evicts them.
    pub fn new(
        upstream: &UpstreamSettings,
        method: &Method,
        path_and_query: &str,
        identity: &Identity,
        headers: &HeaderMap,
        key_headers: &[HeaderName],
    ) -> CacheKey {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        CacheKey::of_target(
            upstream,
            method,
            (path, query),
            identity,
            headers,
            key_headers,
        )
    }

    /// [`CacheKey::new`] for a target already split into its path and query (a `Uri` holds
    /// them apart: no search for the `?`). The same key for the same target.
    pub fn of_target(
        upstream: &UpstreamSettings,
        method: &Method,
        (path, query): (&str, Option<&str>),
        identity: &Identity,
        headers: &HeaderMap,
        key_headers: &[HeaderName],
    ) -> CacheKey {
        let inputs = Inputs {
            upstream: &upstream.name,
            method,
            path,
            query,
            identity: identity.as_bytes(),
            headers,
            key_headers,
        };
        last::key_of(&inputs, || laid_out(&inputs))
    }
}

/// What a key is made of ([`CacheKey::of_target`]'s arguments), for [`last`].
struct Inputs<'a> {
    upstream: &'a str,
    method: &'a Method,
    path: &'a str,
    query: Option<&'a str>,
    identity: &'a [u8; 32],
    headers: &'a HeaderMap,
    key_headers: &'a [HeaderName],
}

/// The thread's last key and what it was made of: a request made of the same is given the
/// same key without its input laid out again. A client polling one list sends the same
/// request again and again, and its key's layout (the key headers found among the request's
/// by comparing names, a dozen parts written) was ~0.8k of a cache hit's instructions
/// (callgrind); comparing with the last request's inputs costs about a third of that.
///
/// "The same": the same upstream name, method, target (path, query) and identity bytes, the
/// same key header list, and request headers whose names are the last request's, in the same
/// order, with the same values where the name is a key header. The layout reads nothing else
/// (values of other headers are never laid out, and which names are key headers depends only
/// on the names and the list), so it would be byte for byte the last one, and so would its
/// hash. A request of more than [`FEW`] header values is never remembered here (its names
/// cost more to compare than they save).
mod last {
    use super::{CacheKey, Inputs, FEW};
    use http::{HeaderName, Method};
    use std::cell::RefCell;

    #[derive(Default)]
    struct Last {
        /// `None`: nothing remembered (yet, or the last request was not kept).
        key: Option<CacheKey>,
        upstream: String,
        method: Option<Method>,
        path: String,
        query: Option<String>,
        identity: [u8; 32],
        key_headers: Vec<HeaderName>,
        /// The request's header names in its order, with the span in `values` of the value
        /// when the name is a key header.
        names: Vec<(HeaderName, Option<(usize, usize)>)>,
        values: Vec<u8>,
    }

    /// Inputs a thread remembers. Clients that send the same request with their header
    /// fields in different orders (wrk's threads do: each orders its Lua table of headers its
    /// own way) come to one worker in turn; with one remembered, about half of the hits under
    /// `wrk -t2 -c64` laid their key out again (callgrind: 7,868 of 15,930, ~0.4k a hit on
    /// average), where one client made 2 in all.
    const KEPT: usize = 4;

    #[derive(Default)]
    struct Lasts {
        kept: [Last; KEPT],
        /// The one the next new inputs replace.
        next: usize,
        /// Requests in a row that were none of the kept ones (see [`key_of`]).
        misses: u32,
    }

    thread_local! {
        static LAST: RefCell<Lasts> = RefCell::new(Lasts::default());
    }

    /// The key of `inputs`: the last one when they are the same, else `lay_out`'s, kept.
    pub(super) fn key_of(inputs: &Inputs<'_>, lay_out: impl FnOnce() -> CacheKey) -> CacheKey {
        if inputs.headers.len() > FEW {
            return lay_out();
        }
        LAST.with(|cell| {
            let Ok(mut lasts) = cell.try_borrow_mut() else {
                return lay_out();
            };
            let found = lasts
                .kept
                .iter()
                .find_map(|last| last.key.filter(|_| last.is(inputs)));
            if let Some(key) = found {
                lasts.misses = 0;
                return key;
            }
            let key = lay_out();
            // A client whose requests all differ (a few lists in turn) makes every request a
            // miss: it pays the comparisons, and the copy only now and then.
            lasts.misses = lasts.misses.saturating_add(1);
            if lasts.misses <= 2 || lasts.misses.is_multiple_of(16) {
                let at = lasts.next;
                lasts.next = (at + 1) % KEPT;
                lasts.kept[at].keep(inputs, key);
            }
            key
        })
    }

    impl Last {
        fn is(&self, i: &Inputs<'_>) -> bool {
            // The fields first, one per value as the request has them, in one walk of the
            // request's map (a second walk for the values cost ~0.07k of a hit, callgrind): the
            // same names, and the same values where the name is a key header. Inputs kept for
            // another order of the same fields differ there, within a name or two.
            self.names.len() == i.headers.len()
                && self.names.iter().zip(i.headers).all(|((a, span), (b, v))| {
                    a == b && span.is_none_or(|(from, to)| self.values[from..to] == *v.as_bytes())
                })
                && self.identity == *i.identity
                && self.path == i.path
                && self.query.as_deref() == i.query
                && self.upstream == i.upstream
                && self.method.as_ref() == Some(i.method)
                && self.key_headers == i.key_headers
        }

        fn keep(&mut self, i: &Inputs<'_>, key: CacheKey) {
            self.key = Some(key);
            self.upstream.clear();
            self.upstream.push_str(i.upstream);
            if self.method.as_ref() != Some(i.method) {
                self.method = Some(i.method.clone());
            }
            self.path.clear();
            self.path.push_str(i.path);
            match (&mut self.query, i.query) {
                (Some(q), Some(new)) => {
                    q.clear();
                    q.push_str(new);
                }
                (q, new) => *q = new.map(str::to_owned),
            }
            self.identity = *i.identity;
            if self.key_headers != i.key_headers {
                self.key_headers = i.key_headers.to_vec();
            }
            self.names.clear();
            self.values.clear();
            for (n, v) in i.headers {
                let span = i.key_headers.contains(n).then(|| {
                    let from = self.values.len();
                    self.values.extend_from_slice(v.as_bytes());
                    (from, self.values.len())
                });
                self.names.push((n.clone(), span));
            }
        }
    }
}

/// [`CacheKey::of_target`]'s key, its input laid out and hashed ([`remembered`]). It reads
/// nothing but `i`, which is what lets [`last`] give a key again for the same [`Inputs`].
fn laid_out(i: &Inputs<'_>) -> CacheKey {
    // The whole input is laid out in one buffer and hashed once: blake3's overhead per
    // `update` on a dozen short parts cost more than the hashing itself (~3.7k of a cache
    // hit's ~37k instructions, callgrind). The bytes are those a part-by-part hasher saw,
    // so keys stored on disk stay valid (the test below pins one).
    // The thread's reused buffer: no allocation per request.
    crate::identity::with_scratch(|buf| {
        let part = |buf: &mut Vec<u8>, b: &[u8]| {
            buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
            buf.extend_from_slice(b);
        };
        part(buf, KEY_VERSION);
        part(buf, i.upstream.as_bytes());
        part(buf, i.method.as_str().as_bytes());
        // The normalised target, written in place behind its length.
        let at = buf.len();
        buf.extend_from_slice(&[0; 8]);
        push_normalised(buf, i.path, i.query);
        let len = (buf.len() - at - 8) as u64;
        buf[at..at + 8].copy_from_slice(&len.to_le_bytes());
        part(buf, i.identity);
        push_key_headers(buf, i.headers, i.key_headers);
        remembered(buf)
    })
}

/// The most header values a request may have to be read by comparing names
/// ([`push_key_headers`]), and to have its key remembered by its inputs ([`last`]).
const FEW: usize = 4;

/// Each key header's name, then each of its values in the request's order, as length-prefixed
/// parts, as `get_all` gives them. A request of a few header values (a script's, a benchmark's:
/// `Host`, `Authorization`, `Accept`) is read by comparing names, with no hashing: a `get_all`
/// per key header hashed its name and probed the map (four lookups, ~0.55k of a cache hit's
/// instructions, two of the names custom and hashed byte by byte). A request of more values
/// (an editor's) is read name by name as before, where the walk would cost more than the
/// lookups. `HeaderMap::iter` gives a name's values in the order `get_all` does, so the bytes
/// are the same either way.
fn push_key_headers(buf: &mut Vec<u8>, headers: &HeaderMap, key_headers: &[HeaderName]) {
    let part = |buf: &mut Vec<u8>, b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
        buf.extend_from_slice(b);
    };
    if headers.len() > FEW {
        for name in key_headers {
            part(buf, name.as_str().as_bytes());
            for v in headers.get_all(name) {
                part(buf, v.as_bytes());
            }
        }
        return;
    }
    // The map walked once (its iterator is the costly part), its few pairs compared after.
    let mut pairs: [(Option<&HeaderName>, &[u8]); FEW] = [(None, &[]); FEW];
    for (slot, (n, v)) in pairs.iter_mut().zip(headers) {
        *slot = (Some(n), v.as_bytes());
    }
    for name in key_headers {
        part(buf, name.as_str().as_bytes());
        for (n, v) in &pairs {
            if *n == Some(name) {
                part(buf, v);
            }
        }
    }
}

/// The key of a laid-out input: the one this thread hashed last when the input is the same
/// bytes, else blake3's hash of it. A client polling one list asks the same key again and again
/// (and its hash was ~2.5k of a cache hit's instructions, callgrind); equal bytes give the
/// equal hash, so the answer is the same either way. The input holds no credential, only the
/// keyed identity hash.
fn remembered(input: &[u8]) -> CacheKey {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<(Vec<u8>, CacheKey)> = const { RefCell::new((Vec::new(), CacheKey([0; 32]))) };
    }
    LAST.with(|cell| {
        let Ok(mut last) = cell.try_borrow_mut() else {
            return CacheKey(*blake3::hash(input).as_bytes());
        };
        if !last.0.is_empty() && last.0 == input {
            return last.1;
        }
        let key = CacheKey(*blake3::hash(input).as_bytes());
        // Inputs past 4 KiB (a long query) are not remembered: the copy would cost more.
        if input.len() <= 4096 {
            last.0.clear();
            last.0.extend_from_slice(input);
            last.1 = key;
        }
        key
    })
}

#[cfg(test)]
mod remembered_tests {
    use super::*;

    /// The remembered key is only ever the one of the same bytes: two inputs in turn, again
    /// and again, each get their own blake3 hash.
    #[test]
    fn a_remembered_key_is_the_hash_of_the_same_input() {
        let a = b"weir.k/2 a".as_slice();
        let b = b"weir.k/2 b".as_slice();
        for _ in 0..3 {
            for input in [a, a, b, a, b, b] {
                assert_eq!(remembered(input).0, *blake3::hash(input).as_bytes());
            }
        }
        let long = vec![7u8; 5000];
        assert_eq!(remembered(&long).0, *blake3::hash(&long).as_bytes());
        assert_eq!(remembered(a).0, *blake3::hash(a).as_bytes());
    }
}

/// A request target in one spelling, appended to `out` (no allocation when there is no
/// query). Sorts query parameters so `?a=1&b=2` and `?b=2&a=1` share a key, drops empty `&`
/// pieces, and spells every name and value one way ([`canonical`]): Go's `url.Values.Encode`
/// sends `sort=last_updated_at%2Cdesc` where a JavaScript client writes
/// `sort=last_updated_at,desc`, and both ask for the same list.
fn push_normalised(out: &mut Vec<u8>, path: &str, query: Option<&str>) {
    out.extend_from_slice(path.as_bytes());
    let Some(query) = query else {
        return;
    };
    let mut params = canonical_params(query);
    params.sort_unstable();
    for (i, p) in params.iter().enumerate() {
        out.push(if i == 0 { b'?' } else { b'&' });
        out.extend_from_slice(p.as_bytes());
    }
}

/// The reference spelling of a request target, kept for the tests: `CacheKey::new` writes
/// the same bytes in place (`push_normalised`), and a test holds the two equal.
#[cfg(test)]
pub fn normalise(path_and_query: &str) -> String {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, q),
        None => (path_and_query, ""),
    };
    let mut params = canonical_params(query);
    params.sort_unstable();
    if params.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", params.join("&"))
    }
}

/// Every non-empty `name[=value]` piece of `query`, each spelt by [`canonical`] (name and
/// value apart, split at the first literal `=`), in the order given.
pub fn canonical_params(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((n, v)) => format!("{}={}", canonical(n), canonical(v)),
            None => canonical(p),
        })
        .collect()
}

/// One spelling of a query name or value: `%XX` escapes are decoded, and every byte that is not
/// unreserved (RFC 3986: letters, digits, `-._~`) is written as an upper-case `%XX`, whether it
/// arrived escaped or not. A literal `+` stays `+`: form encoding reads it as a space, so it is
/// not the same as `%2B`. A `%` not followed by two hex digits is a literal `%` (`%25`).
pub fn canonical(part: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = part.as_bytes();
    let mut out = String::with_capacity(part.len());
    let mut i = 0;
    while i < bytes.len() {
        let (b, escaped) = match bytes[i] {
            b'%' => {
                let digit = |at: usize| bytes.get(at).and_then(|&c| hex(c));
                match (digit(i + 1), digit(i + 2)) {
                    (Some(h), Some(l)) => {
                        i += 3;
                        (h << 4 | l, true)
                    }
                    _ => {
                        i += 1;
                        (b'%', true)
                    }
                }
            }
            b => {
                i += 1;
                (b, false)
            }
        };
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else if b == b'+' && !escaped {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_api::upstream_named;
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
        let key = |p: &str, i: &Identity, h: &HeaderMap| {
            CacheKey::new(&upstream_named("up0"), &Method::GET, p, i, h, &hk)
        };
        assert_eq!(
            key("/s?page_size=2&sort=x", &ia, &a),
            key("/s?sort=x&page_size=2", &ia, &a)
        );
        assert_ne!(key("/s", &ia, &a), key("/s", &ib, &b));
        let mut a2 = a.clone();
        a2.insert("accept", "text/html".parse().unwrap());
        assert_ne!(key("/s", &ia, &a), key("/s", &ia, &a2));
    }

    /// The key headers read by comparing names lay out the bytes `get_all` per key header did:
    /// values in order, a header asked twice, absent headers and headers that are not key
    /// headers, in requests of few names and of many.
    #[test]
    fn key_headers_read_in_one_pass_are_laid_out_as_name_by_name() {
        let by_name = |headers: &HeaderMap, names: &[HeaderName]| {
            let mut out = Vec::new();
            for name in names {
                out.extend_from_slice(&(name.as_str().len() as u64).to_le_bytes());
                out.extend_from_slice(name.as_str().as_bytes());
                for v in headers.get_all(name) {
                    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                    out.extend_from_slice(v.as_bytes());
                }
            }
            out
        };
        let n = HeaderName::from_static;
        let names = [
            n("accept"),
            n("accept-encoding"),
            n("x-github-api-version"),
            n("copilot-api-version"),
        ];
        let twice = [
            n("x-github-api-version"),
            n("accept"),
            n("x-github-api-version"),
        ];
        let mut cases = Vec::new();
        cases.push(HeaderMap::new());
        let mut few = HeaderMap::new();
        few.insert("x-github-api-version", "1".parse().unwrap());
        few.append("accept", "a".parse().unwrap());
        few.append("x-github-api-version", "2".parse().unwrap());
        few.append("accept", "b".parse().unwrap());
        cases.push(few);
        let mut h = HeaderMap::new();
        h.insert("host", "a".parse().unwrap());
        h.insert("authorization", "token a".parse().unwrap());
        h.insert("accept", "application/json".parse().unwrap());
        cases.push(h.clone());
        h.append("copilot-api-version", "2025-01-01".parse().unwrap());
        h.append("accept", "text/html".parse().unwrap());
        h.append("x-github-api-version", "2022-11-28".parse().unwrap());
        h.append("accept", "*/*".parse().unwrap());
        cases.push(h.clone());
        for i in 0..20 {
            h.append("accept-encoding", format!("e{i}").parse().unwrap());
        }
        cases.push(h);
        for headers in &cases {
            for list in [&names[..], &twice[..], &[]] {
                let mut out = Vec::new();
                push_key_headers(&mut out, headers, list);
                assert_eq!(out, by_name(headers, list), "{headers:?} {list:?}");
            }
        }
    }

    #[test]
    fn the_key_spells_the_target_as_normalise_does() {
        // `CacheKey::new` writes the normalised target in place; every shape of query must
        // come out as `normalise` spells it.
        for pq in [
            "/agents/sessions",
            "/a?",
            "/a?&&",
            "/a?b=2&a=1",
            "/a?sort=last_updated_at%2Cdesc&x",
            "/a?=&=x&k",
            "/p%20q?z=%zz&y=+",
            "?",
            "",
        ] {
            let mut out = Vec::new();
            match pq.split_once('?') {
                Some((p, q)) => push_normalised(&mut out, p, Some(q)),
                None => push_normalised(&mut out, pq, None),
            }
            assert_eq!(String::from_utf8(out).unwrap(), normalise(pq), "for {pq:?}");
        }
    }

    #[test]
    fn the_upstream_is_hashed_by_its_name_after_a_version_tag() {
        // The disk cache's rows are keyed by these bytes: a key that changed would orphan
        // every stored entry, so the input is pinned. Each part is its length (u64, LE) and its
        // bytes: the version tag, the upstream's name, method, normalised path, identity, then
        // each key header's name and values.
        let id = IdentityKey::new([0; 32]).identify(&HeaderMap::new());
        let up = upstream_named("copilot-api");
        let mut headers = HeaderMap::new();
        headers.insert("accept", "application/json".parse().unwrap());
        let accept = [HeaderName::from_static("accept")];
        let key = CacheKey::new(
            &up,
            &Method::GET,
            "/agents/sessions?b=2&a=1",
            &id,
            &headers,
            &accept,
        );
        let mut input = Vec::new();
        for part in [
            &b"weir.k/2"[..],
            b"copilot-api",
            b"GET",
            b"/agents/sessions?a=1&b=2",
            id.as_bytes(),
            b"accept",
            b"application/json",
        ] {
            input.extend_from_slice(&(part.len() as u64).to_le_bytes());
            input.extend_from_slice(part);
        }
        assert_eq!(key.as_bytes(), blake3::hash(&input).as_bytes());
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "635cb7b229f799bec27146e19472d9cc6792ce9874d9cfd921ebe215922d5943"
        );
        // The name is what tells two upstreams apart; the old layout (position 0 as eight
        // bytes first) is not this key.
        let other = CacheKey::new(
            &upstream_named("copilot-apj"),
            &Method::GET,
            "/agents/sessions?b=2&a=1",
            &id,
            &headers,
            &accept,
        );
        assert_ne!(key, other);
        let mut v1 = blake3::Hasher::new();
        for part in [
            &0u64.to_le_bytes()[..],
            b"GET",
            b"/agents/sessions?a=1&b=2",
            id.as_bytes(),
            b"accept",
            b"application/json",
        ] {
            v1.update(&(part.len() as u64).to_le_bytes());
            v1.update(part);
        }
        assert_ne!(key.as_bytes(), v1.finalize().as_bytes());
    }

    #[test]
    fn one_list_asked_in_two_encodings_is_one_key() {
        // gh (Go's url.Values.Encode) and a JavaScript client spell the same sort two ways.
        assert_eq!(
            normalise("/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc"),
            normalise("/agents/sessions?sort=last_updated_at,desc&page_size=50&page_number=1"),
        );
        assert_eq!(
            normalise("/s?repo_nwo=o/r&x=%2c"),
            normalise("/s?repo_nwo=o%2Fr&x=%2C")
        );
        assert_eq!(normalise("/s?a%5Fb=%41"), "/s?a_b=A");
        assert_eq!(canonical("last_updated_at,desc"), "last_updated_at%2Cdesc");
        // `+` is a space in form encoding: not the same as an escaped plus.
        assert_ne!(canonical("a+b"), canonical("a%2Bb"));
        // Broken escapes are literal `%`, never a panic, never dropped.
        assert_eq!(canonical("%"), "%25");
        assert_eq!(canonical("%4"), "%254");
        assert_eq!(canonical("%zz"), "%25zz");
        assert_eq!(canonical("é"), "%C3%A9");
        assert_eq!(canonical("%C3%A9"), "%C3%A9");
        // A `=` inside a value is that value's, escaped or not.
        assert_eq!(normalise("/s?q=a=b"), normalise("/s?q=a%3Db"));
        // Different values stay different keys.
        assert_ne!(normalise("/s?sort=a,desc"), normalise("/s?sort=a,asc"));
    }

    /// A key given again from the thread's last inputs (`last`) is always the key its input
    /// lays out to: along a walk where requests repeat, or differ from the last in one input
    /// (upstream, method, path, query, identity, a key header's value, a header that is not a
    /// key header, the header names, the key header list), including requests that carry a
    /// fresh id each time (the last key is given again) and a key header twice.
    #[test]
    fn a_key_remembered_by_its_inputs_is_the_laid_out_key() {
        let k = IdentityKey::new([0; 32]);
        let mut a = HeaderMap::new();
        a.insert("authorization", "token a".parse().unwrap());
        let mut b = HeaderMap::new();
        b.insert("authorization", "token b".parse().unwrap());
        let identities = [k.identify(&a), k.identify(&b)];
        let n = HeaderName::from_static;
        let lists = [
            vec![
                n("accept"),
                n("accept-encoding"),
                n("x-github-api-version"),
                n("copilot-api-version"),
            ],
            vec![
                n("x-github-api-version"),
                n("accept"),
                n("x-github-api-version"),
            ],
            vec![],
        ];
        let upstreams = [upstream_named("up0"), upstream_named("up1")];
        let methods = [Method::GET, Method::HEAD];
        let targets = [("/a", None), ("/a", Some("x=1&y=2")), ("/b", Some("x=1"))];
        let headers = |set: usize, id: u64| {
            let mut h = HeaderMap::new();
            let mut add = |name: &'static str, v: String| h.append(name, v.parse().unwrap());
            match set {
                0 => {
                    add("host", "127.0.0.1".into());
                    add("authorization", "token a".into());
                    add("accept", "application/json".into());
                }
                1 => {
                    add("host", "127.0.0.1".into());
                    add("authorization", "token a".into());
                    add("accept", "text/html".into());
                }
                2 => {
                    add("host", "127.0.0.1".into());
                    add("accept", "application/json".into());
                    add("x-request-id", format!("{id}"));
                }
                3 => {
                    add("host", "127.0.0.1".into());
                    add("x-github-api-version", "2022-11-28".into());
                    add("accept", "a".into());
                    add("x-github-api-version", format!("v{}", id % 2));
                }
                4 => {
                    add("accept", "application/json".into());
                    add("host", "127.0.0.1".into());
                }
                _ => {
                    for i in 0..6 {
                        add("accept", format!("a{i}"));
                    }
                }
            }
            h
        };
        // A walk over the choices (a fixed xorshift): each step changes one of them half the
        // time, else asks the same again.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut pick = [0usize; 7];
        let sizes = [2, 2, 3, 2, 3, 6, 1000];
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(2) {
                let which = ((x >> 8) % 7) as usize;
                pick[which] = ((x >> 16) as usize) % sizes[which];
            }
            let [up, method, target, identity, list, set, id] = pick;
            let h = headers(set, id as u64 + step * u64::from(set == 2));
            let (path, query) = targets[target];
            let (u, m, i, l) = (
                &upstreams[up],
                &methods[method],
                &identities[identity],
                &lists[list],
            );
            assert_eq!(
                CacheKey::of_target(u, m, (path, query), i, &h, l),
                laid_out(&Inputs {
                    upstream: &u.name,
                    method: m,
                    path,
                    query,
                    identity: i.as_bytes(),
                    headers: &h,
                    key_headers: l,
                }),
                "step {step}: {pick:?}"
            );
        }
    }
}
