//! One cache entry as it is kept on disk: its freshness deadlines as wall-clock times (a
//! process's `Instant`s mean nothing to the next one), encoded in a small binary layout, and
//! sealed with AES-256-GCM under the per-install cache key. The cache key is the associated
//! data, so a record moved to another row (another identity's or another request's key) fails
//! to open instead of being served to the wrong caller.

use super::{CacheKey, Stored};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Layout version, part of the associated data: a record of another layout never opens.
const VERSION: u8 = 1;

/// An entry's deadlines on the wall clock, for keeping across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallTimes {
    pub stored_at: SystemTime,
    pub fresh_until: SystemTime,
    pub revalidate_until: SystemTime,
    pub stale_if_error_until: SystemTime,
}

impl WallTimes {
    /// The deadlines of `s`, read against one (`now`, `wall_now`) pair of clocks.
    pub fn of(s: &Stored, now: Instant, wall_now: SystemTime) -> WallTimes {
        let wall = |i: Instant| {
            if i >= now {
                wall_now + (i - now)
            } else {
                wall_now.checked_sub(now - i).unwrap_or(UNIX_EPOCH)
            }
        };
        WallTimes {
            stored_at: wall(s.stored_at),
            fresh_until: wall(s.fresh_until),
            revalidate_until: wall(s.revalidate_until),
            stale_if_error_until: wall(s.stale_if_error_until),
        }
    }

    /// The last moment the entry can be served at all.
    pub fn expires_at(&self) -> SystemTime {
        self.stale_if_error_until
            .max(self.revalidate_until)
            .max(self.fresh_until)
    }
}

/// Back to this process's clock. A deadline further in the past than this process's `Instant`
/// can express becomes `now` (already passed either way, so freshness is unchanged).
fn instant(t: SystemTime, now: Instant, wall_now: SystemTime) -> Instant {
    match t.duration_since(wall_now) {
        Ok(ahead) => now + ahead.min(Duration::from_secs(10 * 365 * 24 * 3600)),
        Err(e) => now.checked_sub(e.duration()).unwrap_or(now),
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH)
}

/// Milliseconds since the Unix epoch (the plaintext columns used for eviction and expiry).
pub fn unix_ms(t: SystemTime) -> i64 {
    i64::try_from(millis(t)).unwrap_or(i64::MAX)
}

/// The plaintext of a record: status, deadlines, headers, body.
pub fn encode(s: &Stored, w: &WallTimes) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.body.len() + 256);
    out.push(VERSION);
    out.extend_from_slice(&s.status.as_u16().to_le_bytes());
    for t in [
        w.stored_at,
        w.fresh_until,
        w.revalidate_until,
        w.stale_if_error_until,
    ] {
        out.extend_from_slice(&millis(t).to_le_bytes());
    }
    out.extend_from_slice(&(s.headers.len() as u32).to_le_bytes());
    for (k, v) in &s.headers {
        put_bytes(&mut out, k.as_str().as_bytes());
        put_bytes(&mut out, v.as_bytes());
    }
    put_bytes(&mut out, &s.body);
    out
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Why a record was not loaded. Every one means "skip it": never a panic, never served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("the record does not open under this install's cache key (tampered, moved or from another install)")]
    Unsealed,
    #[error("the record is malformed: {0}")]
    Malformed(&'static str),
}

/// Reads bounded pieces off a byte slice; running out is an error, never a panic.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Malformed("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// An entry from its plaintext, on this process's clock; also its wall-clock deadlines.
pub fn decode(
    plain: &[u8],
    now: Instant,
    wall_now: SystemTime,
) -> Result<(Stored, WallTimes), RecordError> {
    let mut r = Reader(plain);
    if r.take(1)? != [VERSION] {
        return Err(RecordError::Malformed("unknown layout version"));
    }
    let status =
        StatusCode::from_u16(r.u16()?).map_err(|_| RecordError::Malformed("bad status"))?;
    let w = WallTimes {
        stored_at: from_millis(r.u64()?),
        fresh_until: from_millis(r.u64()?),
        revalidate_until: from_millis(r.u64()?),
        stale_if_error_until: from_millis(r.u64()?),
    };
    let n = r.u32()?;
    let mut headers = HeaderMap::new();
    for _ in 0..n {
        let k = HeaderName::from_bytes(r.bytes()?)
            .map_err(|_| RecordError::Malformed("bad header name"))?;
        let v = HeaderValue::from_bytes(r.bytes()?)
            .map_err(|_| RecordError::Malformed("bad header value"))?;
        headers.append(k, v);
    }
    let body = Bytes::copy_from_slice(r.bytes()?);
    if !r.0.is_empty() {
        return Err(RecordError::Malformed("trailing bytes"));
    }
    let at = |t| instant(t, now, wall_now);
    let stored = Stored {
        status,
        headers,
        body,
        stored_at: at(w.stored_at),
        fresh_until: at(w.fresh_until),
        revalidate_until: at(w.revalidate_until),
        stale_if_error_until: at(w.stale_if_error_until),
    };
    Ok((stored, w))
}

/// The per-install AES-256-GCM key records are sealed with (kept in the keychain).
pub struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Sealer {
        // A 32-byte key is always a valid AES-256 key.
        let unbound = UnboundKey::new(&AES_256_GCM, key).unwrap_or_else(|_| unreachable!());
        Sealer {
            key: LessSafeKey::new(unbound),
            rng: SystemRandom::new(),
        }
    }

    /// `nonce || ciphertext || tag`, with a fresh random 96-bit nonce. Random nonces are safe
    /// here: a cache writes far fewer than the 2^32 records per key where collisions matter.
    pub fn seal(&self, key: &CacheKey, mut plain: Vec<u8>) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(key)),
                &mut plain,
            )
            .ok()?;
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&plain);
        Some(out)
    }

    /// The plaintext of a sealed record stored under `key`.
    pub fn open(&self, key: &CacheKey, sealed: &[u8]) -> Result<Vec<u8>, RecordError> {
        if sealed.len() < NONCE_LEN {
            return Err(RecordError::Unsealed);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| RecordError::Unsealed)?;
        let mut buf = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad(key)), &mut buf)
            .map_err(|_| RecordError::Unsealed)?;
        Ok(plain.to_vec())
    }
}

fn aad(key: &CacheKey) -> [u8; 33] {
    let mut a = [0u8; 33];
    a[0] = VERSION;
    a[1..].copy_from_slice(key.as_bytes());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(now: Instant) -> Stored {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("vary", HeaderValue::from_static("a"));
        headers.append("vary", HeaderValue::from_static("b"));
        Stored {
            status: StatusCode::OK,
            headers,
            body: Bytes::from_static(b"{\"sessions\":[]}"),
            stored_at: now,
            fresh_until: now + Duration::from_secs(15),
            revalidate_until: now + Duration::from_secs(75),
            stale_if_error_until: now + Duration::from_secs(3600),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_round_trips_with_its_deadlines() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let s = entry(now);
        let w = WallTimes::of(&s, now, wall);
        let sealer = Sealer::new(&[7; 32]);
        let key = CacheKey::from_bytes([1; 32]);
        let sealed = sealer.seal(&key, encode(&s, &w)).unwrap();
        // Later, in "another process": 20 s have passed on both clocks.
        tokio::time::advance(Duration::from_secs(20)).await;
        let later = Instant::now();
        let (back, w2) = decode(
            &sealer.open(&key, &sealed).unwrap(),
            later,
            wall + Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(back.body, s.body);
        assert_eq!(back.headers, s.headers);
        assert_eq!(back.status, s.status);
        assert_eq!(w2.fresh_until, from_millis(millis(w.fresh_until)));
        assert_eq!(back.freshness(later), super::super::Freshness::Revalidate);
        assert_eq!(back.age(later).as_secs(), 20);
    }

    #[test]
    fn a_moved_or_altered_record_does_not_open() {
        let now = Instant::now();
        let s = entry(now);
        let w = WallTimes::of(&s, now, SystemTime::now());
        let sealer = Sealer::new(&[7; 32]);
        let key = CacheKey::from_bytes([1; 32]);
        let sealed = sealer.seal(&key, encode(&s, &w)).unwrap();
        let other = CacheKey::from_bytes([2; 32]);
        assert_eq!(sealer.open(&other, &sealed), Err(RecordError::Unsealed));
        let mut flipped = sealed.clone();
        let last = flipped.len() - 20;
        flipped[last] ^= 1;
        assert_eq!(sealer.open(&key, &flipped), Err(RecordError::Unsealed));
        assert_eq!(sealer.open(&key, &sealed[..5]), Err(RecordError::Unsealed));
        assert!(Sealer::new(&[8; 32]).open(&key, &sealed).is_err());
        // The plaintext appears nowhere in the sealed bytes.
        assert!(!sealed.windows(8).any(|w| w == b"sessions"));
    }

    #[test]
    fn malformed_plaintext_is_an_error_not_a_panic() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let s = entry(now);
        let plain = encode(&s, &WallTimes::of(&s, now, wall));
        for cut in 0..plain.len() {
            assert!(decode(&plain[..cut], now, wall).is_err(), "cut at {cut}");
        }
        let mut extra = plain.clone();
        extra.push(0);
        assert!(decode(&extra, now, wall).is_err());
        let mut huge = plain.clone();
        huge[35..39].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge, now, wall).is_err());
    }
}
