//! TLS to PostgreSQL (`gateway.postgres_sslmode`): tokio-postgres' own TLS hook filled by
//! `tokio-postgres-rustls` over the rustls 0.23 + ring stack the rest of Weir uses (no OpenSSL,
//! no second crypto provider). `verify-full` checks the chain against the OS roots plus
//! `gateway.postgres_ca_file` and the host name against the certificate; `require` encrypts
//! without checking who answers (libpq's meaning of the word).

use crate::config::PgSslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How one replica reaches its database.
#[derive(Clone)]
pub(crate) enum PgTls {
    Plain,
    Rustls(MakeRustlsConnect),
}

impl PgTls {
    pub fn new(mode: PgSslMode, extra_roots: &[CertificateDer<'static>]) -> PgTls {
        let config = match mode {
            PgSslMode::Disable => return PgTls::Plain,
            PgSslMode::Require => {
                let provider = crate::upstream::roots::provider();
                rustls::ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default TLS versions")
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
                    .with_no_client_auth()
            }
            PgSslMode::VerifyFull => crate::upstream::roots::client_config_trusting(extra_roots),
        };
        PgTls::Rustls(MakeRustlsConnect::new(config))
    }
}

/// `sslmode = require`: the handshake's signatures are checked (so the session key is the
/// server's), the certificate is not (anyone answering on the address is accepted).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
