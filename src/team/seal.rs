//! Signing facts: HMAC-SHA256 (`ring::hmac`) with the team key, a 32-byte secret every
//! teammate holds in their keychain (`weir team set-key`). The tag covers the subject and the
//! payload, so a fact cannot be moved to another upstream's subject.
//!
//! What it protects against: anyone who can publish on the NATS server without the team key
//! (another team sharing the server or account, a leaked NATS credential, a misconfigured
//! permission) cannot make this team's Weirs cautious, open their breakers or pause them; a
//! captured fact is only accepted while it is recent (see `Fact::check`). What it does not:
//! a teammate holding the key can publish false facts as one teammate: who a teammate is comes
//! from the subject's sender token, which per-user NATS publish permissions make the server's
//! to give (see `link::identity_enforced`), never from the fact itself. Facts are not
//! encrypted (they hold nothing secret; `tls://` protects them in transit).

use ring::hmac;

/// The NATS header carrying the tag.
pub const HEADER: &str = "Weir-Signature";
/// The tag's scheme prefix in the header (`v1=<hex>`).
const SCHEME: &str = "v1=";

/// The team key.
#[derive(Clone)]
pub struct TeamKey(hmac::Key);

impl std::fmt::Debug for TeamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TeamKey(..)")
    }
}

impl TeamKey {
    pub const LEN: usize = 32;

    pub fn new(bytes: &[u8; Self::LEN]) -> TeamKey {
        TeamKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// A key written as 64 hex digits (how it is stored and shared).
    pub fn from_hex(s: &str) -> Option<TeamKey> {
        let b = hex::decode(s.trim()).ok()?;
        let b = <[u8; Self::LEN]>::try_from(b).ok()?;
        Some(TeamKey::new(&b))
    }

    /// The header value for `payload` published on `subject`.
    pub fn sign(&self, subject: &str, payload: &[u8]) -> String {
        let tag = hmac::sign(&self.0, &message(subject, payload));
        format!("{SCHEME}{}", hex::encode(tag.as_ref()))
    }

    /// Whether `header` is this key's tag for `payload` on `subject` (constant-time compare).
    pub fn verify(&self, subject: &str, payload: &[u8], header: &str) -> bool {
        let Some(tag) = header
            .strip_prefix(SCHEME)
            .and_then(|h| hex::decode(h).ok())
        else {
            return false;
        };
        hmac::verify(&self.0, &message(subject, payload), &tag).is_ok()
    }
}

/// The signed bytes: the subject, a NUL (never in a subject), the payload.
fn message(subject: &str, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(subject.len() + 1 + payload.len());
    m.extend_from_slice(subject.as_bytes());
    m.push(0);
    m.extend_from_slice(payload);
    m
}

/// A fresh random team key, as 64 hex digits.
pub fn new_key_hex() -> String {
    hex::encode(rand::random::<[u8; TeamKey::LEN]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_bind_key_subject_and_payload() {
        let k = TeamKey::from_hex(&new_key_hex()).unwrap();
        let other = TeamKey::from_hex(&new_key_hex()).unwrap();
        let sig = k.sign("weir.v1.a.breaker", b"{}");
        assert!(k.verify("weir.v1.a.breaker", b"{}", &sig));
        assert!(!other.verify("weir.v1.a.breaker", b"{}", &sig), "wrong key");
        assert!(!k.verify("weir.v1.b.breaker", b"{}", &sig), "moved subject");
        assert!(
            !k.verify("weir.v1.a.breaker", b"{ }", &sig),
            "changed payload"
        );
        assert!(!k.verify("weir.v1.a.breaker", b"{}", "v1=zz"));
        assert!(!k.verify("weir.v1.a.breaker", b"{}", ""));
        assert!(TeamKey::from_hex("abc").is_none());
    }
}
