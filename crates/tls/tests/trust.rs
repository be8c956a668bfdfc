//! The per-OS trust-store commands: exact argv for install and removal.

mod common;

use std::path::{Path, PathBuf};

use common::{ca_at, t0};
use weir_tls::{install_steps_for, remove_steps, InstallStep, Os, TrustTargets};

fn argv(step: &InstallStep) -> Vec<&str> {
    step.command.iter().map(String::as_str).collect()
}

fn targets() -> TrustTargets {
    TrustTargets {
        home: Some(PathBuf::from("/home/dev")),
        firefox_profiles: vec![PathBuf::from(
            "/home/dev/.mozilla/firefox/abc.default-release",
        )],
    }
}

const CA: &str = "/data/weir/ca.pem";

#[test]
fn debian_copies_to_local_ca_dir_then_updates_and_adds_nss() {
    let steps = install_steps_for(Os::Debian, Path::new(CA), &targets());
    let cmds: Vec<_> = steps.iter().map(argv).collect();
    assert_eq!(
        cmds,
        vec![
            vec!["cp", CA, "/usr/local/share/ca-certificates/weir-ca.crt"],
            vec!["update-ca-certificates"],
            vec![
                "certutil",
                "-d",
                "sql:/home/dev/.pki/nssdb",
                "-A",
                "-t",
                "C,,",
                "-n",
                "Weir local CA",
                "-i",
                CA
            ],
            vec![
                "certutil",
                "-d",
                "sql:/home/dev/.mozilla/firefox/abc.default-release",
                "-A",
                "-t",
                "C,,",
                "-n",
                "Weir local CA",
                "-i",
                CA
            ],
        ]
    );
    let flags: Vec<_> = steps.iter().map(|s| (s.needs_admin, s.optional)).collect();
    assert_eq!(
        flags,
        [(true, false), (true, false), (false, true), (false, true)]
    );
}

#[test]
fn fedora_uses_ca_trust_anchors() {
    let steps = install_steps_for(Os::Fedora, Path::new(CA), &TrustTargets::default());
    let cmds: Vec<_> = steps.iter().map(argv).collect();
    assert_eq!(
        cmds,
        vec![
            vec!["cp", CA, "/etc/pki/ca-trust/source/anchors/weir-ca.pem"],
            vec!["update-ca-trust", "extract"],
        ]
    );
    assert!(steps.iter().all(|s| s.needs_admin));
}

#[test]
fn macos_system_keychain_with_login_keychain_alternative() {
    let steps = install_steps_for(Os::MacOs, Path::new(CA), &targets());
    assert_eq!(
        argv(&steps[0]),
        [
            "security",
            "add-trusted-cert",
            "-d",
            "-r",
            "trustRoot",
            "-k",
            "/Library/Keychains/System.keychain",
            CA
        ]
    );
    assert!(steps[0].needs_admin && !steps[0].optional);
    assert_eq!(
        argv(&steps[1]),
        [
            "security",
            "add-trusted-cert",
            "-r",
            "trustRoot",
            "-k",
            "/home/dev/Library/Keychains/login.keychain-db",
            CA
        ]
    );
    assert!(!steps[1].needs_admin && steps[1].optional);
    // Chromium on macOS uses the keychain; only the Firefox profile gets an NSS step.
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[2].command[2],
        "sql:/home/dev/.mozilla/firefox/abc.default-release"
    );
}

#[test]
fn windows_machine_root_store_with_user_alternative() {
    let steps = install_steps_for(Os::Windows, Path::new(CA), &targets());
    let cmds: Vec<_> = steps.iter().map(argv).collect();
    assert_eq!(
        cmds,
        vec![
            vec!["certutil", "-addstore", "-f", "Root", CA],
            vec!["certutil", "-addstore", "-user", "-f", "Root", CA],
        ]
    );
    assert!(steps[0].needs_admin && !steps[1].needs_admin && steps[1].optional);
}

#[test]
fn other_unix_uses_p11_kit() {
    let steps = install_steps_for(Os::OtherUnix, Path::new(CA), &TrustTargets::default());
    assert_eq!(argv(&steps[0]), ["trust", "anchor", "--store", CA]);
}

#[test]
fn remove_steps_target_the_old_certificate_by_thumbprint() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old-ca.pem");
    let ca = ca_at(t0());
    std::fs::write(&old, ca.cert_pem()).unwrap();
    let der = ca.cert_der();
    let thumb: String = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let old_str = old.to_str().unwrap();

    let win = remove_steps(Os::Windows, &old, &targets()).unwrap();
    assert_eq!(argv(&win[0]), ["certutil", "-delstore", "Root", &thumb]);
    assert_eq!(
        argv(&win[1]),
        ["certutil", "-delstore", "-user", "Root", &thumb]
    );

    let mac = remove_steps(Os::MacOs, &old, &targets()).unwrap();
    assert_eq!(
        argv(&mac[0]),
        ["security", "remove-trusted-cert", "-d", old_str]
    );
    assert_eq!(
        argv(&mac[1]),
        [
            "security",
            "delete-certificate",
            "-Z",
            &thumb,
            "-t",
            "/Library/Keychains/System.keychain"
        ]
    );

    let deb = remove_steps(Os::Debian, &old, &targets()).unwrap();
    let cmds: Vec<_> = deb.iter().map(argv).collect();
    assert_eq!(
        cmds[0],
        ["rm", "-f", "/usr/local/share/ca-certificates/weir-ca.crt"]
    );
    assert_eq!(cmds[1], ["update-ca-certificates", "--fresh"]);
    assert_eq!(
        cmds[2],
        [
            "certutil",
            "-d",
            "sql:/home/dev/.pki/nssdb",
            "-D",
            "-n",
            "Weir local CA"
        ]
    );

    assert!(remove_steps(Os::Debian, &dir.path().join("missing.pem"), &targets()).is_err());
}

#[test]
fn os_release_classification() {
    let debian = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n";
    assert_eq!(Os::from_os_release(debian), Os::Debian);
    assert_eq!(
        Os::from_os_release("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"),
        Os::Debian
    );
    assert_eq!(
        Os::from_os_release("ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"),
        Os::Fedora
    );
    assert_eq!(Os::from_os_release("ID=fedora\n"), Os::Fedora);
    assert_eq!(Os::from_os_release("ID=arch\n"), Os::OtherUnix);
    // VERSION_ID must not be mistaken for ID.
    assert_eq!(
        Os::from_os_release("VERSION_ID=debian\nID=arch\n"),
        Os::OtherUnix
    );
}

#[test]
fn detect_finds_firefox_profiles_with_cert_db() {
    let home = tempfile::tempdir().unwrap();
    let classic = home.path().join(".mozilla/firefox");
    let snap = home.path().join("snap/firefox/common/.mozilla/firefox");
    for profile in [
        classic.join("b.default"),
        classic.join("a.dev"),
        snap.join("s.default"),
    ] {
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(profile.join("cert9.db"), b"").unwrap();
    }
    std::fs::create_dir_all(classic.join("Crash Reports")).unwrap();

    let found = TrustTargets::detect_in(Os::Debian, Some(home.path().to_path_buf()));
    assert_eq!(
        found.firefox_profiles,
        [
            classic.join("a.dev"),
            classic.join("b.default"),
            snap.join("s.default")
        ]
    );
    // Windows browsers use the Windows store: no profile scan there.
    let win = TrustTargets::detect_in(Os::Windows, Some(home.path().to_path_buf()));
    assert!(win.firefox_profiles.is_empty());
    assert!(TrustTargets::detect_in(Os::Debian, None)
        .firefox_profiles
        .is_empty());
}
