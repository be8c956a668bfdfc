//! weir-tls: Weir's name-constrained local CA, the leaf certificates it issues for managed hosts, and
//! the helpers that get the CA trusted by the operating system and by tools.
//!
//! # Layout
//! - [`hosts`]: normalising managed host names and what an X.509 DNS subtree permits.
//! - [`ca`]: [`LocalCa`], the ECDSA P-256 CA whose name constraints permit only the managed hosts.
//! - [`clock`]: the injectable wall clock certificates are dated with.
//! - [`leaf`]: [`LeafIssuer`], a rustls certificate resolver that issues and caches short-lived leaves.
//! - [`trust`]: per-OS commands that install (or remove) the CA in system and browser trust stores.
//! - [`bundle`]: a PEM file of the system roots plus Weir's CA for tools that need one bundle.
//! - [`pem_certs`]: the one PEM reader for certificate files.
//! - [`error`]: the crate's error type, [`TlsError`].
//!
//! The CA private key is exposed and accepted only as PEM; storing it (in the OS keychain) is the
//! caller's job, and nothing here prints it.

pub mod bundle;
pub mod ca;
pub mod clock;
pub mod error;
pub mod hosts;
pub mod leaf;
pub mod pem_certs;
pub mod trust;

pub use bundle::{write_bundle, write_bundle_with_roots, BundleReport};
pub use ca::{LocalCa, CA_NAME_PREFIX};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::TlsError;
pub use leaf::{LeafIssuer, LeafPolicy, MAX_NEW_LEAVES_PER_SECOND};
pub use pem_certs::pem_certificates;
pub use trust::{install_steps, install_steps_for, remove_steps, InstallStep, Os, TrustTargets};

/// Re-exported so callers can pass `now` without depending on `time` themselves.
pub use time::OffsetDateTime;
