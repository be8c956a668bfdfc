//! The one secret store of the engine: the control secret, the identity key, a stored GitHub
//! token, queued creates' replay credentials, the persisted cache's sealing key and (through [`crate::intercept::ca_store`]) the
//! local CA's key all live in the OS keychain under one [`Namespace`] per data dir, or, on a
//! machine without a keychain, as owner-only files under the same names in the data dir.
//!
//! - [`mod@choose`]: `[secrets] store` (auto, keychain, file): which of the two this install uses.
//! - [`migrate`]: `weir secrets migrate`, every entry moved between the two, or none.
//! - [`names`]: every service and account name, and the per-data-dir namespace rule.
//! - [`store`]: [`SecretStore`] (keychain, memory or unavailable), every call bounded by 5 s.
//! - [`persistent`]: keys made once per install (created only when the keychain says there is
//!   no entry; a transient error gives a per-run value and never overwrites).

pub mod choose;
pub mod migrate;
pub mod names;
pub mod persistent;
pub mod store;

pub use choose::{
    choose, files_meaning, files_possible, store_for, stored_where, ChooseError, FilesBecause,
    Place, StoreChoice,
};
pub use names::{Account, Namespace, DEFAULT_SERVICE, SERVICE_ENV};
pub use store::{Backend, SecretError, SecretStore, KEYCHAIN_TIMEOUT};
