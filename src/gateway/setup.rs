//! Reads the files `[gateway]` names, once, at start: a missing or unreadable file is an error
//! naming the key and the path, before any listener opens.

use crate::config::GatewaySettings;
use crate::queue::sealed::GatewayKey;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway mode needs a [gateway] table in the config file (listen, tls_cert_file, tls_key_file, allow); see docs/team.md")]
    NotConfigured,
    #[error("cannot read gateway.{key} {}: {source}", .path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gateway.{key} {}: {message}", .path.display())]
    Invalid {
        key: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("the gateway admin token could not be read from the keychain: {0}. Name a file with gateway.admin_token_file instead")]
    AdminToken(String),
}

/// Everything gateway mode needs, read and checked.
#[derive(Clone)]
pub struct Gateway {
    pub settings: GatewaySettings,
    pub tls: Arc<rustls::ServerConfig>,
    /// `None` until the engine reads it from the keychain (no `admin_token_file`).
    pub admin_token: Option<String>,
    /// The shared queue's connection settings (password included) and key.
    pub postgres: Option<(tokio_postgres::Config, GatewayKey)>,
    /// The CA every replica terminates CONNECTs to managed https hosts with (from files).
    pub intercept_ca: Option<Arc<weir_tls::LocalCa>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.settings.listen)
            .field("admin_listen", &self.settings.admin_listen)
            .finish_non_exhaustive()
    }
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, GatewayError> {
    std::fs::read(path).map_err(|source| GatewayError::Read {
        key,
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(key: &'static str, path: &Path, message: impl Into<String>) -> GatewayError {
    GatewayError::Invalid {
        key,
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A secret file's text without surrounding whitespace; an empty file is an error.
fn read_secret(key: &'static str, path: &Path) -> Result<String, GatewayError> {
    let text = String::from_utf8(read(key, path)?)
        .map_err(|_| invalid(key, path, "is not text"))?
        .trim()
        .to_string();
    if text.is_empty() {
        return Err(invalid(key, path, "is empty"));
    }
    Ok(text)
}

impl Gateway {
    /// Reads the certificate, key and secret files of `settings`.
    pub fn load(settings: Option<&GatewaySettings>) -> Result<Gateway, GatewayError> {
        let settings = settings.ok_or(GatewayError::NotConfigured)?.clone();
        let tls = server_config(&settings.tls_cert_file, &settings.tls_key_file)?;
        let admin_token = match &settings.admin_token_file {
            Some(p) => {
                let t = read_secret("admin_token_file", p)?;
                if t.len() < 16 {
                    return Err(invalid("admin_token_file", p, "holds fewer than 16 characters; use a long random token (e.g. `openssl rand -hex 32`)"));
                }
                Some(t)
            }
            None => None,
        };
        let postgres = match &settings.postgres {
            None => None,
            Some(pg) => {
                let mut config = pg.config.clone();
                if let Some(p) = &pg.password_file {
                    config.password(read_secret("postgres_password_file", p)?);
                }
                let hex_key = read_secret("secret_key_file", &pg.secret_key_file)?;
                let key = hex::decode(&hex_key)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| {
                        invalid(
                            "secret_key_file",
                            &pg.secret_key_file,
                            "must hold 32 random bytes as 64 hex digits (`openssl rand -hex 32`)",
                        )
                    })?;
                Some((config, GatewayKey::new(key)))
            }
        };
        let intercept_ca = match &settings.intercept_ca {
            None => None,
            Some((cert, key)) => {
                let text = |k, p: &Path| {
                    String::from_utf8(read(k, p)?).map_err(|_| invalid(k, p, "is not PEM text"))
                };
                let ca = weir_tls::LocalCa::from_pem(
                    &text("intercept_ca_cert_file", cert)?,
                    &text("intercept_ca_key_file", key)?,
                )
                .map_err(|e| invalid("intercept_ca_cert_file", cert, e.to_string()))?;
                Some(Arc::new(ca))
            }
        };
        Ok(Gateway {
            intercept_ca,
            settings,
            tls,
            admin_token,
            postgres,
        })
    }
}

/// The listeners' TLS: the certificate chain and key from PEM files, TLS 1.2+ (rustls), ALPN
/// h2 and http/1.1.
fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, GatewayError> {
    let chain = weir_tls::pem_certificates(&read("tls_cert_file", cert)?)
        .map_err(|e| invalid("tls_cert_file", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(invalid("tls_cert_file", cert, "holds no CERTIFICATE block"));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read("tls_key_file", key)?).map_err(|e| {
        invalid(
            "tls_key_file",
            key,
            format!("holds no usable private key: {e}"),
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| invalid("tls_cert_file", cert, e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .map_err(|e| {
        invalid(
            "tls_key_file",
            key,
            format!("does not fit the certificate: {e}"),
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
