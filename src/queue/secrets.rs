//! Replay credentials. In the OS keychain by default; if there is none, Weir refuses to queue
//! (and says how to fix it) unless the user opted in to `[queue] credentials = "memory"`, which
//! keeps them in this process only (queued items survive a restart, their credentials do not).

use std::collections::HashMap;
use std::sync::Mutex;
use weir_keychain::Keychain;

pub const SERVICE: &str = "weir";

/// A keychain that waits for the user (a locked keyring prompting to unlock) must not hold a
/// request, a coalesced flight or a status tick forever.
const KEYCHAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs a blocking keychain call off the async workers, bounded by [`KEYCHAIN_TIMEOUT`].
async fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, weir_keychain::KeychainError> + Send + 'static,
) -> Result<T, String> {
    match tokio::time::timeout(KEYCHAIN_TIMEOUT, tokio::task::spawn_blocking(f)).await {
        Err(_) => Err(format!(
            "the keychain did not answer within {}s (is it locked and waiting to be unlocked?)",
            KEYCHAIN_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("keychain call failed: {e}")),
        Ok(Ok(Err(e))) => Err(format!("{e}. {}", e.fix())),
        Ok(Ok(Ok(v))) => Ok(v),
    }
}

pub enum Secrets {
    Keychain(Keychain),
    Memory(Mutex<HashMap<String, String>>),
    /// No usable store: the reason and the fix, for the 503 problem.
    Unavailable {
        reason: String,
        fix: String,
    },
}

impl Secrets {
    /// Probes the OS keychain (off the async workers: it blocks on D-Bus).
    pub async fn detect(allow_memory: bool) -> Secrets {
        let probe = tokio::time::timeout(
            KEYCHAIN_TIMEOUT,
            tokio::task::spawn_blocking(|| {
                let k = Keychain::new(SERVICE);
                k.probe().map(|_| k)
            }),
        )
        .await
        .unwrap_or_else(|_| {
            Ok(Err(weir_keychain::KeychainError::Locked {
                detail: "the keychain did not answer within 5s".into(),
            }))
        });
        match probe {
            Ok(Ok(k)) => Secrets::Keychain(k),
            Ok(Err(e)) if allow_memory => {
                tracing::warn!(error = %e, "no keychain; replay credentials are kept in memory only ([queue] credentials = \"memory\")");
                Secrets::Memory(Mutex::default())
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, fix = e.fix(), "no keychain: creates cannot be queued during outages");
                Secrets::Unavailable {
                    reason: e.to_string(),
                    fix: e.fix().to_string(),
                }
            }
            Err(e) => Secrets::Unavailable {
                reason: format!("keychain probe crashed: {e}"),
                fix: "restart Weir".into(),
            },
        }
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Secrets::Keychain(_) => "keychain",
            Secrets::Memory(_) => "memory",
            Secrets::Unavailable { .. } => "unavailable",
        }
    }

    pub async fn put(&self, account: &str, secret: String) -> Result<(), String> {
        match self {
            Secrets::Keychain(k) => {
                let (k, a) = (Keychain::new(k.service()), account.to_string());
                bounded(move || k.set(&a, &secret)).await
            }
            Secrets::Memory(m) => {
                m.lock()
                    .map_err(|e| e.to_string())?
                    .insert(account.to_string(), secret);
                Ok(())
            }
            Secrets::Unavailable { reason, fix } => Err(format!("{reason}. {fix}")),
        }
    }

    pub async fn get(&self, account: &str) -> Result<Option<String>, String> {
        match self {
            Secrets::Keychain(k) => {
                let (k, a) = (Keychain::new(k.service()), account.to_string());
                bounded(move || k.get(&a)).await
            }
            Secrets::Memory(m) => Ok(m.lock().map_err(|e| e.to_string())?.get(account).cloned()),
            Secrets::Unavailable { reason, .. } => Err(reason.clone()),
        }
    }

    /// Called when an item ends: its credential must not outlive it.
    pub async fn delete(&self, account: &str) {
        match self {
            Secrets::Keychain(k) => {
                let (k, a) = (Keychain::new(k.service()), account.to_string());
                if let Err(e) = bounded(move || k.delete(&a)).await {
                    tracing::warn!(error = %e, "could not delete a credential from the keychain");
                }
            }
            Secrets::Memory(m) => {
                if let Ok(mut m) = m.lock() {
                    m.remove(account);
                }
            }
            Secrets::Unavailable { .. } => {}
        }
    }
}
