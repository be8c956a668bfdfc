//! What the engine reads from (or first creates in) the secret store at start: the control
//! secret, the install id, the identity key, and the optional parts' own secrets through their
//! hooks.

use super::{gateway, team, EngineError, EngineOptions};
use crate::identity::IdentityKey;
use crate::secrets::{Account, SecretStore};

/// What is read from the secret store at start.
pub(super) struct Keys {
    pub secrets: SecretStore,
    pub secret: String,
    pub install_id: String,
    /// The team key and NATS login, with `[team]` (feature `team`).
    pub team: Option<crate::team::TeamSecrets>,
    /// The gateway's admin token, in gateway mode (feature `gateway`).
    pub admin_token: Option<String>,
}

impl Keys {
    pub async fn load(opts: &EngineOptions) -> Result<Keys, EngineError> {
        let secrets = SecretStore::open(
            &opts.data_dir,
            opts.settings.secrets_store,
            opts.settings.queue.memory_credentials,
        )
        .await?;
        let secret = match opts.control_secret.clone() {
            Some(s) => s,
            None => control_secret(&secrets).await,
        };
        let install_id = install_id(&secrets).await;
        let team = team::secrets(opts, &secrets).await;
        let admin_token = gateway::admin_token(opts, &secrets).await?;
        Ok(Keys {
            secrets,
            secret,
            install_id,
            team,
            admin_token,
        })
    }
}

/// A fresh random control secret (32 bytes, hex).
pub fn new_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// The per-install control secret: kept in the keychain so the CLI and tray can read it; a
/// random per-run secret when there is no keychain or it cannot be read right now. Read
/// trimmed, as the other keys are: a file-store secret saved by an editor or `echo` ends in a
/// newline, which no `X-Weir-Secret` header can carry (every control call was refused, the
/// CLI's too).
async fn control_secret(secrets: &SecretStore) -> String {
    secrets
        .load_or_create(
            Account::ControlSecret,
            new_secret,
            |s: &String| s.clone(),
            |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        )
        .await
}

/// The install id `/_weir/api/health` answers (not a secret): kept in the keychain with the
/// control secret, so the CLI can tell this install's Weir from anything else on the port.
async fn install_id(secrets: &SecretStore) -> String {
    secrets
        .load_or_create(
            Account::InstallId,
            || hex::encode(rand::random::<[u8; 16]>()),
            |s: &String| s.clone(),
            |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        )
        .await
}

/// The per-install identity key, kept in the keychain so cache/dedupe keys (and a queued
/// create's dedupe key) stay the same across restarts; per-run random without a keychain.
pub(super) async fn identity_key(secrets: &SecretStore) -> IdentityKey {
    let key = secrets
        .load_or_create(
            Account::IdentityKey,
            rand::random::<[u8; 32]>,
            |k: &[u8; 32]| hex::encode(k),
            |s: &str| {
                hex::decode(s.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
            },
        )
        .await;
    IdentityKey::new(key)
}
