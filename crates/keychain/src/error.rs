//! Why a keychain call failed, in the terms a person can act on.
//!
//! Every variant carries a `detail` built from the platform's error code and message; secrets
//! are never part of it (the backends do not echo them, and undecodable stored bytes are
//! reported by length only).

use crate::platform;

/// A keychain failure. `Display` says what happened; [`KeychainError::fix`] says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeychainError {
    /// There is no keychain to talk to: no D-Bus session bus, no Secret Service provider on it,
    /// or (macOS/Windows) no user keychain for this session.
    #[error("no OS keychain is available: {detail}")]
    NoService { detail: String },
    /// The keychain exists but is locked (or has no default keyring that could be unlocked).
    #[error("the OS keychain is locked: {detail}")]
    Locked { detail: String },
    /// The keychain refused this program, or the user dismissed its prompt.
    #[error("the OS keychain denied access: {detail}")]
    AccessDenied { detail: String },
    /// Anything else: a protocol, encoding or platform failure.
    #[error("OS keychain error: {detail}")]
    Other { detail: String },
    /// The file store (no OS keychain) could not read or write its files.
    #[error("secret file store error: {detail}")]
    File { detail: String },
    /// The file store could not write because its disk is full (or the user is over quota):
    /// a fix about ownership and modes would send a person the wrong way.
    #[error("secret file store error: {detail}")]
    FileNoSpace { detail: String },
}

impl KeychainError {
    /// A file store's I/O failure, as `cannot {action} {path}: {e}`: a full disk or quota is
    /// [`KeychainError::FileNoSpace`] (its fix is to free space), anything else
    /// [`KeychainError::File`] (its fix is the folder's owner and modes).
    pub fn file_io(action: &str, path: &std::path::Path, e: &std::io::Error) -> KeychainError {
        let detail = format!("cannot {action} {}: {e}", path.display());
        match e.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                KeychainError::FileNoSpace { detail }
            }
            _ => KeychainError::File { detail },
        }
    }

    /// A stable machine-readable code, e.g. for an RFC 9457 problem `type` or a UI string key.
    pub fn code(&self) -> &'static str {
        match self {
            KeychainError::NoService { .. } => "keychain_unavailable",
            KeychainError::Locked { .. } => "keychain_locked",
            KeychainError::AccessDenied { .. } => "keychain_access_denied",
            KeychainError::Other { .. } => "keychain_error",
            KeychainError::File { .. } => "secret_file_error",
            KeychainError::FileNoSpace { .. } => "secret_file_no_space",
        }
    }

    /// What the platform reported.
    pub fn detail(&self) -> &str {
        match self {
            KeychainError::NoService { detail }
            | KeychainError::Locked { detail }
            | KeychainError::AccessDenied { detail }
            | KeychainError::Other { detail }
            | KeychainError::File { detail }
            | KeychainError::FileNoSpace { detail } => detail,
        }
    }

    /// What a person can do about it on this platform.
    pub fn fix(&self) -> &'static str {
        match self {
            KeychainError::NoService { .. } => platform::FIX_NO_SERVICE,
            KeychainError::Locked { .. } => platform::FIX_LOCKED,
            KeychainError::AccessDenied { .. } => platform::FIX_DENIED,
            KeychainError::Other { .. } => {
                "Retry; if it keeps failing, restart the keychain service (or log out and in) and \
                 report the detail above."
            }
            KeychainError::File { .. } => {
                "Check that Weir's data directory belongs to you and is writable: its `secrets` \
                 folder must be yours (0700) and the files in it 0600."
            }
            KeychainError::FileNoSpace { .. } => {
                "The disk holding Weir's data directory is full (or you are over your quota): \
                 free space there, or run Weir with `--data-dir` on a disk with room; then retry."
            }
        }
    }

    pub(crate) fn other(detail: impl Into<String>) -> Self {
        KeychainError::Other {
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_code_and_a_fix() {
        let all = [
            KeychainError::NoService { detail: "d".into() },
            KeychainError::Locked { detail: "d".into() },
            KeychainError::AccessDenied { detail: "d".into() },
            KeychainError::Other { detail: "d".into() },
            KeychainError::File { detail: "d".into() },
            KeychainError::FileNoSpace { detail: "d".into() },
        ];
        let codes: std::collections::HashSet<_> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len(), "codes must be distinct");
        for e in &all {
            assert!(e.fix().len() > 20, "{e}: fix too short");
            assert_eq!(e.detail(), "d");
            assert!(e.to_string().ends_with(": d"));
        }
    }
}
