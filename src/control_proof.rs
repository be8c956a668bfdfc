//! Proof that the program at Weir's address holds this install's control secret, before the
//! CLI (or `weir env --if-running`) trusts it: the caller sends a fresh random challenge to the
//! unauthenticated `GET /_weir/api/health?challenge=<hex>`, Weir answers
//! `HMAC-SHA256(secret, CONTEXT ‖ address ‖ 0 ‖ challenge)`, and the caller checks it with the
//! secret it holds. Nothing the caller sends is derived from the secret, so a squatter on the
//! port learns nothing it could replay; the address in the MAC stops a squatter relaying the
//! challenge to a real Weir listening elsewhere (docs/reliability.md, "The control secret").

use ring::hmac;

/// What the MAC is for (a proof made for anything else never matches).
const CONTEXT: &[u8] = b"weir control proof v1\0";

/// Bytes of a challenge.
pub const CHALLENGE_BYTES: usize = 32;

/// A fresh random challenge, hex-encoded as the query parameter carries it.
pub fn new_challenge() -> String {
    hex::encode(rand::random::<[u8; CHALLENGE_BYTES]>())
}

fn key(secret: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes())
}

fn message(address: &str, challenge: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + address.len() + 1 + challenge.len());
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(address.as_bytes());
    m.push(0);
    m.extend_from_slice(challenge);
    m
}

/// Weir's answer to `challenge` (hex) at `address` (`host:port` as `config::host_for` writes
/// it), hex-encoded; `None` for a challenge that is not exactly [`CHALLENGE_BYTES`] of hex.
pub fn answer(secret: &str, address: &str, challenge: &str) -> Option<String> {
    let c = hex::decode(challenge).ok()?;
    if c.len() != CHALLENGE_BYTES {
        return None;
    }
    Some(hex::encode(
        hmac::sign(&key(secret), &message(address, &c)).as_ref(),
    ))
}

/// Whether `proof` (hex) is the answer of a holder of `secret` to `challenge` at `address`;
/// compared in constant time.
pub fn verify(secret: &str, address: &str, challenge: &str, proof: &str) -> bool {
    let (Ok(c), Ok(p)) = (hex::decode(challenge), hex::decode(proof)) else {
        return false;
    };
    c.len() == CHALLENGE_BYTES && hmac::verify(&key(secret), &message(address, &c), &p).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_secret_at_this_address_answers() {
        let c = new_challenge();
        let p = answer("s3cret", "127.0.0.1:4000", &c).unwrap();
        assert!(verify("s3cret", "127.0.0.1:4000", &c, &p));
        // Another secret, another address (a relay to a Weir elsewhere), another challenge.
        assert!(!verify("other", "127.0.0.1:4000", &c, &p));
        assert!(!verify("s3cret", "127.0.0.1:4001", &c, &p));
        assert!(!verify("s3cret", "127.0.0.1:4000", &new_challenge(), &p));
        assert!(!verify("s3cret", "127.0.0.1:4000", &c, "00"));
        // A short or malformed challenge gets no answer at all.
        assert_eq!(answer("s3cret", "127.0.0.1:4000", "abcd"), None);
        assert_eq!(answer("s3cret", "127.0.0.1:4000", "zz"), None);
    }
}
