//! Replay credentials for a shared (PostgreSQL) queue: every replica must be able to replay any
//! item, so the credential is stored in the database, sealed with AES-256-GCM (`ring::aead`)
//! under a key derived from the gateway's shared secret file, which every replica gets from its
//! secret store and which is never in the database or the config file.
//!
//! Each credential has its own random 96-bit nonce; its keychain-style account name is the
//! associated data, so a sealed value moved to another item's row does not open. `key_id` (a
//! hash of the key, not the key) tells a replica with the wrong key apart from a damaged row.

use super::pg::PgConn;
use crate::secrets::SecretError;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::sync::Arc;

/// The 32-byte secret every replica of one gateway shares, and the keys derived from it.
#[derive(Clone)]
pub struct GatewayKey {
    secret: [u8; 32],
}

impl std::fmt::Debug for GatewayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewayKey(..)")
    }
}

impl GatewayKey {
    pub fn new(secret: [u8; 32]) -> GatewayKey {
        GatewayKey { secret }
    }

    /// A sub-key for one purpose (HKDF-SHA256, the purpose as `info`).
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        struct Len32;
        impl ring::hkdf::KeyType for Len32 {
            fn len(&self) -> usize {
                32
            }
        }
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"weir gateway v1");
        let prk = salt.extract(&self.secret);
        let info = [purpose.as_bytes()];
        let mut out = [0u8; 32];
        // Both calls only fail for an output longer than 255 hash lengths; 32 bytes never is.
        if let Ok(okm) = prk.expand(&info, Len32) {
            let _ = okm.fill(&mut out);
        }
        out
    }

    /// The identity key: the same on every replica, so one caller's cache, dedupe and queue
    /// keys are the same whichever replica the load balancer picks.
    pub fn identity_key(&self) -> [u8; 32] {
        self.derive("identity key")
    }
}

/// Sealed credentials in `weir_queue_credentials`.
pub(crate) struct SealedVault {
    conn: Arc<PgConn>,
    key: LessSafeKey,
    key_id: String,
    rng: SystemRandom,
}

impl SealedVault {
    pub fn new(conn: Arc<PgConn>, key: &GatewayKey) -> SealedVault {
        let k = key.derive("queue credentials");
        let key_id = hex::encode(&blake3::hash(&k).as_bytes()[..8]);
        let unbound = UnboundKey::new(&AES_256_GCM, &k)
            .unwrap_or_else(|_| unreachable!("AES-256-GCM takes a 32-byte key"));
        SealedVault {
            conn,
            key: LessSafeKey::new(unbound),
            key_id,
            rng: SystemRandom::new(),
        }
    }

    fn seal(&self, account: &str, plain: &str) -> Result<Vec<u8>, SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| unavailable("no random numbers for a nonce"))?;
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(account.as_bytes()),
                &mut data,
            )
            .map_err(|_| unavailable("sealing the credential failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(out)
    }

    fn open(&self, account: &str, sealed: &[u8]) -> Option<String> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut data = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(account.as_bytes()), &mut data)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }

    pub async fn put(&self, account: &str, secret: String) -> Result<(), SecretError> {
        let sealed = self.seal(account, &secret)?;
        let now = super::now_ms();
        self.conn
            .execute(
                "INSERT INTO weir_queue_credentials (account, sealed, key_id, updated_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (account) DO UPDATE
                   SET sealed = EXCLUDED.sealed, key_id = EXCLUDED.key_id,
                       updated_at = EXCLUDED.updated_at",
                &[&account, &sealed, &self.key_id, &now],
            )
            .await
            .map(|_| ())
            .map_err(|e| unavailable(&format!("{}. {}", e, e.fix())))
    }

    /// `Ok(None)` only when there is no row; a row this replica cannot open is an error (the
    /// replay waits: another replica, or this one with the right key, may still send it).
    pub async fn get(&self, account: &str) -> Result<Option<String>, SecretError> {
        let row = self
            .conn
            .query_opt(
                "SELECT sealed, key_id FROM weir_queue_credentials WHERE account = $1",
                &[&account],
            )
            .await
            .map_err(|e| unavailable(&format!("{}. {}", e, e.fix())))?;
        let Some(row) = row else { return Ok(None) };
        let sealed: Vec<u8> = row.get(0);
        let key_id: String = row.get(1);
        match self.open(account, &sealed) {
            Some(s) => Ok(Some(s)),
            None if key_id != self.key_id => Err(SecretError::Unavailable {
                reason: format!("the replay credential was sealed with another gateway key (key id {key_id}, this replica has {})", self.key_id),
                fix: "give every replica the same gateway.secret_key_file".into(),
            }),
            None => Err(unavailable("the sealed credential does not open (damaged or moved row)")),
        }
    }

    pub async fn delete(&self, account: &str) {
        if let Err(e) = self
            .conn
            .execute(
                "DELETE FROM weir_queue_credentials WHERE account = $1",
                &[&account],
            )
            .await
        {
            tracing::warn!(error = %e, "could not delete a sealed replay credential");
        }
    }
}

fn unavailable(reason: &str) -> SecretError {
    SecretError::Unavailable {
        reason: reason.to_string(),
        fix: "check the gateway's PostgreSQL connection".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vault(secret: u8) -> SealedVault {
        let conn = Arc::new(PgConn::new(
            tokio_postgres::Config::new(),
            crate::queue::pg::PgTls::Plain,
        ));
        SealedVault::new(conn, &GatewayKey::new([secret; 32]))
    }

    #[test]
    fn a_sealed_credential_opens_only_with_its_key_and_its_account() {
        let v = vault(7);
        let sealed = v.seal("acct-1", "token abc").unwrap();
        assert!(!sealed.windows(9).any(|w| w == b"token abc"));
        assert_eq!(v.open("acct-1", &sealed).as_deref(), Some("token abc"));
        assert_eq!(v.open("acct-2", &sealed), None);
        assert_eq!(vault(8).open("acct-1", &sealed), None);
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(v.open("acct-1", &flipped), None);
    }

    #[test]
    fn purposes_get_different_keys() {
        let k = GatewayKey::new([1; 32]);
        assert_ne!(k.derive("queue credentials"), k.identity_key());
        assert_eq!(k.identity_key(), GatewayKey::new([1; 32]).identity_key());
    }
}
