//! Shared helpers for weir-tls integration tests: fixed dates, a CA, direct signing that bypasses
//! Weir's host check, and verification with rustls-webpki (the verifier rustls itself uses).
#![allow(dead_code)]

use std::time::Duration as StdDuration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use weir_tls::{LocalCa, OffsetDateTime};

pub const MANAGED: [&str; 2] = ["api.githubcopilot.com", "api.github.com"];

pub fn managed() -> Vec<String> {
    MANAGED.iter().map(|h| (*h).to_owned()).collect()
}

/// A fixed "now" (2030-03-17) so tests do not depend on the wall clock.
pub fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()
}

pub fn ca_at(now: OffsetDateTime) -> LocalCa {
    LocalCa::generate_for_owner(&managed(), now, "tester@testhost").unwrap()
}

/// Signs a leaf with the CA's key through rcgen directly, bypassing `LeafIssuer`'s refusal, so
/// the certificate's own name constraints are what must stop it.
pub fn sign_directly(
    ca: &LocalCa,
    sans: Vec<SanType>,
    now: OffsetDateTime,
) -> CertificateDer<'static> {
    let ca_key = KeyPair::from_pem(&ca.key_pem()).unwrap();
    let issuer = CertificateParams::from_ca_cert_pem(ca.cert_pem())
        .unwrap()
        .self_signed(&ca_key)
        .unwrap();
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "direct leaf");
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::hours(24);
    params
        .signed_by(&leaf_key, &issuer, &ca_key)
        .unwrap()
        .der()
        .clone()
}

pub fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

fn unix(at: OffsetDateTime) -> UnixTime {
    UnixTime::since_unix_epoch(StdDuration::from_secs(at.unix_timestamp() as u64))
}

/// Path validation of `leaf` up to `ca` as a server certificate at `at` (signature, validity,
/// EKU, basic and name constraints), without the final host-name check.
pub fn verify_chain(
    ca: &CertificateDer<'_>,
    leaf: &CertificateDer<'_>,
    at: OffsetDateTime,
) -> Result<(), webpki::Error> {
    let anchor = webpki::anchor_from_trusted_cert(ca)?;
    let ee = webpki::EndEntityCert::try_from(leaf)?;
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &[anchor],
        &[],
        unix(at),
        webpki::KeyUsage::server_auth(),
        None,
        None,
    )
    .map(|_| ())
}

/// Full server-certificate verification for `name`: the chain, then the name.
pub fn verify_for_name(
    ca: &CertificateDer<'_>,
    leaf: &CertificateDer<'_>,
    name: &str,
    at: OffsetDateTime,
) -> Result<(), webpki::Error> {
    verify_chain(ca, leaf, at)?;
    let ee = webpki::EndEntityCert::try_from(leaf)?;
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    ee.verify_is_valid_for_subject_name(&server_name)
}
