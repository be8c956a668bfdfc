//! macOS (Keychain Services) and Windows (Credential Manager) through keyring's native backends.
//! These are compiled only on their own targets; keep this file small and free of platform APIs
//! beyond keyring's.

use crate::KeychainError;

#[cfg(target_os = "macos")]
pub(crate) const FIX_NO_SERVICE: &str = "Weir could not open your login keychain. Run Weir from \
your logged-in user session (over SSH, run `security unlock-keychain` first) and check that \
~/Library/Keychains/login.keychain-db exists (Keychain Access > First Aid).";
#[cfg(target_os = "windows")]
pub(crate) const FIX_NO_SERVICE: &str = "Weir could not open Windows Credential Manager. Run \
Weir as your own logged-in user (not a service account without a loaded profile).";

#[cfg(target_os = "macos")]
pub(crate) const FIX_LOCKED: &str = "Unlock your login keychain in Keychain Access, or run \
`security unlock-keychain ~/Library/Keychains/login.keychain-db`.";
#[cfg(target_os = "windows")]
pub(crate) const FIX_LOCKED: &str = "Log in to Windows interactively so your credential vault \
is available, then retry.";

#[cfg(target_os = "macos")]
pub(crate) const FIX_DENIED: &str = "macOS denied Weir access to the keychain item. Choose \
'Always Allow' when asked, or add weir under the item's Access Control in Keychain Access.";
#[cfg(target_os = "windows")]
pub(crate) const FIX_DENIED: &str = "Windows denied access to the credential. Run Weir as the \
user who stored it.";

/// keyring's default builder on these targets is the native store (the features in Cargo.toml
/// select it; without them the mock would be used, which the compile-time check in
/// `platform/mod.rs` cannot see, so keep those features).
pub(crate) fn entry(service: &str, account: &str) -> keyring::Result<keyring::Entry> {
    keyring::Entry::new(service, account)
}

/// The native stores are in-process APIs with no connection to lose: nothing is asked twice.
pub(crate) fn worth_asking_again_inner(_inner: &(dyn std::error::Error + 'static)) -> bool {
    false
}

/// keyring reports locked keychains and refused prompts as `NoStorageAccess`; it does not
/// expose the OS status code portably, so both become `Locked` with the OS message as detail.
pub(crate) fn classify_no_access(inner: &(dyn std::error::Error + 'static)) -> KeychainError {
    KeychainError::Locked {
        detail: inner.to_string(),
    }
}

pub(crate) fn classify_platform(inner: &(dyn std::error::Error + 'static)) -> KeychainError {
    KeychainError::Other {
        detail: inner.to_string(),
    }
}
