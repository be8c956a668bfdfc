//! The one error type of this crate; every variant says what was wrong, never secret material.

use std::path::PathBuf;

/// Errors from generating, loading and using Weir's local CA.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A CA with no permitted names would carry no name constraints at all and so could vouch for
    /// any site: refuse to make or load one.
    #[error("the CA must permit at least one managed host")]
    NoPermittedHosts,

    #[error("invalid host name {host:?}: {reason}")]
    InvalidHost { host: String, reason: &'static str },

    #[error("host {host:?} is not one of Weir's managed hosts")]
    HostNotPermitted { host: String },

    #[error("the CA certificate is not usable: {0}")]
    InvalidCaCert(String),

    #[error("the CA private key is not usable: {0}")]
    InvalidCaKey(String),

    #[error("the CA private key does not belong to the CA certificate")]
    KeyMismatch,

    /// The stored certificate has no critical DNS name constraints, so a leak of its key would let
    /// anyone impersonate any site; Weir refuses to use such a CA.
    #[error("the CA certificate is not name-constrained to DNS names")]
    NotNameConstrained,

    #[error("the CA certificate expired at {not_after}; rotate it")]
    CaExpired { not_after: time::OffsetDateTime },

    /// More new leaves were asked for in one second than are signed (cached ones still serve).
    #[error("more than {per_second} new leaf certificates in one second")]
    TooManyLeaves { per_second: u32 },

    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),

    #[error("TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),

    #[error("no randomness available from the operating system")]
    Random,

    #[error("no system root certificates could be loaded ({errors} errors)")]
    NoSystemRoots { errors: usize },

    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
