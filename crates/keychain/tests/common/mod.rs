//! Shared by the keychain test binaries: the rule for when a missing Secret Service is a
//! failure (always) or a skip (only with WEIR_SKIP_KEYCHAIN_TESTS=1).

#![allow(dead_code)] // each test binary uses a different subset

use weir_keychain::Keychain;

/// Set to 1 to skip the tests that need a real Secret Service (e.g. on a CI runner without
/// gnome-keyring). Without it they fail, loudly, so a missing keychain is never mistaken for
/// a pass.
pub const SKIP_VAR: &str = "WEIR_SKIP_KEYCHAIN_TESTS";

pub fn skipping() -> bool {
    std::env::var(SKIP_VAR).is_ok_and(|v| v == "1")
}

/// A keychain under a service name unique to this test and process, after checking that a
/// usable Secret Service is there. `None` means: skip (the variable is set).
pub fn real_keychain(test: &str) -> Option<Keychain> {
    let keychain = Keychain::new(&format!("weir-test-{test}-{}", std::process::id()));
    match keychain.probe() {
        Ok(()) => Some(keychain),
        Err(e) if skipping() => {
            eprintln!("SKIPPED {test}: {SKIP_VAR}=1 and no usable keychain ({e})");
            None
        }
        Err(e) => panic!(
            "no usable keychain for {test}: {e}\nfix: {}\n\nRun the keychain tests as \
             `scripts/with-keychain.sh cargo test -p weir-keychain`, or set {SKIP_VAR}=1 to \
             skip them.",
            e.fix()
        ),
    }
}

/// Path of the wrapper script, from this crate's directory.
pub fn with_keychain_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/with-keychain.sh")
}

/// Whether the programs the session-spawning tests need are installed; if not, fail unless
/// skipping is allowed. `false` means: skip.
pub fn session_tools_present(test: &str) -> bool {
    let missing: Vec<&str> = ["dbus-run-session", "gnome-keyring-daemon", "dbus-send"]
        .into_iter()
        .filter(|tool| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    if skipping() {
        eprintln!("SKIPPED {test}: {SKIP_VAR}=1 and {missing:?} not installed");
        return false;
    }
    panic!(
        "{test} needs {missing:?}: apt-get install -y --no-install-recommends dbus-x11 \
         gnome-keyring libsecret-tools (or set {SKIP_VAR}=1 to skip)"
    );
}
