//! The platform seam: which keyring backend an entry uses and how its errors are classified.
//! Only this module and its children contain `cfg(target_os)` code.

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
compile_error!(
    "weir-keychain supports Linux (Secret Service), macOS and Windows only; other targets would \
     fall back to keyring's in-memory mock store and lose queued credentials"
);

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;

#[cfg(any(target_os = "macos", target_os = "windows"))]
mod native;
#[cfg(any(target_os = "macos", target_os = "windows"))]
use native as imp;

pub(crate) use imp::{entry, worth_asking_again_inner, FIX_DENIED, FIX_LOCKED, FIX_NO_SERVICE};

use crate::KeychainError;

/// Maps a keyring error (other than `NoEntry`, which callers turn into `None`/`Ok`) to ours.
pub(crate) fn classify(err: keyring::Error) -> KeychainError {
    match err {
        keyring::Error::NoStorageAccess(inner) => imp::classify_no_access(inner.as_ref()),
        keyring::Error::PlatformFailure(inner) => imp::classify_platform(inner.as_ref()),
        // The payload is the stored secret itself: report its length only.
        keyring::Error::BadEncoding(bytes) => KeychainError::other(format!(
            "the stored entry is not UTF-8 text ({} bytes)",
            bytes.len()
        )),
        keyring::Error::TooLong(attr, limit) => KeychainError::other(format!(
            "'{attr}' is longer than the platform limit of {limit}"
        )),
        keyring::Error::Invalid(attr, reason) => {
            KeychainError::other(format!("'{attr}' is invalid: {reason}"))
        }
        keyring::Error::Ambiguous(found) => KeychainError::other(format!(
            "{} keychain entries match this account; remove the duplicates",
            found.len()
        )),
        keyring::Error::NoEntry => KeychainError::other("no such keychain entry"),
        // keyring's error is non_exhaustive. Its Display carries no secret.
        other => KeychainError::other(other.to_string()),
    }
}

/// Whether a failed call may succeed on a fresh connection, so that it is worth one more try:
/// the service was not reachable (a daemon restarting), or it lost the session the call had
/// just opened. Anything else (locked, denied, bad data) would fail the same way again.
pub(crate) fn worth_asking_again(err: &keyring::Error) -> bool {
    match err {
        keyring::Error::NoStorageAccess(inner) | keyring::Error::PlatformFailure(inner) => {
            worth_asking_again_inner(inner.as_ref())
        }
        _ => false,
    }
}
