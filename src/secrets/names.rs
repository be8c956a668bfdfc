//! Every keychain service and account name Weir uses, in one place, and the rule that keeps two
//! installs (two `--data-dir`s) from sharing entries.
//!
//! The default data dir keeps the historical service name `weir`, so existing installs keep
//! their control secret, identity key, GitHub token and CA key. Any other data dir gets
//! `weir:<12 hex digits of BLAKE3(canonical data dir)>`. `WEIR_KEYCHAIN_SERVICE` (tests, a
//! deliberately shared second install) names the service outright.

use std::path::{Component, Path, PathBuf};

/// The service of the default data dir (and of every install before namespacing existed).
pub const DEFAULT_SERVICE: &str = "weir";

/// Environment variable that names the service outright, overriding the data-dir rule.
pub const SERVICE_ENV: &str = "WEIR_KEYCHAIN_SERVICE";

/// Prefix of a queued create's replay-credential account (`queue-<24 hex digits of its key>`).
pub const QUEUE_ACCOUNT_PREFIX: &str = "queue-";

/// The fixed accounts Weir keeps in its service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Account {
    /// The per-install control secret (`X-Weir-Secret`), read by the CLI and the tray.
    ControlSecret,
    /// The per-install key of the identity hash (cache, coalescing and dedupe keys).
    IdentityKey,
    /// A GitHub token stored through `PUT /_weir/api/token`.
    GithubToken,
    /// The local CA's private key (PKCS#8 PEM).
    LocalCaKey,
    /// A random, non-secret id of this install, answered by `/_weir/api/health`: the CLI sends
    /// the control secret only to a Weir that names the id kept here.
    InstallId,
    /// The AES-256-GCM key the persisted cache's records are sealed with (`cache.sqlite`).
    CacheKey,
    /// The team key that signs and checks team signals (64 hex digits, shared by the team).
    TeamKey,
    /// The NATS login for team signals (JSON: a token or a user and password).
    TeamCredentials,
    /// The team gateway's admin token, when no `gateway.admin_token_file` names one.
    GatewayAdminToken,
}

impl Account {
    /// Every fixed account (what a migration between stores looks for).
    pub const ALL: [Account; 9] = [
        Account::ControlSecret,
        Account::IdentityKey,
        Account::GithubToken,
        Account::LocalCaKey,
        Account::InstallId,
        Account::CacheKey,
        Account::TeamKey,
        Account::TeamCredentials,
        Account::GatewayAdminToken,
    ];

    /// The account name as stored in the keychain.
    pub const fn as_str(self) -> &'static str {
        match self {
            Account::ControlSecret => "control-secret",
            Account::IdentityKey => "identity-key",
            Account::GithubToken => "github-token",
            Account::LocalCaKey => "local-ca-key",
            Account::InstallId => "install-id",
            Account::CacheKey => "cache-key",
            Account::TeamKey => "team-key",
            Account::TeamCredentials => "team-credentials",
            Account::GatewayAdminToken => "gateway-admin-token",
        }
    }
}

impl std::fmt::Display for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The account of a queued create's replay credential, from its dedupe key.
pub fn queue_account(key: &str) -> String {
    let short = key.get(..24).unwrap_or(key);
    format!("{QUEUE_ACCOUNT_PREFIX}{short}")
}

/// The keychain service one install's entries live under, and (for an install with a data
/// dir) where the same entries sit as files when there is no keychain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace {
    service: String,
    files: Option<PathBuf>,
}

impl Namespace {
    /// The namespace of the install whose data dir is `data_dir`: `WEIR_KEYCHAIN_SERVICE` when
    /// set, else [`Namespace::derive`] against the OS default data dir.
    pub fn for_data_dir(data_dir: &Path) -> Namespace {
        let explicit = std::env::var(SERVICE_ENV).ok();
        // Without an OS default data dir, every data dir is "another" one (hashed name).
        let default = crate::paths::default_data_dir().unwrap_or_default();
        let mut ns = Namespace::derive(data_dir, &default, explicit.as_deref());
        ns.files = Some(files_dir(data_dir, &ns.service));
        ns
    }

    /// The pure rule: `explicit` (when not blank) wins; the default data dir gets
    /// [`DEFAULT_SERVICE`]; any other gets `weir:<hash of its canonical path>`.
    pub fn derive(data_dir: &Path, default_data_dir: &Path, explicit: Option<&str>) -> Namespace {
        if let Some(s) = explicit.map(str::trim).filter(|s| !s.is_empty()) {
            return Namespace::named(s);
        }
        let dir = canonical(data_dir);
        if dir == canonical(default_data_dir) {
            return Namespace::named(DEFAULT_SERVICE);
        }
        let hash = blake3::hash(dir.as_os_str().as_encoded_bytes());
        let short = &hash.to_hex()[..12];
        Namespace::named(&format!("{DEFAULT_SERVICE}:{short}"))
    }

    /// A namespace with this exact service name.
    pub fn named(service: &str) -> Namespace {
        Namespace {
            service: service.to_string(),
            files: None,
        }
    }

    /// The keychain service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// A handle on this namespace's entries where they live now: the file store when its
    /// directory exists (see [`mod@super::choose`], which creates it), else the OS keychain. Every
    /// reader (the engine, the CLI, the tray, the CA store) finds them the same way.
    pub fn keychain(&self) -> weir_keychain::Keychain {
        match self.files.as_deref().filter(|d| d.is_dir()) {
            Some(dir) => weir_keychain::Keychain::in_files(&self.service, dir),
            None => self.os_keychain(),
        }
    }

    /// This namespace's entries in the OS keychain, whatever the file store holds.
    pub fn os_keychain(&self) -> weir_keychain::Keychain {
        weir_keychain::Keychain::new(&self.service)
    }

    /// This namespace's entries as files (`<data dir>/secrets/<service>`), for a namespace made
    /// from a data dir.
    pub fn file_keychain(&self) -> Option<weir_keychain::Keychain> {
        self.files
            .as_deref()
            .map(|d| weir_keychain::Keychain::in_files(&self.service, d))
    }

    /// `<data dir>/secrets/<service>`, where the file store keeps this namespace's entries.
    pub fn files_dir(&self) -> Option<&Path> {
        self.files.as_deref()
    }
}

/// `<data dir>/secrets/<service>`, the service made a portable file name (`weir:1a2b…` →
/// `weir_1a2b…`: Windows has no `:` in names).
fn files_dir(data_dir: &Path, service: &str) -> PathBuf {
    let name: String = service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    data_dir.join("secrets").join(name.trim_start_matches('.'))
}

/// `path` made absolute with symlinks resolved as far as it exists, so a data dir names the
/// same namespace before and after it is created.
fn canonical(path: &Path) -> PathBuf {
    let absolute = lexical(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    let mut missing = Vec::new();
    let mut existing = absolute.as_path();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return missing.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// `.` and `..` removed without touching the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_data_dir_keeps_the_old_service() {
        let home = tempfile::tempdir().unwrap();
        let default = home.path().join("weir");
        assert_eq!(
            Namespace::derive(&default, &default, None).service(),
            "weir"
        );
        // Spelled differently, not yet created: still the default install.
        let dotted = home.path().join("x/../weir");
        assert_eq!(Namespace::derive(&dotted, &default, None).service(), "weir");
    }

    #[test]
    fn other_data_dirs_get_their_own_stable_service() {
        let home = tempfile::tempdir().unwrap();
        let default = home.path().join("weir");
        let a = home.path().join("a");
        let b = home.path().join("b");
        let na = Namespace::derive(&a, &default, None);
        let nb = Namespace::derive(&b, &default, None);
        assert_ne!(na, nb);
        assert!(na.service().starts_with("weir:") && na.service().len() == 17);
        // Creating the directory does not move it to another namespace.
        std::fs::create_dir_all(&a).unwrap();
        assert_eq!(Namespace::derive(&a, &default, None), na);
        assert_eq!(
            Namespace::derive(&a, &default, Some("weir-test")).service(),
            "weir-test"
        );
        assert_eq!(Namespace::derive(&a, &default, Some("  ")), na);
    }

    #[test]
    fn account_names_are_the_stored_ones() {
        assert_eq!(Account::ControlSecret.as_str(), "control-secret");
        assert_eq!(Account::IdentityKey.as_str(), "identity-key");
        assert_eq!(Account::GithubToken.as_str(), "github-token");
        assert_eq!(Account::LocalCaKey.as_str(), "local-ca-key");
        assert_eq!(Account::CacheKey.as_str(), "cache-key");
        assert_eq!(
            queue_account(&"ab".repeat(20)),
            format!("queue-{}", "ab".repeat(12))
        );
    }
}
