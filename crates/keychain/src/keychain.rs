//! [`Keychain`]: the entries of one service name (e.g. "weir") in the OS keychain, one per
//! account (the credential reference the queue database stores), or the same entries as files
//! ([`FileStore`]) on a machine without a keychain. Callers see one interface either way.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{platform, FileStore, KeychainError, Secret};

/// Handle on one service's entries. Cheap to clone; holds no connection (each call opens its
/// own, which is what keyring does and what keeps a restarted keyring daemon from breaking us).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keychain {
    service: String,
    place: Place,
}

/// Where the entries live.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Os,
    Files(FileStore),
}

impl Keychain {
    /// Entries are stored under `service` (e.g. "weir", or a per-test name) in the OS keychain.
    pub fn new(service: &str) -> Self {
        Keychain {
            service: service.to_owned(),
            place: Place::Os,
        }
    }

    /// The entries of `service` kept as owner-only files in `dir` (no OS keychain is asked).
    pub fn in_files(service: &str, dir: &Path) -> Self {
        Keychain {
            service: service.to_owned(),
            place: Place::Files(FileStore::new(dir)),
        }
    }

    /// The service name entries are stored under.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The file store, when the entries are files rather than OS keychain entries.
    pub fn file_store(&self) -> Option<&FileStore> {
        match &self.place {
            Place::Os => None,
            Place::Files(f) => Some(f),
        }
    }

    /// Stores `secret` for `account`, replacing any previous value.
    pub fn set(&self, account: &str, secret: &str) -> Result<(), KeychainError> {
        if let Place::Files(f) = &self.place {
            return f.set(account, secret);
        }
        once_more_if_gone(|| platform::entry(&self.service, account)?.set_password(secret))?;
        tracing::debug!(service = %self.service, account, "keychain entry stored");
        Ok(())
    }

    /// The secret stored for `account`, or `None` if there is none.
    pub fn get(&self, account: &str) -> Result<Option<String>, KeychainError> {
        Ok(self.get_secret(account)?.map(Secret::into_inner))
    }

    /// Like [`Keychain::get`], wrapped so it is wiped on drop and never printed.
    pub fn get_secret(&self, account: &str) -> Result<Option<Secret>, KeychainError> {
        if let Place::Files(f) = &self.place {
            return f.get_secret(account);
        }
        once_more_if_gone(
            || match platform::entry(&self.service, account)?.get_password() {
                Ok(value) => Ok(Some(Secret::new(value))),
                Err(keyring::Error::NoEntry) => Ok(None),
                Err(e) => Err(e),
            },
        )
    }

    /// Removes the entry for `account`. Removing an entry that does not exist succeeds, so a
    /// retried clean-up after a crash is harmless.
    pub fn delete(&self, account: &str) -> Result<(), KeychainError> {
        if let Place::Files(f) = &self.place {
            return f.delete(account);
        }
        once_more_if_gone(
            || match platform::entry(&self.service, account)?.delete_credential() {
                Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
                Err(e) => Err(e),
            },
        )?;
        tracing::debug!(service = %self.service, account, "keychain entry deleted");
        Ok(())
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

/// How long to wait before asking a keychain that was not there a second time.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Runs `op` again, once, when the keychain service was not reachable or dropped the call's
/// session ([`platform::worth_asking_again`]). gnome-keyring 42 aborts on an upstream race when
/// clients connect and disconnect quickly (GNOME/gnome-keyring#196), and the desktop's systemd
/// unit or D-Bus activation starts it again within milliseconds; under many parallel callers it
/// also answers "The session wrapping the secret does not exist" for a session the same call
/// opened a moment before. Neither should turn into "no keychain" or a refused create for the
/// user. Every operation here is idempotent (set replaces, delete of a missing entry succeeds)
/// and each try opens its own connection and session, so a second try is safe; a keychain that
/// is really absent costs one more quick failure.
fn once_more_if_gone<T>(op: impl Fn() -> Result<T, keyring::Error>) -> Result<T, KeychainError> {
    once_more_if(op, platform::worth_asking_again).map_err(platform::classify)
}

fn once_more_if<T, E>(op: impl Fn() -> Result<T, E>, again: impl Fn(&E) -> bool) -> Result<T, E> {
    match op() {
        Err(e) if again(&e) => {
            tracing::debug!("keychain not reachable or its session was dropped; asking once more");
            std::thread::sleep(RETRY_AFTER);
            op()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn run(results: &[Result<u8, KeychainError>]) -> (Result<u8, KeychainError>, usize) {
        let calls = Cell::new(0);
        let out = once_more_if(
            || {
                let i = calls.get();
                calls.set(i + 1);
                results[i].clone()
            },
            |e| matches!(e, KeychainError::NoService { .. }),
        );
        (out, calls.get())
    }

    fn gone() -> Result<u8, KeychainError> {
        Err(KeychainError::NoService {
            detail: "NoReply".into(),
        })
    }

    #[test]
    fn a_vanished_service_is_asked_once_more_and_only_once() {
        let (out, calls) = run(&[gone(), Ok(7)]);
        assert_eq!((out.unwrap(), calls), (7, 2));
        let (out, calls) = run(&[gone(), gone(), Ok(7)]);
        assert_eq!(
            (out.unwrap_err().code(), calls),
            ("keychain_unavailable", 2)
        );
    }

    #[test]
    fn other_errors_are_not_retried() {
        let locked = Err(KeychainError::Locked {
            detail: "locked".into(),
        });
        let (out, calls) = run(&[locked, Ok(7)]);
        assert_eq!((out.unwrap_err().code(), calls), ("keychain_locked", 1));
    }
}
