//! The team's secrets, kept in the keychain (`weir team set-key`, `weir team
//! set-credentials`): the team key that signs facts, and the NATS user/password or token.
//! Never in the config file, never logged, never published.

use super::seal::TeamKey;
use crate::secrets::{Account, SecretStore};
use serde::{Deserialize, Serialize};

/// How this Weir logs in to the NATS server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NatsAuth {
    Token { token: String },
    UserPassword { user: String, password: String },
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuth::Token { .. } => f.write_str("NatsAuth::Token(..)"),
            NatsAuth::UserPassword { user, .. } => write!(f, "NatsAuth::UserPassword({user}, ..)"),
        }
    }
}

impl NatsAuth {
    /// As stored in the keychain (JSON).
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn decode(s: &str) -> Option<NatsAuth> {
        serde_json::from_str(s).ok()
    }
}

/// The team key and the NATS login; either may be missing.
#[derive(Debug, Clone, Default)]
pub struct TeamSecrets {
    pub key: Option<TeamKey>,
    pub auth: Option<NatsAuth>,
}

impl TeamSecrets {
    /// Reads both from the store (the keychain in a normal run). A missing or unreadable entry
    /// is `None`; the caller says what is missing.
    #[cfg_attr(not(feature = "team"), allow(dead_code))]
    pub(crate) async fn load(store: &SecretStore) -> TeamSecrets {
        let key = match store.get(Account::TeamKey.as_str()).await {
            Ok(Some(s)) => {
                let k = TeamKey::from_hex(&s);
                if k.is_none() {
                    tracing::warn!("the team key in the keychain is not 64 hex digits; run `weir team set-key` again");
                }
                k
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the team key from the keychain");
                None
            }
        };
        let auth = match store.get(Account::TeamCredentials.as_str()).await {
            Ok(Some(s)) => NatsAuth::decode(&s),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the NATS credentials from the keychain");
                None
            }
        };
        TeamSecrets { key, auth }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_round_trips_and_debug_hides_secrets() {
        let a = NatsAuth::UserPassword {
            user: "weir".into(),
            password: "hunter2".into(),
        };
        assert_eq!(NatsAuth::decode(&a.encode()), Some(a.clone()));
        assert!(!format!("{a:?}").contains("hunter2"));
        let t = NatsAuth::Token {
            token: "s3cr3t".into(),
        };
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert_eq!(NatsAuth::decode("garbage"), None);
    }
}
