//! weir-keychain: the OS keychain holds the credentials a queued create needs for its replay; the
//! queue database only stores a reference (the account name).
//!
//! # Layout
//! - [`keychain`]: [`Keychain`], set/get/delete/probe of one service's entries, in the OS
//!   keychain or (for machines without one) in a [`FileStore`].
//! - [`mod@file`]: [`FileStore`], owner-only files written atomically.
//! - [`error`]: [`KeychainError`], what went wrong and what a person can do about it.
//! - [`secret`]: [`Secret`], a string that is zeroised on drop and never printed.
//! - `platform`: the only `cfg(target_os)` code: which backend an entry uses and how its
//!   errors are classified.
//!
//! # Tests
//! The integration tests use the real Secret Service. Run them with
//! `scripts/with-keychain.sh cargo test -p weir-keychain`, which provides a private D-Bus
//! session and an unlocked throwaway gnome-keyring (apt packages `dbus-x11 gnome-keyring
//! libsecret-tools`). Without a usable keychain they fail, naming the fix; set
//! `WEIR_SKIP_KEYCHAIN_TESTS=1` to skip them deliberately (e.g. on a CI runner without
//! gnome-keyring). `tests/no_service.rs` needs nothing and always runs.
//!
//! All calls block (D-Bus, Security.framework, Credential Manager): call them from
//! `tokio::task::spawn_blocking`, not from an async worker.

pub mod error;
pub mod file;
pub mod keychain;
mod platform;
pub mod secret;

pub use error::KeychainError;
pub use file::FileStore;
pub use keychain::Keychain;
pub use secret::Secret;
