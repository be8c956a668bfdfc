//! One PEM file holding the system's trusted roots plus Weir's CA, for tools that take a single
//! bundle instead of reading the system store (`gh` via `SSL_CERT_FILE`, Python requests via
//! `REQUESTS_CA_BUNDLE`, Node via `NODE_EXTRA_CA_CERTS` needs only Weir's CA).

use std::io::Write;
use std::path::Path;

use rustls::pki_types::CertificateDer;

use crate::{TlsError, CA_NAME_PREFIX};

/// What [`write_bundle`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleReport {
    /// System roots written (Weir's CA not counted).
    pub roots_written: usize,
    /// Roots left out because they are a Weir CA (an old one after rotation, or this bundle
    /// itself read back through `SSL_CERT_FILE`) or a duplicate.
    pub roots_skipped: usize,
    /// Errors the platform loader reported while reading the system store (some roots may be
    /// missing when this is non-zero).
    pub load_errors: usize,
}

/// Writes the system root store (as rustls-native-certs finds it, which honours `SSL_CERT_FILE`
/// and `SSL_CERT_DIR`) followed by `extra_ca_pem` to `path`, replacing it atomically.
pub fn write_bundle(path: &Path, extra_ca_pem: &str) -> Result<BundleReport, TlsError> {
    let loaded = rustls_native_certs::load_native_certs();
    for err in &loaded.errors {
        tracing::warn!(error = %err, "could not load some system root certificates");
    }
    let (text, mut report) = build_bundle(extra_ca_pem, &loaded.certs)?;
    report.load_errors = loaded.errors.len();
    if report.roots_written == 0 {
        // A bundle with only Weir's CA would break every tunnelled (non-managed) host.
        return Err(TlsError::NoSystemRoots {
            errors: loaded.errors.len(),
        });
    }
    write_atomically(path, text.as_bytes())?;
    Ok(report)
}

/// As [`write_bundle`] with the roots given (testable without the system store). Writes even
/// when `roots` is empty.
pub fn write_bundle_with_roots(
    path: &Path,
    extra_ca_pem: &str,
    roots: &[CertificateDer<'_>],
) -> Result<BundleReport, TlsError> {
    let (text, report) = build_bundle(extra_ca_pem, roots)?;
    write_atomically(path, text.as_bytes())?;
    Ok(report)
}

/// The bundle text: each distinct non-Weir root, then Weir's CA last.
fn build_bundle(
    extra_ca_pem: &str,
    roots: &[CertificateDer<'_>],
) -> Result<(String, BundleReport), TlsError> {
    let extra = pem::parse(extra_ca_pem).map_err(|e| TlsError::InvalidCaCert(e.to_string()))?;
    if extra.tag() != "CERTIFICATE" {
        return Err(TlsError::InvalidCaCert(format!(
            "expected a CERTIFICATE PEM block, found {}",
            extra.tag()
        )));
    }
    let mut out = String::new();
    let mut seen: Vec<&[u8]> = Vec::with_capacity(roots.len());
    let mut report = BundleReport {
        roots_written: 0,
        roots_skipped: 0,
        load_errors: 0,
    };
    for root in roots {
        let der = root.as_ref();
        if der == extra.contents() || seen.contains(&der) || is_weir_ca(der) {
            report.roots_skipped += 1;
            continue;
        }
        seen.push(der);
        out.push_str(&pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec())));
        report.roots_written += 1;
    }
    out.push_str(&pem::encode(&pem::Pem::new(
        "CERTIFICATE",
        extra.contents().to_vec(),
    )));
    Ok((out, report))
}

/// A root whose subject common name starts with [`CA_NAME_PREFIX`] is one of ours: leave it
/// out so a rotated-away CA does not linger in the bundle.
fn is_weir_ca(der: &[u8]) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    let cn = cert.subject().iter_common_name().next();
    cn.and_then(|cn| cn.as_str().ok())
        .is_some_and(|cn| cn.starts_with(CA_NAME_PREFIX))
}

/// Writes to a temporary file beside `path` and renames it over `path`, so a tool reading the
/// bundle never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    let io = |action, source| TlsError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
    file.write_all(bytes).map_err(|e| io("write", e))?;
    file.sync_all().map_err(|e| io("sync", e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| io("replace", e))
}
