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

/// The client's `X-Request-Id` if it sent a sane one, else a new id ([`new_request_id`]).
#[cfg(any(feature = "gateway", test))]
pub fn request_id(h: &HeaderMap) -> HeaderValue {
    request_id_given(h.get(&REQUEST_ID))
}

/// [`request_id`] of the value the client sent, if any.
pub(super) fn request_id_given(given: Option<&HeaderValue>) -> HeaderValue {
    if let Some(v) = given {
        if !v.is_empty() && v.len() <= 128 && v.to_str().is_ok() {
            return v.clone();
        }
    }
    new_request_id()
}

/// A new request id: 32 lower-case hex digits, unique within this process and, with 64 random
/// bits per process, across Weir's runs. The first 16 digits are drawn once per process; the
/// last 16 are a counter, each thread taking [`ID_BLOCK`] of its values at a time, put through
/// a keyed mix ([`IdKeys::mix`], a bijection of 64-bit numbers, so two values never give one
/// id). An id names a request in logs and problems and is no secret (it is sent to the client
/// and upstream); the mix keeps it from telling how many requests the process served before
/// it, or how far apart two requests came.
///
/// This runs for every request: 128 random bits from the thread's generator, formatted and
/// boxed, were ~0.6k of a cache hit's instructions (callgrind, #32). Now the id's random half
/// is kept as text, its other half is the mixed counter written out (a few dozen instructions),
/// and ids are made [`IDS_PER_BUFFER`] at a time into one buffer they are cut from (shared,
/// not allocated each).
fn new_request_id() -> HeaderValue {
    thread_local! {
        static IDS: std::cell::RefCell<Ids> = std::cell::RefCell::new(Ids::new());
    }
    IDS.try_with(|ids| ids.try_borrow_mut().ok().map(|mut ids| ids.next()))
        .ok()
        .flatten()
        // The thread is ending, or this is a nested call (neither happens): its own id.
        .unwrap_or_else(|| Ids::new().next())
}

/// Counter values a thread takes at once.
const ID_BLOCK: u64 = 1 << 12;
/// Ids made ahead into one buffer.
const IDS_PER_BUFFER: usize = 64;
/// An id's length: 32 hex digits.
const ID_LEN: usize = 32;
/// The ids' counter: the first value of the next block a thread takes.
static ID_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What a process draws once for its ids: their random half, and the mix's two keys.
#[derive(Clone, Copy)]
struct IdKeys {
    prefix: u64,
    before: u64,
    after: u64,
}

impl IdKeys {
    fn get() -> IdKeys {
        static KEYS: std::sync::OnceLock<IdKeys> = std::sync::OnceLock::new();
        *KEYS.get_or_init(|| IdKeys {
            prefix: rand::random(),
            before: rand::random(),
            after: rand::random(),
        })
    }

    /// The counter value `n` mixed: a xor with a key before and after a fixed mixer
    /// (MurmurHash3's 64-bit finaliser). Each step (a xor with a key, a xor with the value
    /// shifted right, a multiplication by an odd number) is a bijection of 64-bit numbers, so
    /// distinct counter values stay distinct; consecutive ones come out in no visible order.
    fn mix(&self, n: u64) -> u64 {
        let mut x = n ^ self.before;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x ^ self.after
    }
}

/// One thread's request ids: the process's keys and its ids' random half as text, the next
/// counter value and how many are left in its block, and ids made ahead, cut one at a time.
struct Ids {
    keys: IdKeys,
    prefix: [u8; 16],
    next: u64,
    left: u64,
    ahead: bytes::Bytes,
}

impl Ids {
    fn new() -> Ids {
        Ids {
            keys: IdKeys {
                prefix: 0,
                before: 0,
                after: 0,
            },
            prefix: [0; 16],
            next: 0,
            left: 0,
            ahead: bytes::Bytes::new(),
        }
    }

    /// The next id, cut from those made ahead (`Bytes::split_to`: one count on the shared
    /// buffer, cheaper than cutting each from a `BytesMut` as it is written).
    fn next(&mut self) -> HeaderValue {
        if self.ahead.len() < ID_LEN {
            self.make_ahead();
        }
        let id = self.ahead.split_to(ID_LEN);
        // Hex digits are always a valid value; the fallback is never used.
        HeaderValue::from_maybe_shared(id).unwrap_or_else(|_| HeaderValue::from_static("0"))
    }

    /// [`IDS_PER_BUFFER`] ids written into one new buffer.
    fn make_ahead(&mut self) {
        let mut buf = Vec::with_capacity(ID_LEN * IDS_PER_BUFFER);
        for _ in 0..IDS_PER_BUFFER {
            if self.left == 0 {
                self.take_block();
            }
            let n = self.next;
            self.next = n.wrapping_add(1);
            self.left -= 1;
            buf.extend_from_slice(&self.prefix);
            buf.extend_from_slice(&hex16(self.keys.mix(n)));
        }
        self.ahead = bytes::Bytes::from(buf);
    }

    /// A new block of counter values (and, the first time, the process's keys and its ids'
    /// random half written out).
    fn take_block(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.keys = IdKeys::get();
        self.prefix = hex16(self.keys.prefix);
        self.next = ID_COUNTER.fetch_add(ID_BLOCK, Relaxed);
        self.left = ID_BLOCK;
    }
}

/// `n` as 16 lower-case hex digits, most significant first: each half's nibbles spread one
/// to a byte, then made digits eight at a time (no table, no loop).
fn hex16(n: u64) -> [u8; 16] {
    fn spread(half: u32) -> u64 {
        let mut x = u64::from(half);
        x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f
    }
    fn digits(nibbles: u64) -> [u8; 8] {
        // 1 in each byte whose nibble is 10 or more (no byte carries into the next).
        let letters = ((nibbles + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        let gap = u64::from(b'a' - b'0' - 10);
        (nibbles + 0x3030_3030_3030_3030 + letters * gap).to_be_bytes()
    }
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&digits(spread((n >> 32) as u32)));
    out[8..].copy_from_slice(&digits(spread(n as u32)));
    out
}

/// Bytes of the header section as received (names, values and separators).
pub fn header_bytes(h: &HeaderMap) -> usize {
    h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum()
}

/// What the front door and the identity phase read of a request's headers, gathered in one
/// pass over them: the header section's size ([`header_bytes`]), the client's request id,
/// `User-Agent`, the credentials, and whether the request is conditional at all. Each was a
/// lookup of its own (a name hashed and probed, ~0.1k instructions each, callgrind); a
/// request carries a handful of headers, and one look at each name is cheaper.
///
/// Each value is the first of its name, as `HeaderMap::get` gives it; the credentials say
/// whether there are more ([`Values`]).
pub(super) struct Glance<'a> {
    pub bytes: usize,
    pub request_id: Option<&'a HeaderValue>,
    pub user_agent: Option<&'a HeaderValue>,
    pub credentials: crate::identity::Credentials<'a>,
    /// `If-None-Match` or `If-Modified-Since` is present (`super::conditional` reads them).
    pub conditional: bool,
}

impl<'a> Glance<'a> {
    pub fn of(h: &'a HeaderMap) -> Glance<'a> {
        use crate::identity::Values;
        let mut g = Glance {
            bytes: 0,
            request_id: None,
            user_agent: None,
            credentials: crate::identity::Credentials::none(h),
            conditional: false,
        };
        // Each name is told by its own comparison: a standard name compares as a small
        // number, a custom one by its bytes, after its length.
        for (name, value) in h {
            g.bytes += name.as_str().len() + value.len() + 4;
            let slot = if name == header::AUTHORIZATION {
                &mut g.credentials.authorization
            } else if name == header::COOKIE {
                &mut g.credentials.cookie
            } else {
                if name == header::USER_AGENT {
                    g.user_agent.get_or_insert(value);
                } else if name == header::IF_NONE_MATCH || name == header::IF_MODIFIED_SINCE {
                    g.conditional = true;
                } else if *name == REQUEST_ID {
                    g.request_id.get_or_insert(value);
                }
                continue;
            };
            *slot = match slot {
                Values::None => Values::One(value),
                _ => Values::Many,
            };
        }
        g
    }
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

    /// The one pass finds what the lookups it replaces find: the size, the first request id
    /// and `User-Agent`, whether a condition is present, and the credentials (the identity
    /// they give).
    #[test]
    fn a_glance_finds_what_lookups_find() {
        use http::header::*;
        let key = crate::identity::IdentityKey::new([5; 32]);
        let mut maps = vec![HeaderMap::new()];
        let mut h = HeaderMap::new();
        for (name, value) in [
            (HOST, "127.0.0.1:9"),
            (AUTHORIZATION, "token a"),
            (ACCEPT, "application/json"),
            (USER_AGENT, "gh/2.63.0"),
            (REQUEST_ID, "rid-1"),
            (COOKIE, "s=1"),
            (IF_NONE_MATCH, "\"e\""),
        ] {
            h.append(name, value.parse().unwrap());
            maps.push(h.clone());
        }
        for (name, value) in [
            (USER_AGENT, "second"),
            (REQUEST_ID, "rid-2"),
            (COOKIE, "t=2"),
            (AUTHORIZATION, "token b"),
        ] {
            h.append(name, value.parse().unwrap());
            maps.push(h.clone());
        }
        let mut since = HeaderMap::new();
        since.insert(
            IF_MODIFIED_SINCE,
            "Sun, 06 Dec 2026 10:00:00 GMT".parse().unwrap(),
        );
        maps.push(since);
        for h in &maps {
            let g = Glance::of(h);
            assert_eq!(g.bytes, header_bytes(h), "{h:?}");
            assert_eq!(g.request_id, h.get(REQUEST_ID), "{h:?}");
            assert_eq!(g.user_agent, h.get(USER_AGENT), "{h:?}");
            let conditional = h.contains_key(IF_NONE_MATCH) || h.contains_key(IF_MODIFIED_SINCE);
            assert_eq!(g.conditional, conditional, "{h:?}");
            let by_lookup = crate::identity::Credentials::of(h);
            assert_eq!(
                key.caller_of(&g.credentials),
                key.caller_of(&by_lookup),
                "{h:?}"
            );
        }
    }

    /// New ids are 32 lower-case hex digits and never repeat: within a thread across counter
    /// blocks and buffers, and across threads; one process's ids share their first half.
    #[test]
    fn new_ids_are_unique_hex() {
        let ids = |n: usize| (0..n).map(|_| new_request_id()).collect::<Vec<_>>();
        let mut all: Vec<HeaderValue> = std::thread::scope(|s| {
            let others: Vec<_> = (0..3).map(|_| s.spawn(|| ids(5000))).collect();
            let mut all = ids(2 * ID_BLOCK as usize + 3);
            for o in others {
                all.extend(o.join().unwrap());
            }
            all
        });
        let prefix = all[0].as_bytes()[..16].to_vec();
        for id in &all {
            let b = id.as_bytes();
            assert_eq!(b.len(), 32, "{id:?}");
            assert!(
                b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
                "{id:?}"
            );
            assert_eq!(b[..16], prefix[..], "{id:?}");
        }
        let n = all.len();
        all.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        all.dedup();
        assert_eq!(all.len(), n, "an id repeated");
    }

    /// Hex digits as `format!` writes them.
    #[test]
    fn hex16_writes_as_format_does() {
        for fixed in [0u64, 9, 10, 15, 0xff, 0x9f9, 0xa0a0, u64::MAX - 1, u64::MAX] {
            assert_eq!(hex16(fixed), *format!("{fixed:016x}").as_bytes());
        }
        let mut n = 0x0123_4567_89ab_cdefu64;
        for _ in 0..10_000 {
            n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            assert_eq!(hex16(n), *format!("{n:016x}").as_bytes(), "{n:x}");
        }
    }

    /// One thread's consecutive ids do not count up: their counter halves are neither steps of
    /// one nor in order, so an id does not tell how many came before it. They stay unique
    /// (across threads: `new_ids_are_unique_hex`).
    #[test]
    fn ids_do_not_count_up() {
        let halves: Vec<u64> = (0..3 * ID_BLOCK as usize)
            .map(|_| {
                let id = new_request_id();
                let digits = std::str::from_utf8(&id.as_bytes()[16..]).unwrap();
                u64::from_str_radix(digits, 16).unwrap()
            })
            .collect();
        let steps = halves
            .windows(2)
            .filter(|w| w[1] == w[0].wrapping_add(1))
            .count();
        assert_eq!(steps, 0, "consecutive ids counted up");
        // About half rise, as random numbers do (a counter's all do).
        let rising = halves.windows(2).filter(|w| w[1] > w[0]).count();
        assert!(
            rising < halves.len() * 3 / 4,
            "{rising} of {} rose",
            halves.len()
        );
        let mut unique = halves.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), halves.len(), "an id repeated");
        // The mix alone keeps distinct values distinct.
        let keys = IdKeys::get();
        let mut mixed: Vec<u64> = (0..100_000u64).map(|n| keys.mix(n)).collect();
        mixed.sort_unstable();
        mixed.dedup();
        assert_eq!(mixed.len(), 100_000);
    }
}
