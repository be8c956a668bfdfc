//! The keyring daemon dies between two calls (gnome-keyring 42 aborts on an upstream race when
//! clients connect and disconnect quickly, GNOME/gnome-keyring#196; a CI run lost its daemon
//! that way). The next call still finds the secret: the bus starts the daemon again
//! (`scripts/with-keychain.sh` here, systemd or D-Bus activation on a desktop), and a call that
//! meets the gap is asked once more.
//!
//! Alone in its binary because it kills the session's daemon, which every other test of a
//! binary would share. Only meaningful under `scripts/with-keychain.sh`, whose bus restarts the
//! daemon unlocked: elsewhere it would kill a developer's own keyring, so it skips.

mod common;

use std::process::Command;

#[test]
fn a_daemon_killed_between_calls_loses_nothing() {
    if std::env::var("WEIR_KEYCHAIN_BUS").ok() != std::env::var("DBUS_SESSION_BUS_ADDRESS").ok() {
        eprintln!(
            "SKIPPED: only runs under scripts/with-keychain.sh (it kills the keyring daemon)"
        );
        return;
    }
    let Some(kc) = common::real_keychain("daemon-restart") else {
        return;
    };
    kc.set("acct", "gho_survives").unwrap();
    for round in 1..=3 {
        let pid = secrets_owner_pid();
        // SIGABRT: what the upstream assertion does to the daemon.
        let killed = Command::new("kill")
            .args(["-ABRT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success(), "round {round}: could not kill {pid}");
        // No wait: the call may meet the dead daemon, the unowned name, or the new daemon.
        assert_eq!(
            kc.get("acct").unwrap().as_deref(),
            Some("gho_survives"),
            "round {round}"
        );
        assert_ne!(
            secrets_owner_pid(),
            pid,
            "round {round}: a new daemon answered"
        );
    }
    kc.delete("acct").unwrap();
    assert_eq!(kc.get("acct").unwrap(), None);
}

/// The pid of the process that owns org.freedesktop.secrets on this session bus, as the bus
/// itself reports it (so nothing outside this session is touched).
fn secrets_owner_pid() -> u32 {
    let out = Command::new("dbus-send")
        .args([
            "--session",
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetConnectionUnixProcessID",
            "string:org.freedesktop.secrets",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "no owner of org.freedesktop.secrets: {text}"
    );
    text.split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text}"))
}
