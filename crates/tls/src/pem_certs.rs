//! Weir's one PEM reader for certificate files (CA files, trust bundles, the local CA), on the
//! `pem` crate that rcgen already uses, so there is no second PEM parser in the tree.

use crate::TlsError;
use rustls::pki_types::CertificateDer;

/// Every `CERTIFICATE` block in `input`, in order. Text outside the blocks and blocks of other
/// kinds (keys, CRLs) are skipped; a malformed block is an error. No block at all is `Ok(vec![])`.
pub fn pem_certificates(input: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let blocks = pem::parse_many(input).map_err(|e| TlsError::InvalidCaCert(e.to_string()))?;
    Ok(blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.into_contents()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_certificates_and_skips_the_rest() {
        let cert = pem::encode(&pem::Pem::new("CERTIFICATE", vec![1, 2, 3]));
        let key = pem::encode(&pem::Pem::new("PRIVATE KEY", vec![9]));
        let text = format!("# a comment\n{cert}{key}{cert}");
        let certs = pem_certificates(text.as_bytes()).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[0].as_ref(), &[1, 2, 3]);
        assert!(pem_certificates(b"no pem here").unwrap().is_empty());
        let broken = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(pem_certificates(broken.as_bytes()).is_err());
    }
}
