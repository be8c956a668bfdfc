//! The generated CA's certificate fields, PEM round-trip, and refusal of unusable CAs.

mod common;

use common::{ca_at, managed, t0};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use weir_tls::{LocalCa, TlsError};
use x509_parser::extensions::GeneralName;

#[test]
fn ca_certificate_is_a_constrained_p256_root() {
    let ca = ca_at(t0());
    let (_, cert) = x509_parser::parse_x509_certificate(ca.cert_der()).unwrap();

    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(bc.critical);
    assert!(bc.value.ca);
    assert_eq!(bc.value.path_len_constraint, Some(0));

    let ku = cert.key_usage().unwrap().unwrap();
    assert!(ku.critical);
    assert!(ku.value.key_cert_sign() && ku.value.crl_sign());
    assert!(!ku.value.digital_signature());

    let nc = cert.name_constraints().unwrap().unwrap();
    assert!(nc.critical, "name constraints must be critical");
    let permitted: Vec<&str> = nc
        .value
        .permitted_subtrees
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| match s.base {
            GeneralName::DNSName(n) => n,
            ref other => panic!("unexpected permitted subtree {other:?}"),
        })
        .collect();
    assert_eq!(permitted, ["api.githubcopilot.com", "api.github.com"]);
    let excluded = nc.value.excluded_subtrees.as_ref().unwrap();
    let excluded_ips: Vec<&[u8]> = excluded
        .iter()
        .map(|s| match s.base {
            GeneralName::IPAddress(ip) => ip,
            ref other => panic!("unexpected excluded subtree {other:?}"),
        })
        .collect();
    assert_eq!(excluded_ips, [&[0u8; 8][..], &[0u8; 32][..]]);

    // ECDSA P-256 key, self-signed with ecdsa-with-SHA256.
    assert_eq!(
        cert.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1"
    );
    assert_eq!(
        cert.signature_algorithm.algorithm.to_id_string(),
        "1.2.840.10045.4.3.2"
    );

    assert_eq!(ca.common_name(), "Weir local CA (tester@testhost)");
    assert_eq!(cert.issuer(), cert.subject());
    assert_eq!(ca.not_after(), t0() + time::Duration::days(730));
    assert!(ca.not_before() < t0());
    assert_eq!(ca.permitted_hosts(), &managed()[..]);
}

#[test]
fn pem_round_trip_keeps_certificate_key_and_hosts() {
    let ca = ca_at(t0());
    let loaded = LocalCa::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(loaded.cert_der(), ca.cert_der());
    assert_eq!(loaded.cert_pem(), ca.cert_pem());
    assert_eq!(loaded.key_pem(), ca.key_pem());
    assert_eq!(loaded.permitted_hosts(), ca.permitted_hosts());
    assert_eq!(loaded.fingerprint_sha256(), ca.fingerprint_sha256());
    assert_eq!(loaded.not_after(), ca.not_after());
    assert_eq!(loaded.common_name(), ca.common_name());
}

#[test]
fn fingerprint_is_colon_hex_sha256_and_differs_per_ca() {
    let a = ca_at(t0());
    let b = ca_at(t0());
    let fp = a.fingerprint_sha256();
    assert_eq!(fp.len(), 32 * 3 - 1);
    assert!(fp.split(':').all(|b| b.len() == 2
        && b.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())));
    assert_ne!(fp, b.fingerprint_sha256());
}

#[test]
fn debug_output_never_contains_the_key() {
    let ca = ca_at(t0());
    let debug = format!("{ca:?}");
    let key_pem = ca.key_pem();
    let key_body: String = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(debug.contains("<redacted>"));
    assert!(!debug.contains(&key_body[..40]));
    assert!(!debug.contains("PRIVATE KEY"));
}

#[test]
fn refuses_an_empty_or_invalid_host_list() {
    assert!(matches!(
        LocalCa::generate(&[], t0()),
        Err(TlsError::NoPermittedHosts)
    ));
    assert!(matches!(
        LocalCa::generate(&["10.0.0.1".to_owned()], t0()),
        Err(TlsError::InvalidHost { .. })
    ));
}

#[test]
fn refuses_a_key_from_another_ca() {
    let a = ca_at(t0());
    let b = ca_at(t0());
    assert!(matches!(
        LocalCa::from_pem(a.cert_pem(), &b.key_pem()),
        Err(TlsError::KeyMismatch)
    ));
}

#[test]
fn refuses_an_unconstrained_ca() {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).unwrap();
    assert!(matches!(
        LocalCa::from_pem(&cert.pem(), &key.serialize_pem()),
        Err(TlsError::NotNameConstrained)
    ));
}

#[test]
fn refuses_a_non_ca_certificate_and_garbage() {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = CertificateParams::new(vec!["api.github.com".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    assert!(matches!(
        LocalCa::from_pem(&cert.pem(), &key.serialize_pem()),
        Err(TlsError::InvalidCaCert(_))
    ));
    assert!(matches!(
        LocalCa::from_pem("not a pem", &key.serialize_pem()),
        Err(TlsError::InvalidCaCert(_))
    ));
    let ca = ca_at(t0());
    assert!(matches!(
        LocalCa::from_pem(
            ca.cert_pem(),
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        ),
        Err(TlsError::InvalidCaKey(_))
    ));
    // A key PEM handed in as the certificate.
    assert!(matches!(
        LocalCa::from_pem(&ca.key_pem(), &ca.key_pem()),
        Err(TlsError::InvalidCaCert(_))
    ));
}
