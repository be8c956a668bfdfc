//! Set/get/delete/probe against a real Secret Service (gnome-keyring under
//! `scripts/with-keychain.sh`). Fails without one unless WEIR_SKIP_KEYCHAIN_TESTS=1.

mod common;

use weir_keychain::Keychain;

#[test]
fn set_get_overwrite_delete_round_trip() {
    let Some(kc) = common::real_keychain("round-trip") else {
        return;
    };
    assert_eq!(kc.get("acct").unwrap(), None, "fresh service has no entry");

    kc.set("acct", "gho_first").unwrap();
    assert_eq!(kc.get("acct").unwrap().as_deref(), Some("gho_first"));

    // Overwrite replaces rather than adding a second (ambiguous) entry.
    kc.set("acct", "gho_second").unwrap();
    assert_eq!(kc.get("acct").unwrap().as_deref(), Some("gho_second"));
    assert_eq!(
        kc.get_secret("acct")
            .unwrap()
            .map(|s| s.expose().to_owned()),
        Some("gho_second".to_owned())
    );

    kc.delete("acct").unwrap();
    assert_eq!(kc.get("acct").unwrap(), None);
}

#[test]
fn deleting_a_missing_entry_is_ok_and_repeatable() {
    let Some(kc) = common::real_keychain("delete-missing") else {
        return;
    };
    kc.delete("never-set").unwrap();
    kc.set("once", "v").unwrap();
    kc.delete("once").unwrap();
    kc.delete("once").unwrap();
    assert_eq!(kc.get("once").unwrap(), None);
}

#[test]
fn accounts_and_services_are_separate() {
    let Some(a) = common::real_keychain("sep-a") else {
        return;
    };
    let b = Keychain::new(&format!("{}-other", a.service()));
    a.set("job-1", "secret-a1").unwrap();
    a.set("job-2", "secret-a2").unwrap();
    b.set("job-1", "secret-b1").unwrap();

    assert_eq!(a.get("job-1").unwrap().as_deref(), Some("secret-a1"));
    assert_eq!(a.get("job-2").unwrap().as_deref(), Some("secret-a2"));
    assert_eq!(b.get("job-1").unwrap().as_deref(), Some("secret-b1"));
    assert_eq!(b.get("job-2").unwrap(), None);

    a.delete("job-1").unwrap();
    assert_eq!(b.get("job-1").unwrap().as_deref(), Some("secret-b1"));
    for (kc, acct) in [(&a, "job-2"), (&b, "job-1")] {
        kc.delete(acct).unwrap();
    }
}

#[test]
fn unicode_and_long_secrets_survive() {
    let Some(kc) = common::real_keychain("unicode") else {
        return;
    };
    let long = "x".repeat(8 * 1024);
    let unicode = "pässwörd-🔑-\u{0}-end";
    for (acct, value) in [("long", long.as_str()), ("unicode", unicode)] {
        kc.set(acct, value).unwrap();
        assert_eq!(kc.get(acct).unwrap().as_deref(), Some(value), "{acct}");
        kc.delete(acct).unwrap();
    }
}

#[test]
fn probe_leaves_no_entries_behind() {
    let Some(kc) = common::real_keychain("probe") else {
        return;
    };
    kc.probe().unwrap();
    kc.probe().unwrap();
    // The probe accounts are named weir-probe-*; list them with the Secret Service's own
    // search so a leftover would be visible.
    let out = std::process::Command::new("secret-tool")
        .args(["search", "--all", "service", kc.service()])
        .output()
        .expect("secret-tool (libsecret-tools) is installed");
    let listing =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !listing.contains("weir-probe"),
        "probe entries left behind:\n{listing}"
    );
}

#[test]
fn debug_output_never_contains_the_secret() {
    let Some(kc) = common::real_keychain("debug") else {
        return;
    };
    kc.set("acct", "gho_must_not_leak").unwrap();
    let secret = kc.get_secret("acct").unwrap();
    let printed = format!("{kc:?} {secret:?}");
    assert!(!printed.contains("gho_must_not_leak"), "{printed}");
    assert!(printed.contains("Secret(***)"), "{printed}");
    kc.delete("acct").unwrap();
}

/// Many callers at once, as a busy Weir's queue and account workers are: each call opens its
/// own connection and session, and no caller may see another's value or lose its own. (The
/// daemon race that answers "the session wrapping the secret does not exist" under a loaded
/// suite, GNOME/gnome-keyring#196, does not show reliably here; the decision to ask again is
/// pinned by `platform::linux`'s unit test.)
#[test]
fn parallel_callers_each_get_back_what_they_stored() {
    let Some(kc) = common::real_keychain("parallel") else {
        return;
    };
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let kc = kc.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    let account = format!("job-{w}-{i}");
                    let value = format!("gho_{w}_{i}");
                    kc.set(&account, &value).unwrap();
                    assert_eq!(kc.get(&account).unwrap().as_deref(), Some(value.as_str()));
                    kc.delete(&account).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker's keychain call failed");
    }
}
