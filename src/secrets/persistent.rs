//! Keys made once per install and kept in the keychain (the control secret, the identity key).
//!
//! A stored key is replaced only when the keychain answers that there is no entry (first run)
//! or that the entry is unreadable garbage. A transient failure (a locked keyring, a timeout, a
//! D-Bus hiccup) gives a per-run value and a warning, and the stored key is left alone: writing
//! a new one then would silently change every cache key and log the CLI out of the control API.

use super::{Account, SecretError, SecretStore};

/// What to do with what the keychain answered for a per-install key.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan<T> {
    /// The stored key.
    Use(T),
    /// Make a key and store it. `replaces_garbage`: an unreadable entry is overwritten.
    Create { replaces_garbage: bool },
    /// Use a key for this run only and store nothing; the reason is logged.
    PerRun(String),
}

/// The decision, from the keychain's answer and the key's decoder.
pub fn plan<T>(
    read: Result<Option<String>, SecretError>,
    decode: impl Fn(&str) -> Option<T>,
) -> Plan<T> {
    match read {
        Ok(Some(text)) => match decode(&text) {
            Some(v) => Plan::Use(v),
            None => Plan::Create {
                replaces_garbage: true,
            },
        },
        Ok(None) => Plan::Create {
            replaces_garbage: false,
        },
        Err(e) => Plan::PerRun(e.to_string()),
    }
}

impl SecretStore {
    /// The key kept for `account`, created (by `generate`) and stored when there is none. Only
    /// the keychain persists such keys: with any other store the key is per run.
    pub async fn load_or_create<T>(
        &self,
        account: Account,
        generate: impl FnOnce() -> T,
        encode: impl Fn(&T) -> String,
        decode: impl Fn(&str) -> Option<T>,
    ) -> T {
        if !matches!(self, SecretStore::Keychain(_)) {
            return generate();
        }
        match plan(self.get(account.as_str()).await, decode) {
            Plan::Use(v) => v,
            Plan::PerRun(why) => {
                tracing::warn!(account = %account, error = %why, "cannot read a per-install key from the keychain; using one for this run only (the stored one is kept)");
                generate()
            }
            Plan::Create { replaces_garbage } => {
                if replaces_garbage {
                    tracing::warn!(account = %account, "the stored per-install key is unreadable; replacing it");
                }
                let v = generate();
                if let Err(e) = self.put(account.as_str(), encode(&v)).await {
                    tracing::warn!(account = %account, error = %e, "cannot store a per-install key in the keychain; it is valid for this run only");
                }
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(s: &str) -> Option<u32> {
        s.trim().parse().ok()
    }

    #[test]
    fn only_no_entry_or_garbage_creates_a_key() {
        assert_eq!(plan(Ok(Some("7".into())), number), Plan::Use(7));
        assert_eq!(
            plan(Ok(None), number),
            Plan::Create {
                replaces_garbage: false
            }
        );
        assert_eq!(
            plan(Ok(Some("x".into())), number),
            Plan::Create {
                replaces_garbage: true
            }
        );
    }

    #[test]
    fn a_transient_error_never_overwrites() {
        for e in [
            SecretError::Timeout,
            SecretError::Keychain(weir_keychain::KeychainError::Locked {
                detail: "locked".into(),
            }),
            SecretError::Crashed("panic".into()),
        ] {
            assert!(matches!(plan(Err(e), number), Plan::PerRun(_)));
        }
    }

    #[tokio::test]
    async fn non_keychain_stores_make_per_run_keys() {
        let m = SecretStore::Memory(std::sync::Mutex::default());
        let v = m
            .load_or_create(Account::ControlSecret, || 5u32, u32::to_string, number)
            .await;
        assert_eq!(v, 5);
        assert_eq!(m.get("control-secret").await.unwrap(), None);
    }
}
