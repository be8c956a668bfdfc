//! The roots every TLS client of Weir trusts: the platform's (as rustls-native-certs finds
//! them, honouring `SSL_CERT_FILE` / `SSL_CERT_DIR`), plus the certificates of a `ca_file` where
//! one is configured. Used by the upstream client ([`super::pool`]), the team's NATS link and
//! the gateway's PostgreSQL link, so all three read the store and report its problems the same
//! way, on the same ring provider.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use std::sync::Arc;

/// The crypto provider of every Weir TLS client (ring, no second provider).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The platform's trusted roots (warnings logged, never fatal: Weir still serves tunnels).
pub(crate) fn platform_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "could not load some platform root certificates");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        tracing::warn!("no platform root certificates found: HTTPS upstreams will fail to verify");
    }
    roots
}

/// A client configuration that checks the chain against the platform's roots plus `extra`
/// (a `ca_file`'s certificates) and the host name against the certificate.
// The team's NATS and the gateway's PostgreSQL links (features `team`, `gateway`).
#[cfg_attr(not(any(feature = "team", feature = "gateway")), allow(dead_code))]
pub(crate) fn client_config_trusting(extra: &[CertificateDer<'static>]) -> rustls::ClientConfig {
    let mut roots = platform_roots();
    roots.add_parsable_certificates(extra.iter().cloned());
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}
