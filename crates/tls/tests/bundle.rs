//! The root bundle: system roots plus Weir's CA in one PEM file.

mod common;

use common::{ca_at, t0};
use rustls::pki_types::CertificateDer;
use weir_tls::{write_bundle, write_bundle_with_roots, TlsError};

fn certs_in(path: &std::path::Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(path).unwrap();
    pem::parse_many(text)
        .unwrap()
        .into_iter()
        .inspect(|p| assert_eq!(p.tag(), "CERTIFICATE"))
        .map(|p| p.into_contents())
        .collect()
}

fn some_root(cn: &str) -> CertificateDer<'static> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().der().clone()
}

#[test]
fn bundle_has_given_roots_then_weir_ca_skipping_old_weir_cas_and_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle.pem");
    let ca = ca_at(t0());
    let old_weir = ca_at(t0()); // a rotated-away CA: same name prefix
    let (r1, r2) = (some_root("Root One"), some_root("Root Two"));
    let roots = vec![
        r1.clone(),
        old_weir.cert_der().clone(),
        r2.clone(),
        r1.clone(),
    ];

    let report = write_bundle_with_roots(&path, ca.cert_pem(), &roots).unwrap();
    assert_eq!(report.roots_written, 2);
    assert_eq!(report.roots_skipped, 2);
    assert_eq!(
        certs_in(&path),
        vec![r1.to_vec(), r2.to_vec(), ca.cert_der().to_vec()]
    );
    assert!(!dir.path().join("bundle.pem.tmp").exists());

    // Rewriting replaces the file rather than appending.
    write_bundle_with_roots(&path, ca.cert_pem(), std::slice::from_ref(&r2)).unwrap();
    assert_eq!(certs_in(&path), vec![r2.to_vec(), ca.cert_der().to_vec()]);
}

#[test]
fn bundle_from_the_system_store_counts_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle.pem");
    let ca = ca_at(t0());
    let native = rustls_native_certs::load_native_certs();
    match write_bundle(&path, ca.cert_pem()) {
        Ok(report) => {
            let certs = certs_in(&path);
            assert!(report.roots_written > 0);
            assert_eq!(certs.len(), report.roots_written + 1);
            assert_eq!(
                report.roots_written + report.roots_skipped,
                native.certs.len()
            );
            assert_eq!(certs.last().unwrap(), &ca.cert_der().to_vec());
        }
        // Only acceptable when this machine really has no roots (no ca-certificates package).
        Err(TlsError::NoSystemRoots { .. }) => {
            assert!(native.certs.is_empty());
            assert!(!path.exists());
        }
        Err(other) => panic!("unexpected error {other}"),
    }
}

#[test]
fn bundle_refuses_a_non_certificate_extra() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle.pem");
    let ca = ca_at(t0());
    let err = write_bundle_with_roots(&path, &ca.key_pem(), &[]).unwrap_err();
    assert!(matches!(err, TlsError::InvalidCaCert(_)));
    assert!(!path.exists());
}
