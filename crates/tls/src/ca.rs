//! The local certificate authority: an ECDSA P-256 CA, name-constrained to Weir's managed hosts,
//! that signs the short-lived leaves [`crate::LeafIssuer`] serves.
//!
//! The certificate is public (written to the data dir); the private key is returned and accepted
//! only as PEM so the caller can keep it in the OS keychain. `Debug` never shows the key.

use std::fmt;

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
    SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;

use crate::hosts::{normalize_host, normalize_list};
use crate::TlsError;

/// Every Weir CA's common name starts with this (the rest names the user and machine).
pub const CA_NAME_PREFIX: &str = "Weir local CA";

/// How long a generated CA is valid: long enough not to nag, short enough that rotation happens.
pub const CA_VALIDITY: Duration = Duration::days(730);

/// Back-dating of `notBefore`, so a client whose clock is a little behind still accepts the cert.
const BACKDATE: Duration = Duration::hours(1);

/// RFC 5280's upper bound for a common name.
const MAX_CN_LEN: usize = 64;

/// Weir's local CA: certificate, signing key, and the hosts its name constraints permit.
pub struct LocalCa {
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    key: KeyPair,
    /// rcgen 0.13 signs with a `Certificate`, not a bare issuer name: this is the stored CA
    /// re-built from its own DER (same subject bytes, same key identifier, same key), so leaves
    /// it signs chain to `cert_der`. It is never shown or written anywhere.
    signer: rcgen::Certificate,
    permitted: Vec<String>,
    common_name: String,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl LocalCa {
    /// Generates a new CA permitting exactly `permitted_hosts` (and, per X.509, their subdomains;
    /// see [`crate::hosts`]), named after the current user and machine, valid from `now` for
    /// [`CA_VALIDITY`].
    pub fn generate(permitted_hosts: &[String], now: OffsetDateTime) -> Result<Self, TlsError> {
        Self::generate_for_owner(permitted_hosts, now, &default_owner_label())
    }

    /// As [`LocalCa::generate`], with the owner label in `Weir local CA (<owner>)` given.
    pub fn generate_for_owner(
        permitted_hosts: &[String],
        now: OffsetDateTime,
        owner: &str,
    ) -> Result<Self, TlsError> {
        let hosts = normalize_list(permitted_hosts)?;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;

        let mut params = CertificateParams::default();
        params.distinguished_name = ca_name(owner, now);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts.iter().cloned().map(GeneralSubtree::DnsName).collect(),
            // DNS constraints say nothing about IP-address names: exclude them all explicitly.
            excluded_subtrees: vec![
                GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
            ],
        });
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        params.serial_number = Some(random_serial()?);
        let cert = params.self_signed(&key)?;

        // Go through the same checks as a CA loaded from disk, so both paths behave alike.
        Self::from_parts(cert.der().clone(), key)
    }

    /// Loads a CA from its certificate PEM (data dir) and private-key PEM (keychain). Refuses a
    /// certificate that is not a CA, is not DNS-name-constrained, or does not match the key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let pem = pem::parse(cert_pem).map_err(|e| TlsError::InvalidCaCert(e.to_string()))?;
        if pem.tag() != "CERTIFICATE" {
            return Err(TlsError::InvalidCaCert(format!(
                "expected a CERTIFICATE PEM block, found {}",
                pem.tag()
            )));
        }
        // Deliberately no detail from the key parser: the error must not echo key material.
        let key = KeyPair::from_pem(key_pem)
            .map_err(|_| TlsError::InvalidCaKey("not a PKCS#8 PEM private key".into()))?;
        Self::from_parts(CertificateDer::from(pem.into_contents()), key)
    }

    fn from_parts(cert_der: CertificateDer<'static>, key: KeyPair) -> Result<Self, TlsError> {
        let bad = |what: String| TlsError::InvalidCaCert(what);
        let (rest, x509) =
            x509_parser::parse_x509_certificate(&cert_der).map_err(|e| bad(e.to_string()))?;
        if !rest.is_empty() {
            return Err(bad("trailing data after the certificate".into()));
        }
        let is_ca = x509
            .basic_constraints()
            .map_err(|e| bad(e.to_string()))?
            .is_some_and(|bc| bc.value.ca);
        if !is_ca {
            return Err(bad("basicConstraints does not mark it as a CA".into()));
        }
        if x509.public_key().raw != key.public_key_der().as_slice() {
            return Err(TlsError::KeyMismatch);
        }
        let permitted = permitted_dns_names(&x509)?;
        let common_name = x509
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_owned();
        let not_before = x509.validity().not_before.to_datetime();
        let not_after = x509.validity().not_after.to_datetime();
        drop(x509);

        let signer = CertificateParams::from_ca_cert_der(&cert_der)?.self_signed(&key)?;
        let cert_pem = pem::encode(&pem::Pem::new("CERTIFICATE", cert_der.to_vec()));
        Ok(Self {
            cert_der,
            cert_pem,
            key,
            signer,
            permitted,
            common_name,
            not_before,
            not_after,
        })
    }

    /// The CA certificate as PEM (public; written to the data dir and installed in trust stores).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate as DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA private key as PKCS#8 PEM. **A secret**: store it in the keychain, never log it.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The normalised hosts the CA's name constraints permit (each with its subdomains).
    pub fn permitted_hosts(&self) -> &[String] {
        &self.permitted
    }

    /// True when `host` is exactly one of the managed hosts (after normalisation); this is the
    /// rule leaves are issued by, narrower than the CA's subtree constraints.
    pub fn is_managed(&self, host: &str) -> bool {
        normalize_host(host).is_ok_and(|h| self.permitted.contains(&h))
    }

    /// [`LocalCa::is_managed`], or `host` is a subdomain of a permitted entry that is also in
    /// `domains` (the X.509 constraint covers it; the caller chose to allow its subdomains).
    pub fn covers(&self, host: &str, domains: &[String]) -> bool {
        let Ok(h) = normalize_host(host) else {
            return false;
        };
        self.permitted.contains(&h)
            || domains
                .iter()
                .any(|d| self.permitted.contains(d) && crate::hosts::subtree_permits(d, &h))
    }

    /// SHA-256 of the certificate DER as colon-separated upper-case hex, the form `openssl x509
    /// -fingerprint -sha256`, macOS Keychain Access and browsers show.
    pub fn fingerprint_sha256(&self) -> String {
        colon_hex(ring::digest::digest(&ring::digest::SHA256, &self.cert_der).as_ref())
    }

    /// The certificate's subject common name, `Weir local CA (<owner>)`.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Signs a leaf for `host` (which the CA's constraints must permit) valid in
    /// `[not_before, not_after]`, with a fresh ECDSA P-256 key. Returns the certificate and key.
    pub(crate) fn sign_leaf(
        &self,
        host: &str,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<(CertificateDer<'static>, PrivatePkcs8KeyDer<'static>), TlsError> {
        let host = normalize_host(host)?;
        // The issuer decided (`LeafIssuer::covers`); the X.509 constraints must still permit it.
        if !self
            .permitted
            .iter()
            .any(|p| crate::hosts::subtree_permits(p, &host))
        {
            return Err(TlsError::HostNotPermitted { host });
        }
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(vec![host.clone()])?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial()?);
        let cert = params.signed_by(&key, &self.signer, &self.key)?;
        Ok((
            cert.der().clone(),
            PrivatePkcs8KeyDer::from(key.serialize_der()),
        ))
    }
}

impl fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCa")
            .field("common_name", &self.common_name)
            .field("permitted_hosts", &self.permitted)
            .field("not_after", &self.not_after)
            .field("fingerprint_sha256", &self.fingerprint_sha256())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The DNS names in the certificate's permitted subtrees; the extension must be critical and must
/// permit at least one DNS name, otherwise the CA could vouch for any site.
fn permitted_dns_names(
    x509: &x509_parser::certificate::X509Certificate<'_>,
) -> Result<Vec<String>, TlsError> {
    let constraints = x509
        .name_constraints()
        .map_err(|e| TlsError::InvalidCaCert(e.to_string()))?
        .ok_or(TlsError::NotNameConstrained)?;
    if !constraints.critical {
        return Err(TlsError::NotNameConstrained);
    }
    let names: Vec<String> = constraints
        .value
        .permitted_subtrees
        .iter()
        .flatten()
        .filter_map(|subtree| match subtree.base {
            GeneralName::DNSName(name) => Some(name.to_owned()),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        return Err(TlsError::NotNameConstrained);
    }
    normalize_list(&names)
}

/// `Weir local CA (<owner>)`, O=Weir, and the creation date in OU so rotated CAs are told apart.
fn ca_name(owner: &str, now: OffsetDateTime) -> DistinguishedName {
    let room = MAX_CN_LEN.saturating_sub(CA_NAME_PREFIX.len() + 3);
    let owner: String = owner
        .chars()
        .filter(|c| !c.is_control())
        .take(room)
        .collect();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("{CA_NAME_PREFIX} ({owner})"));
    name.push(DnType::OrganizationName, "Weir");
    name.push(
        DnType::OrganizationalUnitName,
        format!("created {}", now.date()),
    );
    name
}

/// "user@host" from the environment, as far as it is known.
fn default_owner_label() -> String {
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.trim().is_empty());
    let user = env("USER").or_else(|| env("USERNAME"));
    let host = env("HOSTNAME").or_else(|| env("COMPUTERNAME")).or_else(|| {
        std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
    });
    match (user, host) {
        (Some(u), Some(h)) => format!("{u}@{h}"),
        (Some(u), None) => u,
        (None, Some(h)) => h,
        (None, None) => "this computer".to_owned(),
    }
}

/// A random positive 128-bit serial number (RFC 5280 wants them unpredictable and unique).
fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| TlsError::Random)?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // keep a full 16 bytes: no leading zero octet to strip
    Ok(SerialNumber::from_slice(&bytes))
}

pub(crate) fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}
