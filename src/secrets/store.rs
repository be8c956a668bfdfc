//! [`SecretStore`]: where secrets live for this run. In the OS keychain by default; without one
//! the queue refuses to take creates (and says how to fix it) unless the user opted in to
//! `[queue] credentials = "memory"`, which keeps them in this process only (queued items survive
//! a restart, their credentials do not).
//!
//! A keychain that waits for the user (a locked keyring prompting to unlock) must not hold a
//! request, a coalesced flight or a status tick forever: every call runs off the async workers
//! and is bounded by [`KEYCHAIN_TIMEOUT`].

use super::Namespace;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use weir_keychain::{Keychain, KeychainError};

/// The longest any keychain call may take.
pub const KEYCHAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a secret could not be read or written. `Display` says what happened and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the keychain did not answer within {}s (is it locked and waiting to be unlocked?)", KEYCHAIN_TIMEOUT.as_secs())]
    Timeout,
    #[error("keychain call failed: {0}")]
    Crashed(String),
    #[error("{0}. {fix}", fix = .0.fix())]
    Keychain(#[from] KeychainError),
    #[error("the in-memory secret store is unusable (a thread panicked while holding it)")]
    Poisoned,
    #[error("{reason}. {fix}")]
    Unavailable { reason: String, fix: String },
}

/// Which store this run uses (`queue.credentials` in the status document: `keychain`,
/// `memory` or `unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Keychain,
    /// Owner-only files in the data dir (no OS keychain; see [`mod@super::choose`]).
    File,
    Memory,
    /// Gateway replicas: sealed (AES-256-GCM) in the shared PostgreSQL queue.
    Sealed,
    Unavailable,
}

impl Backend {
    /// Whether what is stored here survives a restart (the OS keychain or the file store).
    pub fn is_persistent(self) -> bool {
        matches!(self, Backend::Keychain | Backend::File)
    }
}

/// The secret store of one engine.
pub enum SecretStore {
    /// The OS keychain, or the same entries as files (`Keychain::file_store`).
    Keychain(Keychain),
    Memory(Mutex<HashMap<String, String>>),
    /// No usable store: the reason and the fix, for the 503 problem.
    Unavailable {
        reason: String,
        fix: String,
    },
}

/// Runs a blocking keychain call off the async workers, bounded by [`KEYCHAIN_TIMEOUT`].
async fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, KeychainError> + Send + 'static,
) -> Result<T, SecretError> {
    match tokio::time::timeout(KEYCHAIN_TIMEOUT, tokio::task::spawn_blocking(f)).await {
        Err(_) => Err(SecretError::Timeout),
        Ok(Err(e)) => Err(SecretError::Crashed(e.to_string())),
        Ok(Ok(r)) => Ok(r?),
    }
}

impl SecretStore {
    /// The store of the install at `data_dir` under `[secrets] store = choice` (see
    /// [`mod@super::choose`]), probed. Files are announced with what they mean. `keychain` without
    /// one is an error (Weir does not start); `auto` whose file store cannot be made runs
    /// without a store (creates answer 503 with the reason), as before there was a file store.
    pub async fn open(
        data_dir: &std::path::Path,
        choice: super::StoreChoice,
        allow_memory: bool,
    ) -> Result<SecretStore, super::ChooseError> {
        let dir = data_dir.to_path_buf();
        let chosen = tokio::task::spawn_blocking(move || super::choose(&dir, choice))
            .await
            .unwrap_or(Err(super::ChooseError::NoDataDir));
        match chosen {
            Ok(super::Place::Files { dir, .. }) => {
                tracing::warn!(dir = %dir.display(), "{}", super::files_meaning(&dir));
            }
            Ok(super::Place::Keychain) => {}
            Err(super::ChooseError::Files(e)) if choice == super::StoreChoice::Auto => {
                tracing::warn!(error = %e, fix = e.fix(), "no OS keychain, and the secret files cannot be written: creates cannot be queued during outages");
                if allow_memory {
                    return Ok(SecretStore::Memory(Mutex::default()));
                }
                return Ok(SecretStore::Unavailable {
                    reason: format!(
                        "there is no OS keychain here, and the file store for credentials cannot be used ({e})"
                    ),
                    fix: e.fix().to_string(),
                });
            }
            Err(e) => return Err(e),
        }
        Ok(SecretStore::detect(&Namespace::for_data_dir(data_dir), allow_memory).await)
    }

    /// Probes the OS keychain under `namespace` (off the async workers: it blocks on D-Bus).
    /// Without one: memory when `allow_memory`, else unavailable (with the reason and fix).
    pub async fn detect(namespace: &Namespace, allow_memory: bool) -> SecretStore {
        let k = namespace.keychain();
        let probe = bounded(move || k.probe().map(|_| k)).await;
        match probe {
            Ok(k) => SecretStore::Keychain(k),
            Err(e) if allow_memory => {
                tracing::warn!(error = %e, "no keychain; replay credentials are kept in memory only ([queue] credentials = \"memory\")");
                SecretStore::Memory(Mutex::default())
            }
            Err(SecretError::Keychain(e)) => {
                tracing::warn!(error = %e, fix = e.fix(), "no keychain: creates cannot be queued during outages");
                SecretStore::Unavailable {
                    reason: e.to_string(),
                    fix: e.fix().to_string(),
                }
            }
            Err(SecretError::Timeout) => {
                let e = KeychainError::Locked {
                    detail: format!(
                        "the keychain did not answer within {}s",
                        KEYCHAIN_TIMEOUT.as_secs()
                    ),
                };
                tracing::warn!(error = %e, fix = e.fix(), "no keychain: creates cannot be queued during outages");
                SecretStore::Unavailable {
                    reason: e.to_string(),
                    fix: e.fix().to_string(),
                }
            }
            Err(e) => SecretStore::Unavailable {
                reason: format!("keychain probe crashed: {e}"),
                fix: "restart Weir".into(),
            },
        }
    }

    /// Which store this is.
    pub fn kind(&self) -> Backend {
        match self {
            SecretStore::Keychain(k) if k.file_store().is_some() => Backend::File,
            SecretStore::Keychain(_) => Backend::Keychain,
            SecretStore::Memory(_) => Backend::Memory,
            SecretStore::Unavailable { .. } => Backend::Unavailable,
        }
    }

    /// Stores `secret` for `account`, replacing any previous value.
    pub async fn put(&self, account: &str, secret: String) -> Result<(), SecretError> {
        match self {
            SecretStore::Keychain(k) => {
                let (k, a) = (k.clone(), account.to_string());
                bounded(move || k.set(&a, &secret)).await
            }
            SecretStore::Memory(m) => {
                m.lock()
                    .map_err(|_| SecretError::Poisoned)?
                    .insert(account.to_string(), secret);
                Ok(())
            }
            SecretStore::Unavailable { reason, fix } => Err(SecretError::Unavailable {
                reason: reason.clone(),
                fix: fix.clone(),
            }),
        }
    }

    /// The secret stored for `account`: `Ok(None)` only when the store says there is none.
    pub async fn get(&self, account: &str) -> Result<Option<String>, SecretError> {
        match self {
            SecretStore::Keychain(k) => {
                let (k, a) = (k.clone(), account.to_string());
                bounded(move || k.get(&a)).await
            }
            SecretStore::Memory(m) => Ok(m
                .lock()
                .map_err(|_| SecretError::Poisoned)?
                .get(account)
                .cloned()),
            SecretStore::Unavailable { reason, fix } => Err(SecretError::Unavailable {
                reason: reason.clone(),
                fix: fix.clone(),
            }),
        }
    }

    /// Called when an item ends: its credential must not outlive it. Failures are logged.
    pub async fn delete(&self, account: &str) {
        match self {
            SecretStore::Keychain(k) => {
                let (k, a) = (k.clone(), account.to_string());
                if let Err(e) = bounded(move || k.delete(&a)).await {
                    tracing::warn!(error = %e, "could not delete a credential from the keychain");
                }
            }
            SecretStore::Memory(m) => {
                if let Ok(mut m) = m.lock() {
                    m.remove(account);
                }
            }
            SecretStore::Unavailable { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_round_trips_and_unavailable_says_why() {
        let m = SecretStore::Memory(Mutex::default());
        assert_eq!(m.kind(), Backend::Memory);
        m.put("a", "1".into()).await.unwrap();
        assert_eq!(m.get("a").await.unwrap().as_deref(), Some("1"));
        m.delete("a").await;
        assert_eq!(m.get("a").await.unwrap(), None);
        let u = SecretStore::Unavailable {
            reason: "no keychain".into(),
            fix: "install one".into(),
        };
        assert_eq!(u.kind(), Backend::Unavailable);
        let e = u.put("a", "1".into()).await.unwrap_err();
        assert_eq!(e.to_string(), "no keychain. install one");
        assert!(u.get("a").await.is_err());
    }
}
