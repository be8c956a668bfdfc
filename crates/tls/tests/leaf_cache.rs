//! LeafIssuer: refusal of unmanaged names, reuse of cached leaves, renewal near expiry, and
//! clamping to the CA's lifetime, driven by a manual clock (no sleeping).

mod common;

use std::sync::Arc;

use common::{ca_at, t0, verify_for_name};
use time::Duration;
use weir_tls::{LeafIssuer, LeafPolicy, ManualClock, TlsError};
use x509_parser::prelude::X509Certificate;

fn issuer() -> (LeafIssuer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let issuer =
        LeafIssuer::with_clock(Arc::new(ca_at(t0())), clock.clone(), LeafPolicy::default());
    (issuer, clock)
}

fn parse(der: &[u8]) -> X509Certificate<'_> {
    x509_parser::parse_x509_certificate(der).unwrap().1
}

#[test]
fn refuses_names_that_are_not_exactly_managed() {
    let (issuer, _) = issuer();
    for name in [
        "evil.example",
        "github.com",
        "x.api.github.com",
        "uploads.github.com",
    ] {
        assert!(
            matches!(
                issuer.certified_key(name),
                Err(TlsError::HostNotPermitted { .. })
            ),
            "{name}"
        );
    }
    for name in ["127.0.0.1", "", "*.api.github.com"] {
        assert!(
            matches!(
                issuer.certified_key(name),
                Err(TlsError::InvalidHost { .. })
            ),
            "{name}"
        );
    }
    assert_eq!(issuer.issued_count(), 0);
}

#[test]
fn leaf_fields_are_a_24h_p256_server_cert_for_the_host() {
    let (issuer, _) = issuer();
    let key = issuer.certified_key("API.GitHub.com.").unwrap();
    let cert = parse(&key.cert[0]);
    let sans: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(sans, ["DNSName(api.github.com)"]);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth && !eku.any);
    assert!(!cert.basic_constraints().unwrap().unwrap().value.ca);
    assert_eq!(
        cert.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1"
    );
    let validity = cert.validity();
    assert_eq!(validity.not_after.to_datetime(), t0() + Duration::hours(24));
    assert_eq!(validity.not_before.to_datetime(), t0() - Duration::hours(1));
}

#[test]
fn cached_leaf_is_reused_until_an_hour_is_left_then_renewed() {
    let (issuer, clock) = issuer();
    let first = issuer.certified_key("api.github.com").unwrap();
    assert_eq!(issuer.issued_count(), 1);

    clock.advance(Duration::hours(22) + Duration::minutes(59));
    let again = issuer.certified_key("api.github.com").unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "leaf with > 1 h left must be reused"
    );
    assert_eq!(issuer.issued_count(), 1);

    // A different host gets its own leaf.
    let other = issuer.certified_key("api.githubcopilot.com").unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(issuer.issued_count(), 2);

    clock.advance(Duration::minutes(2)); // 23h01m after issue: 59 min left
    let renewed = issuer.certified_key("api.github.com").unwrap();
    assert!(
        !Arc::ptr_eq(&first, &renewed),
        "leaf with < 1 h left must be renewed"
    );
    assert_ne!(first.cert[0], renewed.cert[0]);
    assert_eq!(issuer.issued_count(), 3);
    let now = t0() + Duration::hours(23) + Duration::minutes(1);
    assert_eq!(
        parse(&renewed.cert[0]).validity().not_after.to_datetime(),
        now + Duration::hours(24)
    );
    verify_for_name(
        issuer.ca().cert_der(),
        &renewed.cert[0],
        "api.github.com",
        now,
    )
    .unwrap();

    let cached = issuer.certified_key("api.github.com").unwrap();
    assert!(Arc::ptr_eq(&renewed, &cached));
    assert_eq!(issuer.issued_count(), 3);
}

#[test]
fn leaf_never_outlives_the_ca_and_none_is_issued_after_it_expires() {
    let (issuer, clock) = issuer();
    let ca_end = issuer.ca().not_after();
    clock.set(ca_end - Duration::hours(5));
    let key = issuer.certified_key("api.github.com").unwrap();
    assert_eq!(
        parse(&key.cert[0]).validity().not_after.to_datetime(),
        ca_end
    );

    clock.set(ca_end);
    assert!(matches!(
        issuer.certified_key("api.github.com"),
        Err(TlsError::CaExpired { .. })
    ));
}

#[test]
fn concurrent_requests_for_one_host_issue_one_leaf() {
    let (issuer, _) = issuer();
    let keys: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| issuer.certified_key("api.githubcopilot.com").unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(issuer.issued_count(), 1);
    assert!(keys.iter().all(|k| Arc::ptr_eq(k, &keys[0])));
}

#[test]
fn subdomains_of_a_named_domain_only_when_asked() {
    use weir_tls::{LocalCa, OffsetDateTime};
    let ca = Arc::new(
        LocalCa::generate_for_owner(
            &[
                "githubcopilot.com".to_string(),
                "api.github.com".to_string(),
            ],
            OffsetDateTime::now_utc(),
            "test",
        )
        .unwrap(),
    );
    let exact = LeafIssuer::new(ca.clone());
    assert!(matches!(
        exact.certified_key("api.individual.githubcopilot.com"),
        Err(TlsError::HostNotPermitted { .. })
    ));
    let learned = LeafIssuer::with_subdomains_of(ca, &["githubcopilot.com"]);
    assert!(learned.covers("api.individual.githubcopilot.com"));
    let key = learned
        .certified_key("api.individual.githubcopilot.com")
        .unwrap();
    let cert = parse(&key.cert[0]);
    let names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.contains("api.individual.githubcopilot.com")),
        "{names:?}"
    );
    // Other entries stay exact; look-alikes are refused.
    for name in [
        "x.api.github.com",
        "evilgithubcopilot.com",
        "githubcopilot.com.evil.example",
    ] {
        assert!(!learned.covers(name), "{name}");
        assert!(learned.certified_key(name).is_err(), "{name}");
    }
}

/// Issue 31, item 4: new leaves are signed at most MAX_NEW_LEAVES_PER_SECOND a second (each is
/// a key pair and a signature); cached ones are always served, and the next second signs again.
#[test]
fn new_leaves_are_bounded_per_second() {
    use weir_tls::{LocalCa, MAX_NEW_LEAVES_PER_SECOND};
    let clock = Arc::new(ManualClock::new(t0()));
    let ca = Arc::new(
        LocalCa::generate_for_owner(&["githubcopilot.com".to_string()], t0(), "test").unwrap(),
    );
    let issuer = LeafIssuer::with_clock(ca, clock.clone(), LeafPolicy::default())
        .subdomains_of(&["githubcopilot.com"]);
    let name = |i: u32| format!("h{i}.githubcopilot.com");
    for i in 0..MAX_NEW_LEAVES_PER_SECOND {
        issuer.certified_key(&name(i)).unwrap();
    }
    assert!(matches!(
        issuer.certified_key(&name(MAX_NEW_LEAVES_PER_SECOND)),
        Err(TlsError::TooManyLeaves { .. })
    ));
    assert_eq!(issuer.issued_count(), u64::from(MAX_NEW_LEAVES_PER_SECOND));
    // A cached leaf still serves within the same second.
    issuer.certified_key(&name(0)).unwrap();
    clock.advance(Duration::seconds(1));
    issuer
        .certified_key(&name(MAX_NEW_LEAVES_PER_SECOND))
        .unwrap();
    assert_eq!(
        issuer.issued_count(),
        u64::from(MAX_NEW_LEAVES_PER_SECOND) + 1
    );
}
