//! rustls-webpki, the verifier rustls uses, accepts Weir's leaves for managed hosts and rejects
//! anything else the CA key signs, because of the CA's name constraints.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use common::{ca_at, dns, sign_directly, t0, verify_chain, verify_for_name};
use rcgen::SanType;
use weir_tls::{LeafIssuer, LeafPolicy, LocalCa, ManualClock};

fn issuer_at(ca: LocalCa) -> LeafIssuer {
    LeafIssuer::with_clock(
        Arc::new(ca),
        Arc::new(ManualClock::new(t0())),
        LeafPolicy::default(),
    )
}

#[test]
fn issued_leaf_verifies_for_its_managed_host_only() {
    let issuer = issuer_at(ca_at(t0()));
    let ca_der = issuer.ca().cert_der().clone();
    for host in ["api.github.com", "api.githubcopilot.com"] {
        let key = issuer.certified_key(host).unwrap();
        assert_eq!(key.cert.len(), 1, "only the leaf is sent");
        verify_for_name(&ca_der, &key.cert[0], host, t0()).unwrap();
    }
    let leaf = issuer.certified_key("api.github.com").unwrap();
    let wrong_name = verify_for_name(&ca_der, &leaf.cert[0], "api.githubcopilot.com", t0());
    assert!(
        matches!(wrong_name, Err(webpki::Error::CertNotValidForName(_))),
        "{wrong_name:?}"
    );
}

#[test]
fn leaf_for_an_unmanaged_name_signed_with_the_ca_key_is_rejected() {
    let ca = ca_at(t0());
    for name in [
        "evil.example",
        "github.com",
        "evilapi.github.com",
        "api.github.com.evil.example",
    ] {
        let leaf = sign_directly(&ca, vec![dns(name)], t0());
        assert_eq!(
            verify_chain(ca.cert_der(), &leaf, t0()),
            Err(webpki::Error::NameConstraintViolation),
            "{name} must be outside the CA's permitted subtrees"
        );
    }
    // A managed name smuggled next to an unmanaged one taints the whole certificate.
    let mixed = sign_directly(
        &ca,
        vec![dns("api.github.com"), dns("www.google.com")],
        t0(),
    );
    assert_eq!(
        verify_chain(ca.cert_der(), &mixed, t0()),
        Err(webpki::Error::NameConstraintViolation)
    );
}

#[test]
fn leaf_for_an_ip_address_signed_with_the_ca_key_is_rejected() {
    let ca = ca_at(t0());
    let leaf = sign_directly(
        &ca,
        vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(
            140, 82, 112, 6,
        )))],
        t0(),
    );
    assert_eq!(
        verify_chain(ca.cert_der(), &leaf, t0()),
        Err(webpki::Error::NameConstraintViolation)
    );
}

#[test]
fn subdomains_of_a_managed_host_are_inside_the_subtree() {
    // Documents RFC 5280 semantics (see weir_tls::hosts): the CA cannot be narrower than a
    // subtree, but LeafIssuer never issues for these names.
    let ca = ca_at(t0());
    let leaf = sign_directly(&ca, vec![dns("x.api.github.com")], t0());
    verify_for_name(ca.cert_der(), &leaf, "x.api.github.com", t0()).unwrap();
}

#[test]
fn leaf_from_a_reloaded_ca_chains_to_the_original_certificate() {
    let ca = ca_at(t0());
    let original = ca.cert_der().clone();
    let reloaded = LocalCa::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    let issuer = issuer_at(reloaded);
    let leaf = issuer.certified_key("api.githubcopilot.com").unwrap();
    verify_for_name(&original, &leaf.cert[0], "api.githubcopilot.com", t0()).unwrap();
}

#[test]
fn leaf_does_not_verify_against_a_different_ca() {
    let issuer = issuer_at(ca_at(t0()));
    let other = ca_at(t0());
    let leaf = issuer.certified_key("api.github.com").unwrap();
    // Both CAs carry the same subject name (same owner, same day), as an old and a rotated CA
    // would: the issuer name matches, and the signature check is what rejects the leaf.
    assert_eq!(
        verify_chain(other.cert_der(), &leaf.cert[0], t0()),
        Err(webpki::Error::InvalidSignatureForPublicKey)
    );
}

#[test]
fn control_the_same_leaf_from_an_unconstrained_ca_would_verify() {
    // Shows the rejections above come from the name constraints, not from the test harness.
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = params.self_signed(&key).unwrap();
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut leaf = CertificateParams::new(vec!["evil.example".to_owned()]).unwrap();
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = t0() - time::Duration::hours(1);
    leaf.not_after = t0() + time::Duration::hours(1);
    let leaf = leaf.signed_by(&leaf_key, &ca, &key).unwrap();
    verify_for_name(ca.der(), leaf.der(), "evil.example", t0()).unwrap();
}
