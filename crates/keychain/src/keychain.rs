//! [`Keychain`]: the entries of one service name (e.g. "weir") in the OS keychain, one per
//! account (the credential reference the queue database stores).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::{platform, KeychainError, Secret};

/// Handle on one service's entries. Cheap to clone; holds no connection (each call opens its
/// own, which is what keyring does and what keeps a restarted keyring daemon from breaking us).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keychain {
    service: String,
}

impl Keychain {
    /// Entries are stored under `service` (e.g. "weir", or a per-test name).
    pub fn new(service: &str) -> Self {
        Keychain {
            service: service.to_owned(),
        }
    }

    /// The service name entries are stored under.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Stores `secret` for `account`, replacing any previous value.
    pub fn set(&self, account: &str, secret: &str) -> Result<(), KeychainError> {
        let entry = platform::entry(&self.service, account)?;
        entry.set_password(secret).map_err(platform::classify)?;
        tracing::debug!(service = %self.service, account, "keychain entry stored");
        Ok(())
    }

    /// The secret stored for `account`, or `None` if there is none.
    pub fn get(&self, account: &str) -> Result<Option<String>, KeychainError> {
        Ok(self.get_secret(account)?.map(Secret::into_inner))
    }

    /// Like [`Keychain::get`], wrapped so it is wiped on drop and never printed.
    pub fn get_secret(&self, account: &str) -> Result<Option<Secret>, KeychainError> {
        let entry = platform::entry(&self.service, account)?;
        match entry.get_password() {
            Ok(value) => Ok(Some(Secret::new(value))),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(platform::classify(e)),
        }
    }

    /// Removes the entry for `account`. Removing an entry that does not exist succeeds, so a
    /// retried clean-up after a crash is harmless.
    pub fn delete(&self, account: &str) -> Result<(), KeychainError> {
        let entry = platform::entry(&self.service, account)?;
        match entry.delete_credential() {
            Ok(()) => {
                tracing::debug!(service = %self.service, account, "keychain entry deleted");
                Ok(())
            }
            Err(keyring::Error::NoEntry) => Ok(()),
            Err(e) => Err(platform::classify(e)),
        }
    }

    /// Writes, reads back and deletes a throwaway entry: `Ok` means the keychain can hold
    /// Weir's credentials right now. Run it at start-up so a missing or locked keychain is
    /// reported before a create has to be queued.
    pub fn probe(&self) -> Result<(), KeychainError> {
        // Unique per call so that concurrent probes (two Weir processes) do not collide.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let account = format!("weir-probe-{}-{nanos}", std::process::id());
        let value = format!("probe-{nanos}");
        self.set(&account, &value)?;
        let read = self.get_secret(&account);
        // Clean up whatever the read said; a failed delete is the more useful error only if
        // the read itself was fine.
        let deleted = self.delete(&account);
        match read? {
            Some(v) if v.expose() == value => deleted,
            Some(_) => Err(KeychainError::other(
                "the keychain returned a different value than was written",
            )),
            None => Err(KeychainError::other(
                "the keychain accepted an entry but did not return it",
            )),
        }
    }
}
