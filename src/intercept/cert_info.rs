//! What a person wants to know about a CA certificate, read from its PEM alone (no keychain):
//! subject, SHA-256 fingerprint, validity and the names its constraints permit.

use std::fmt;
use x509_parser::extensions::GeneralName;

/// A readable summary of a certificate.
#[derive(Debug, Clone)]
pub struct CertInfo {
    pub subject: String,
    /// Colon-separated upper-case hex, as `openssl x509 -fingerprint -sha256` prints it.
    pub sha256: String,
    pub not_before: String,
    pub not_after: String,
    /// Whether `now` lies within the validity period.
    pub valid_now: bool,
    /// DNS names the name constraints permit (each with its subdomains).
    pub permitted: Vec<String>,
    pub der: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
#[error("not a readable PEM certificate: {0}")]
pub struct CertInfoError(String);

impl CertInfo {
    pub fn from_pem(text: &str) -> Result<CertInfo, CertInfoError> {
        let der = weir_tls::pem_certificates(text.as_bytes())
            .map_err(|e| CertInfoError(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| CertInfoError("no CERTIFICATE block".into()))?;
        let (_, x) =
            x509_parser::parse_x509_certificate(&der).map_err(|e| CertInfoError(e.to_string()))?;
        let permitted = x
            .name_constraints()
            .ok()
            .flatten()
            .map(|nc| {
                nc.value
                    .permitted_subtrees
                    .iter()
                    .flatten()
                    .filter_map(|s| match s.base {
                        GeneralName::DNSName(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let digest = ring::digest::digest(&ring::digest::SHA256, &der);
        let sha256 = digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        Ok(CertInfo {
            subject: x.subject().to_string(),
            sha256,
            not_before: x.validity().not_before.to_string(),
            not_after: x.validity().not_after.to_string(),
            valid_now: x.validity().is_valid(),
            permitted,
            der: der.to_vec(),
        })
    }
}

impl fmt::Display for CertInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "subject:      {}", self.subject)?;
        writeln!(f, "sha256:       {}", self.sha256)?;
        writeln!(
            f,
            "valid:        {} to {}{}",
            self.not_before,
            self.not_after,
            if self.valid_now {
                ""
            } else {
                "  (NOT valid now)"
            }
        )?;
        write!(
            f,
            "permits:      {} (and their subdomains; no IP addresses)",
            self.permitted.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_weir_ca() {
        let hosts = vec!["api.githubcopilot.com".to_string()];
        let ca = weir_tls::LocalCa::generate_for_owner(
            &hosts,
            weir_tls::OffsetDateTime::now_utc(),
            "t@h",
        )
        .unwrap();
        let info = CertInfo::from_pem(ca.cert_pem()).unwrap();
        assert_eq!(info.sha256, ca.fingerprint_sha256());
        assert_eq!(info.permitted, hosts);
        assert!(
            info.subject.contains("Weir local CA (t@h)"),
            "{}",
            info.subject
        );
        assert!(info.valid_now);
        assert!(CertInfo::from_pem("nope").is_err());
    }
}
