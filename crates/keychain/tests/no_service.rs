//! With no reachable D-Bus session bus, every call reports `NoService` with a usable fix.
//! Needs nothing installed. This binary holds a single test because it changes the process
//! environment (`DBUS_SESSION_BUS_ADDRESS`), which other tests in the same process would see.

use weir_keychain::{Keychain, KeychainError};

fn assert_no_service(result: Result<(), KeychainError>, case: &str) {
    match result {
        Err(e @ KeychainError::NoService { .. }) => {
            assert_eq!(e.code(), "keychain_unavailable");
            assert!(e.fix().contains("dbus-run-session"), "{case}: {}", e.fix());
            assert!(e.fix().contains("KeePassXC"), "{case}: {}", e.fix());
            assert!(!e.detail().is_empty(), "{case}");
        }
        other => panic!("{case}: expected NoService, got {other:?}"),
    }
}

#[test]
fn unreachable_bus_is_reported_as_no_service() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix:path={}/no-such-bus", dir.path().display());
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &nowhere);

    let kc = Keychain::new("weir-test-no-service");
    assert_no_service(kc.probe(), "probe, bus pointing nowhere");
    assert_no_service(kc.set("a", "s3cret"), "set");
    assert_no_service(kc.get("a").map(|_| ()), "get");
    assert_no_service(kc.delete("a"), "delete");
    let err = kc.set("a", "s3cret").unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret"));

    // No address at all and no X display to autolaunch a bus from.
    std::env::remove_var("DBUS_SESSION_BUS_ADDRESS");
    std::env::remove_var("DISPLAY");
    assert_no_service(kc.probe(), "probe, no bus address");
}
