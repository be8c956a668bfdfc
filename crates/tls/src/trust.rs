//! The commands that make an operating system (and NSS-based browsers) trust Weir's CA, or stop
//! trusting an old one on rotation. Nothing here runs them: the caller shows or runs each step,
//! prefixing `sudo` (or elevating) when `needs_admin` is set.

use std::path::{Path, PathBuf};

use crate::ca::colon_hex;
use crate::TlsError;

/// The nickname the CA gets in NSS databases (Chromium and Firefox on Linux/macOS).
pub const NSS_NICKNAME: &str = "Weir local CA";
const DEBIAN_ANCHOR: &str = "/usr/local/share/ca-certificates/weir-ca.crt";
const FEDORA_ANCHOR: &str = "/etc/pki/ca-trust/source/anchors/weir-ca.pem";
const MAC_SYSTEM_KEYCHAIN: &str = "/Library/Keychains/System.keychain";

/// Operating-system families whose trust stores are set up differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Debian, Ubuntu and derivatives (`update-ca-certificates`).
    Debian,
    /// Fedora, RHEL, CentOS, Rocky, Alma (`update-ca-trust`).
    Fedora,
    /// Any other Linux/Unix: p11-kit's `trust anchor` (Arch, openSUSE, ...).
    OtherUnix,
    MacOs,
    Windows,
}

impl Os {
    /// The OS this binary runs on (on Linux, the distribution family from `/etc/os-release`).
    pub fn current() -> Os {
        #[cfg(target_os = "macos")]
        {
            Os::MacOs
        }
        #[cfg(target_os = "windows")]
        {
            Os::Windows
        }
        #[cfg(not(any(target_os = "macos", target_os = "windows")))]
        {
            std::fs::read_to_string("/etc/os-release")
                .map(|text| Os::from_os_release(&text))
                .unwrap_or(Os::OtherUnix)
        }
    }

    /// Classifies a Linux distribution from the text of `/etc/os-release` (`ID`, then `ID_LIKE`).
    pub fn from_os_release(text: &str) -> Os {
        let field = |key: &str| {
            text.lines()
                .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches(['"', '\'']).to_ascii_lowercase())
                .next()
                .unwrap_or_default()
        };
        let id = field("ID");
        let like = field("ID_LIKE");
        for word in std::iter::once(id.as_str()).chain(like.split_whitespace()) {
            match word {
                "debian" | "ubuntu" => return Os::Debian,
                "fedora" | "rhel" | "centos" => return Os::Fedora,
                _ => {}
            }
        }
        Os::OtherUnix
    }
}

/// One command to run, with what it does and whether it needs administrator rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallStep {
    pub description: String,
    /// Program and arguments, not shell-quoted: run it directly, not through a shell.
    pub command: Vec<String>,
    pub needs_admin: bool,
    /// True for steps that may be skipped: a browser store, or an alternative to the step before
    /// (e.g. the per-user store when administrator rights are not available).
    pub optional: bool,
}

impl InstallStep {
    fn new(description: &str, command: &[&str], needs_admin: bool, optional: bool) -> Self {
        Self {
            description: description.to_owned(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            needs_admin,
            optional,
        }
    }
}

/// Per-user locations the steps refer to: the home directory and any Firefox profiles found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustTargets {
    pub home: Option<PathBuf>,
    pub firefox_profiles: Vec<PathBuf>,
}

impl TrustTargets {
    /// Reads `HOME` (or `USERPROFILE`) and looks for Firefox profiles there (see
    /// [`TrustTargets::detect_in`]).
    pub fn detect(os: Os) -> Self {
        let home = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from);
        Self::detect_in(os, home)
    }

    /// Looks under `home` for Firefox profiles (directories holding an NSS `cert9.db`) in the
    /// usual places for `os`, including Snap and Flatpak installs.
    pub fn detect_in(os: Os, home: Option<PathBuf>) -> Self {
        let roots: &[&str] = match os {
            Os::MacOs => &["Library/Application Support/Firefox/Profiles"],
            Os::Windows => &[],
            _ => &[
                ".mozilla/firefox",
                "snap/firefox/common/.mozilla/firefox",
                ".var/app/org.mozilla.firefox/.mozilla/firefox",
            ],
        };
        let mut firefox_profiles = Vec::new();
        if let Some(home) = &home {
            for root in roots {
                let Ok(entries) = std::fs::read_dir(home.join(root)) else {
                    continue;
                };
                let mut found: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join("cert9.db").is_file())
                    .collect();
                found.sort();
                firefox_profiles.extend(found);
            }
        }
        Self {
            home,
            firefox_profiles,
        }
    }
}

/// The steps that install `ca_cert_path` as a trusted root on `os`, for the current user's
/// browsers too (see [`TrustTargets::detect`]).
pub fn install_steps(os: Os, ca_cert_path: &Path) -> Vec<InstallStep> {
    install_steps_for(os, ca_cert_path, &TrustTargets::detect(os))
}

/// As [`install_steps`], with the per-user locations given.
pub fn install_steps_for(os: Os, ca_cert_path: &Path, targets: &TrustTargets) -> Vec<InstallStep> {
    let path = ca_cert_path.to_string_lossy();
    let path = path.as_ref();
    let mut steps = match os {
        Os::Debian => vec![
            InstallStep::new(
                "Copy the CA into the system certificate directory",
                &["cp", path, DEBIAN_ANCHOR],
                true,
                false,
            ),
            InstallStep::new(
                "Rebuild the system trust store",
                &["update-ca-certificates"],
                true,
                false,
            ),
        ],
        Os::Fedora => vec![
            InstallStep::new(
                "Copy the CA into the system trust anchors",
                &["cp", path, FEDORA_ANCHOR],
                true,
                false,
            ),
            InstallStep::new(
                "Rebuild the system trust store",
                &["update-ca-trust", "extract"],
                true,
                false,
            ),
        ],
        Os::OtherUnix => vec![InstallStep::new(
            "Add the CA to the system trust store (p11-kit)",
            &["trust", "anchor", "--store", path],
            true,
            false,
        )],
        Os::MacOs => {
            let mut steps = vec![InstallStep::new(
                "Trust the CA for all users (System keychain)",
                &[
                    "security",
                    "add-trusted-cert",
                    "-d",
                    "-r",
                    "trustRoot",
                    "-k",
                    MAC_SYSTEM_KEYCHAIN,
                    path,
                ],
                true,
                false,
            )];
            if let Some(home) = &targets.home {
                let login = home.join("Library/Keychains/login.keychain-db");
                let login = login.to_string_lossy();
                steps.push(InstallStep::new(
                    "Alternative without admin rights: trust the CA for this user only (login \
                     keychain; macOS asks for confirmation)",
                    &[
                        "security",
                        "add-trusted-cert",
                        "-r",
                        "trustRoot",
                        "-k",
                        &login,
                        path,
                    ],
                    false,
                    true,
                ));
            }
            steps
        }
        Os::Windows => vec![
            InstallStep::new(
                "Trust the CA for all users (machine Root store)",
                &["certutil", "-addstore", "-f", "Root", path],
                true,
                false,
            ),
            InstallStep::new(
                "Alternative without admin rights: trust the CA for this user only (Windows \
                 asks for confirmation)",
                &["certutil", "-addstore", "-user", "-f", "Root", path],
                false,
                true,
            ),
        ],
    };
    for db in nss_databases(os, targets) {
        let db_arg = format!("sql:{}", db.display());
        steps.push(InstallStep::new(
            &format!(
                "Trust the CA in the NSS database {} (browsers; needs certutil from libnss3-tools \
                 / nss-tools / brew nss)",
                db.display()
            ),
            &[
                "certutil",
                "-d",
                &db_arg,
                "-A",
                "-t",
                "C,,",
                "-n",
                NSS_NICKNAME,
                "-i",
                path,
            ],
            false,
            true,
        ));
    }
    steps
}

/// The steps that stop `os` trusting an old CA (on rotation; run them before installing the new
/// one, because NSS finds the old one by nickname). `old_ca_cert_path` must still hold the old
/// certificate: macOS and Windows remove it by its SHA-1 thumbprint, read from that file.
pub fn remove_steps(
    os: Os,
    old_ca_cert_path: &Path,
    targets: &TrustTargets,
) -> Result<Vec<InstallStep>, TlsError> {
    let io = |source| TlsError::Io {
        action: "read old CA certificate",
        path: old_ca_cert_path.to_path_buf(),
        source,
    };
    let pem_text = std::fs::read_to_string(old_ca_cert_path).map_err(io)?;
    let pem = pem::parse(&pem_text).map_err(|e| TlsError::InvalidCaCert(e.to_string()))?;
    let sha1 = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, pem.contents());
    let thumb = colon_hex(sha1.as_ref()).replace(':', "");
    let path = old_ca_cert_path.to_string_lossy();
    let path = path.as_ref();
    let mut steps = match os {
        Os::Debian => vec![
            InstallStep::new(
                "Remove the CA from the system certificate directory",
                &["rm", "-f", DEBIAN_ANCHOR],
                true,
                false,
            ),
            InstallStep::new(
                "Rebuild the system trust store, dropping removed CAs",
                &["update-ca-certificates", "--fresh"],
                true,
                false,
            ),
        ],
        Os::Fedora => vec![
            InstallStep::new(
                "Remove the CA from the system trust anchors",
                &["rm", "-f", FEDORA_ANCHOR],
                true,
                false,
            ),
            InstallStep::new(
                "Rebuild the system trust store",
                &["update-ca-trust", "extract"],
                true,
                false,
            ),
        ],
        Os::OtherUnix => vec![InstallStep::new(
            "Remove the CA from the system trust store (p11-kit)",
            &["trust", "anchor", "--remove", path],
            true,
            false,
        )],
        Os::MacOs => {
            let mut steps = vec![
                InstallStep::new(
                    "Remove the all-users trust setting for the old CA",
                    &["security", "remove-trusted-cert", "-d", path],
                    true,
                    false,
                ),
                InstallStep::new(
                    "Delete the old CA from the System keychain",
                    &[
                        "security",
                        "delete-certificate",
                        "-Z",
                        &thumb,
                        "-t",
                        MAC_SYSTEM_KEYCHAIN,
                    ],
                    true,
                    false,
                ),
            ];
            if let Some(home) = &targets.home {
                let login = home.join("Library/Keychains/login.keychain-db");
                steps.push(InstallStep::new(
                    "Delete the old CA from this user's login keychain (if it was put there)",
                    &[
                        "security",
                        "delete-certificate",
                        "-Z",
                        &thumb,
                        "-t",
                        &login.to_string_lossy(),
                    ],
                    false,
                    true,
                ));
            }
            steps
        }
        Os::Windows => vec![
            InstallStep::new(
                "Delete the old CA from the machine Root store",
                &["certutil", "-delstore", "Root", &thumb],
                true,
                false,
            ),
            InstallStep::new(
                "Delete the old CA from this user's Root store (if it was put there)",
                &["certutil", "-delstore", "-user", "Root", &thumb],
                false,
                true,
            ),
        ],
    };
    for db in nss_databases(os, targets) {
        let db_arg = format!("sql:{}", db.display());
        steps.push(InstallStep::new(
            &format!("Delete the old CA from the NSS database {}", db.display()),
            &["certutil", "-d", &db_arg, "-D", "-n", NSS_NICKNAME],
            false,
            true,
        ));
    }
    Ok(steps)
}

/// NSS databases to update: Chromium's shared one on Linux, and every Firefox profile found.
/// (Windows browsers use the Windows store; Chromium on macOS uses the keychain.)
fn nss_databases(os: Os, targets: &TrustTargets) -> Vec<PathBuf> {
    let mut dbs = Vec::new();
    if matches!(os, Os::Debian | Os::Fedora | Os::OtherUnix) {
        if let Some(home) = &targets.home {
            dbs.push(home.join(".pki/nssdb"));
        }
    }
    if os != Os::Windows {
        dbs.extend(targets.firefox_profiles.iter().cloned());
    }
    dbs
}
