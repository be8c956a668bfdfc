//! Two installs (two data dirs) on one machine keep their own keychain entries: a second
//! `--data-dir` must not replace the first one's CA key or control secret. Real Secret Service:
//! `scripts/with-keychain.sh cargo test -p weir --test secrets_namespace`.

use std::path::Path;
use weir::intercept::CaStore;
use weir::secrets::{Account, Namespace, SERVICE_ENV};
use weir_keychain::Keychain;

/// Whether the Secret Service works (skipped only when asked to with WEIR_SKIP_KEYCHAIN_TESTS=1).
fn keychain_works() -> bool {
    assert!(
        std::env::var_os(SERVICE_ENV).is_none(),
        "{SERVICE_ENV} names the service outright; unset it for this test"
    );
    match Keychain::new(&format!("weir-test-ns-{}", std::process::id())).probe() {
        Ok(()) => true,
        Err(_) if std::env::var("WEIR_SKIP_KEYCHAIN_TESTS").is_ok_and(|v| v == "1") => false,
        Err(e) => panic!(
            "no usable keychain: {e}\nfix: {}\nRun as `scripts/with-keychain.sh cargo test -p weir --test secrets_namespace`",
            e.fix()
        ),
    }
}

fn settings() -> weir::config::Settings {
    weir::config::parse_str(
        "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n",
        "test.toml",
    )
    .expect("test config")
}

async fn control_secret_of(data_dir: &Path) -> String {
    let handle = weir::start(weir::EngineOptions::new(settings(), data_dir.to_path_buf()))
        .await
        .expect("engine starts");
    let secret = handle.control_secret().to_string();
    handle.shutdown().await;
    secret
}

fn stored(data_dir: &Path, account: Account) -> Option<String> {
    Namespace::for_data_dir(data_dir)
        .keychain()
        .get(account.as_str())
        .expect("keychain read")
}

#[tokio::test]
async fn two_data_dirs_keep_their_own_control_secret_and_identity_key() {
    if !keychain_works() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert_ne!(Namespace::for_data_dir(&a), Namespace::for_data_dir(&b));

    let first_a = control_secret_of(&a).await;
    let first_b = control_secret_of(&b).await;
    assert_ne!(first_a, first_b);
    assert_eq!(
        stored(&a, Account::ControlSecret).as_deref(),
        Some(first_a.as_str())
    );
    assert_eq!(
        stored(&b, Account::ControlSecret).as_deref(),
        Some(first_b.as_str())
    );
    assert_ne!(
        stored(&a, Account::IdentityKey),
        stored(&b, Account::IdentityKey)
    );
    // A restart of the first install finds its own secret, untouched by the second.
    assert_eq!(control_secret_of(&a).await, first_a);
    assert_eq!(control_secret_of(&b).await, first_b);
}

#[test]
fn two_data_dirs_keep_their_own_ca_key() {
    if !keychain_works() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let hosts = settings().intercept_hosts();
    let ca_a = CaStore::for_data_dir(&a).load_or_create(&hosts).unwrap();
    let ca_b = CaStore::for_data_dir(&b).load_or_create(&hosts).unwrap();
    assert!(ca_a.created && ca_b.created);
    assert_ne!(ca_a.ca.fingerprint_sha256(), ca_b.ca.fingerprint_sha256());
    assert_ne!(
        stored(&a, Account::LocalCaKey),
        stored(&b, Account::LocalCaKey)
    );
    // Before namespacing, creating b's CA overwrote a's key: loading a then failed with
    // "the key does not match the certificate".
    let again = CaStore::for_data_dir(&a)
        .load()
        .expect("a's CA still loads");
    assert_eq!(again.fingerprint_sha256(), ca_a.ca.fingerprint_sha256());
    // A rotation of b leaves a alone.
    CaStore::for_data_dir(&b).rotate(&hosts).unwrap();
    assert!(CaStore::for_data_dir(&a).load().is_ok());
}

/// Only inside scripts/with-keychain.sh's throwaway keyring: this test writes the service `weir`
/// itself (the pre-namespacing entry), which must never happen in a developer's own keyring.
fn in_private_keyring() -> bool {
    let bus = std::env::var("WEIR_KEYCHAIN_BUS").ok();
    bus.is_some() && bus == std::env::var("DBUS_SESSION_BUS_ADDRESS").ok()
}

#[test]
fn a_ca_key_kept_before_namespacing_is_adopted_only_for_its_own_certificate() {
    if !keychain_works() || !in_private_keyring() {
        eprintln!("skipped: needs scripts/with-keychain.sh (writes the service `weir`)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = settings().intercept_hosts();
    let legacy = Namespace::named(weir::secrets::DEFAULT_SERVICE);
    // An install with another data dir, made before namespacing: its key under `weir`.
    let old = dir.path().join("old");
    let made = CaStore::new(&old, &legacy).load_or_create(&hosts).unwrap();
    assert!(made.created);
    assert_eq!(
        stored(&old, Account::LocalCaKey),
        None,
        "not yet in its own namespace"
    );
    let loaded = CaStore::for_data_dir(&old)
        .load()
        .expect("the old key is found");
    assert_eq!(loaded.fingerprint_sha256(), made.ca.fingerprint_sha256());
    assert!(
        stored(&old, Account::LocalCaKey).is_some(),
        "copied into this install's own entry"
    );
    assert!(
        legacy
            .keychain()
            .get(Account::LocalCaKey.as_str())
            .unwrap()
            .is_some(),
        "the old entry stays for the default install"
    );
    // Another install whose certificate does not match the key under `weir`: never adopted.
    let other = dir.path().join("other");
    CaStore::new(&other, &Namespace::named("weir-test-scratch"))
        .load_or_create(&hosts)
        .unwrap();
    let err = CaStore::for_data_dir(&other).load().unwrap_err();
    assert!(
        matches!(err, weir::intercept::CaError::NoKey { .. }),
        "{err}"
    );
    assert_eq!(stored(&other, Account::LocalCaKey), None);
}
