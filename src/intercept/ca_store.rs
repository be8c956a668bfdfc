//! The local CA's lifecycle: created on first run for the managed https hosts, its certificate at
//! `<data_dir>/ca/weir-ca.pem` (public), its private key in the OS keychain (account
//! `local-ca-key` in the data dir's [`Namespace`]: service `weir` for the default data dir), or
//! on a machine without a keychain in the file store (`<data_dir>/secrets/<service>/local-ca-key`,
//! 0600; see `crate::secrets::choose`), never beside the certificate. Rotation replaces both and
//! deletes the old key.
//!
//! Every call here may block on the keychain (D-Bus, Security.framework): call it before the
//! async runtime starts or from `spawn_blocking`.

use crate::secrets::{Account, Namespace};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_keychain::{Keychain, KeychainError};
use weir_tls::{LocalCa, OffsetDateTime, TlsError};

/// The keychain account holding the CA private key (PKCS#8 PEM).
pub const KEY_ACCOUNT: &str = Account::LocalCaKey.as_str();

const CERT_FILE: &str = "weir-ca.pem";

/// How long making the CA waits for another Weir making it ([`CaStore::creation_lock`]): far
/// longer than a creation takes (well under a second), short enough that a Weir stuck on a
/// keychain prompt while holding the lock does not hang every `weir env` with no word.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// How often the lock is tried again while another Weir holds it.
const LOCK_RETRY: Duration = Duration::from_millis(50);

/// Why the CA could not be loaded, created or rotated.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{0}")]
    Keychain(#[from] KeychainError),
    #[error("no managed upstream is an https:// origin with a host name, so there is nothing to intercept")]
    NoHosts,
    #[error("there is no local CA yet ({path} does not exist)")]
    NoCert { path: PathBuf },
    #[error("the CA certificate {path} exists but its private key is not in the secret store (service `{service}`, account `{KEY_ACCOUNT}`)")]
    NoKey { path: PathBuf, service: String },
    #[error("the local CA is not usable: {0}")]
    Tls(#[from] TlsError),
    #[error("another Weir has been making the local CA for {}s and still holds its lock, {path} (is it waiting on a keychain prompt?)", waited.as_secs())]
    LockHeld { path: PathBuf, waited: Duration },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CaError {
    /// What a person can do about it.
    pub fn fix(&self) -> String {
        match self {
            CaError::Keychain(e) => e.fix().to_string(),
            CaError::NoHosts => "Nothing to do: only https:// upstreams are intercepted.".to_string(),
            CaError::NoCert { .. } => "Run `weir serve` once (it creates the CA), or `weir ca rotate`.".to_string(),
            CaError::NoKey { .. } | CaError::Tls(TlsError::KeyMismatch | TlsError::CaExpired { .. }) => {
                "Run `weir ca rotate` to make a new CA, then install it again with `weir ca install`.".to_string()
            }
            CaError::Tls(_) => "Run `weir ca rotate` to replace the CA.".to_string(),
            CaError::LockHeld { .. } => "Answer (or cancel) that Weir's keychain prompt, or stop it (`weir serve`, `weir env`, `weir ca install`), then try again. The lock goes with the process holding it: the file itself may stay.".to_string(),
            CaError::Io { .. } => "Check the permissions of Weir's data directory.".to_string(),
        }
    }
}

/// A CA in hand, and how it came to be.
#[derive(Debug)]
pub struct LoadOutcome {
    pub ca: Arc<LocalCa>,
    /// True when this call generated it (first run).
    pub created: bool,
    /// Managed hosts the CA does not cover (added to the config after it was made): their
    /// CONNECTs stay blind tunnels until `weir ca rotate`.
    pub missing_hosts: Vec<String>,
}

/// Where one install keeps its CA.
#[derive(Debug, Clone)]
pub struct CaStore {
    dir: PathBuf,
    keychain: Keychain,
}

impl CaStore {
    /// The CA of the install at `data_dir`, its key in that data dir's keychain namespace.
    pub fn for_data_dir(data_dir: &Path) -> CaStore {
        CaStore::new(data_dir, &Namespace::for_data_dir(data_dir))
    }

    /// The CA under `data_dir/ca`, its key in `namespace`.
    pub fn new(data_dir: &Path, namespace: &Namespace) -> CaStore {
        CaStore {
            dir: data_dir.join("ca"),
            keychain: namespace.keychain(),
        }
    }

    /// `<data_dir>/ca/weir-ca.pem`, the public CA certificate.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// [`CaStore::cert_path`] of the install at `data_dir`, without looking for its keychain.
    pub fn cert_path_in(data_dir: &Path) -> PathBuf {
        data_dir.join("ca").join(CERT_FILE)
    }

    /// `<data_dir>/ca/weir-bundle.pem`: system roots plus Weir's CA, for `SSL_CERT_FILE`.
    pub fn bundle_path(&self) -> PathBuf {
        self.dir.join("weir-bundle.pem")
    }

    /// `<data_dir>/ca/weir-ca.old.pem`: the certificate a rotation replaced (for removal steps).
    pub fn old_cert_path(&self) -> PathBuf {
        self.dir.join("weir-ca.old.pem")
    }

    pub fn keychain(&self) -> &Keychain {
        &self.keychain
    }

    /// The CA certificate PEM, if there is one (no keychain access).
    pub fn read_cert(&self) -> Result<Option<String>, CaError> {
        let path = self.cert_path();
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CaError::Io {
                action: "read",
                path,
                source,
            }),
        }
    }

    /// Loads the existing CA: certificate from disk, key from the keychain.
    pub fn load(&self) -> Result<LocalCa, CaError> {
        let path = self.cert_path();
        let cert = self
            .read_cert()?
            .ok_or_else(|| CaError::NoCert { path: path.clone() })?;
        if let Some(key) = self.keychain.get_secret(KEY_ACCOUNT)? {
            return Ok(LocalCa::from_pem(&cert, key.expose())?);
        }
        match self.adopt_legacy_key(&cert) {
            Some(ca) => Ok(ca),
            None => Err(CaError::NoKey {
                path,
                service: self.keychain.service().to_string(),
            }),
        }
    }

    /// Before keychain entries were namespaced per data dir, every install kept its CA key
    /// under the service `weir`. An install with another `--data-dir` made then would lose
    /// its CA (and its trust-store entry) now. If the old entry holds the key of *this*
    /// certificate — the pair must match, so another install's key is never taken — it is
    /// copied into this install's namespace. The old entry stays: the default install may
    /// still use it.
    fn adopt_legacy_key(&self, cert: &str) -> Option<LocalCa> {
        let service = self.keychain.service();
        // Only OS keychain installs predate the namespaces.
        if service == crate::secrets::DEFAULT_SERVICE || self.keychain.file_store().is_some() {
            return None;
        }
        let legacy = Keychain::new(crate::secrets::DEFAULT_SERVICE);
        let key = legacy.get_secret(KEY_ACCOUNT).ok()??;
        let ca = LocalCa::from_pem(cert, key.expose()).ok()?;
        match self.keychain.set(KEY_ACCOUNT, key.expose()) {
            Ok(()) => tracing::info!(
                service,
                "moved this install's CA key from the keychain service `weir` (made before entries were kept per data dir)"
            ),
            // Usable now; the next start looks in the old place again.
            Err(e) => tracing::warn!(error = %e, service, "using the CA key kept under the service `weir`; cannot copy it to this install's entry"),
        }
        Some(ca)
    }

    /// Loads the CA, or creates it when there is no certificate yet (first run).
    pub fn load_or_create(&self, hosts: &[String]) -> Result<LoadOutcome, CaError> {
        if hosts.is_empty() {
            return Err(CaError::NoHosts);
        }
        if self.read_cert()?.is_none() {
            let _creating = self.creation_lock()?;
            // Another process (`weir env` beside a first `weir serve`, say) may have made it
            // while this one waited for the lock: then that one is loaded, not replaced.
            if self.read_cert()?.is_none() {
                let ca = self.create(hosts)?;
                return Ok(LoadOutcome {
                    ca: Arc::new(ca),
                    created: true,
                    missing_hosts: Vec::new(),
                });
            }
        }
        let ca = self.load()?;
        let missing = hosts
            .iter()
            .filter(|h| !ca.is_managed(h))
            .cloned()
            .collect();
        Ok(LoadOutcome {
            ca: Arc::new(ca),
            created: false,
            missing_hosts: missing,
        })
    }

    /// Replaces the CA with a new one for `hosts`; the old certificate is kept at
    /// [`CaStore::old_cert_path`] (for the trust-store removal steps) and the old key is gone
    /// from the keychain (overwritten by the new one). Returns the new CA.
    pub fn rotate(&self, hosts: &[String]) -> Result<LocalCa, CaError> {
        if hosts.is_empty() {
            return Err(CaError::NoHosts);
        }
        let _replacing = self.creation_lock()?;
        if let Some(old) = self.read_cert()? {
            write_atomically(&self.old_cert_path(), old.as_bytes())?;
        }
        // Delete first: if generating or storing the new key fails, the old key is gone anyway,
        // which is what a rotation after a suspected leak must guarantee.
        self.keychain.delete(KEY_ACCOUNT)?;
        self.create(hosts)
    }

    /// Held (an exclusive lock on `<data_dir>/ca/create.lock`, released when dropped) while the
    /// CA is made or replaced. Two processes that both found no CA (`weir env` or
    /// `weir ca install` starting with a first `weir serve`) each generated one: the keychain
    /// kept the last key stored and the disk the last certificate written, which could be the
    /// other's, or the pair the running Weir serves with was not the one on disk, and clients
    /// told to trust that file refused its leaves. Waits for the other one (saying so, once) up
    /// to [`LOCK_WAIT`]. `None`: the filesystem has no file locks, and the CA is made without.
    fn creation_lock(&self) -> Result<Option<std::fs::File>, CaError> {
        self.creation_lock_within(LOCK_WAIT, |path| {
            tracing::info!("{}", waiting_message(path));
        })
    }

    /// [`Self::creation_lock`], waiting at most `bound`; `waiting` is called once if the lock is
    /// held by another.
    fn creation_lock_within(
        &self,
        bound: Duration,
        waiting: impl FnOnce(&Path),
    ) -> Result<Option<std::fs::File>, CaError> {
        let io = |action, path: &Path, source| CaError::Io {
            action,
            path: path.to_path_buf(),
            source,
        };
        crate::paths::create_private_dir(&self.dir).map_err(|e| io("create", &self.dir, e))?;
        let path = self.dir.join("create.lock");
        let f = crate::paths::open_lock_file(&path).map_err(|e| io("create", &path, e))?;
        let start = Instant::now();
        let mut waiting = Some(waiting);
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(Some(f)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if let Some(say) = waiting.take() {
                        say(&path);
                    }
                    if start.elapsed() >= bound {
                        return Err(CaError::LockHeld {
                            path,
                            waited: bound,
                        });
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                // No file locks here (`Unsupported`: some network or FUSE filesystems; or
                // `ENOLCK`): the lock only guards against a rare race, so the CA is made
                // without it rather than not at all (interception would be off).
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot lock the CA's creation lock file (this filesystem may have no file locks): making the CA without it; two Weirs starting at the same moment could each make one (`weir ca rotate` then makes one for both)");
                    return Ok(None);
                }
            }
        }
    }

    /// Generates a CA, stores its key in the keychain and only then writes the certificate, so
    /// a keychain failure leaves nothing half-made on disk. Called with [`Self::creation_lock`]
    /// held.
    fn create(&self, hosts: &[String]) -> Result<LocalCa, CaError> {
        let ca = LocalCa::generate(hosts, OffsetDateTime::now_utc())?;
        let key = ca.key_pem();
        self.keychain.set(KEY_ACCOUNT, &key)?;
        crate::paths::create_private_dir(&self.dir).map_err(|source| CaError::Io {
            action: "create",
            path: self.dir.clone(),
            source,
        })?;
        write_atomically(&self.cert_path(), ca.cert_pem().as_bytes())?;
        tracing::info!(path = %self.cert_path().display(), fingerprint = %ca.fingerprint_sha256(), "created Weir's local CA");
        Ok(ca)
    }
}

/// What `weir serve` and the tray do at start-up: the CA when interception is on and possible,
/// else `None` with a warning saying why, so CONNECTs to managed hosts stay blind tunnels.
/// Blocks on the keychain: call it before the async runtime starts or from `spawn_blocking`.
pub fn load_local_ca(settings: &crate::config::Settings, data_dir: &Path) -> Option<Arc<LocalCa>> {
    if !settings.intercept {
        tracing::info!("TLS interception is off (intercept = false): HTTPS to managed hosts is tunnelled untouched");
        return None;
    }
    // The secret store is chosen first: on a machine without a keychain this makes the file
    // store the key goes to.
    if let Err(e) = crate::secrets::choose(data_dir, settings.secrets_store) {
        let fix = e.fix().unwrap_or("see above");
        tracing::warn!("TLS interception is off: {e}. HTTPS to managed hosts stays a blind tunnel (no caching or coalescing). Fix: {fix} (`weir doctor` checks this)");
        return None;
    }
    let store = CaStore::for_data_dir(data_dir);
    match store.load_or_create(&settings.intercept_hosts()) {
        Ok(out) => {
            if !out.missing_hosts.is_empty() {
                tracing::warn!(hosts = ?out.missing_hosts, "the local CA does not cover these managed hosts; their HTTPS stays tunnelled untouched. Fix: `weir ca rotate`, then `weir ca install`");
            }
            if out.created {
                tracing::warn!(path = %store.cert_path().display(), "created a new local CA: clients must trust it before HTTPS to managed hosts works; see `weir ca install` and `weir env`");
            }
            Some(out.ca)
        }
        Err(CaError::NoHosts) => None,
        Err(e) => {
            tracing::warn!("TLS interception is off: {e}. HTTPS to managed hosts stays a blind tunnel (no caching or coalescing). Fix: {} (`weir doctor` checks this)", e.fix());
            None
        }
    }
}

/// Writes beside `path` and renames over it, so a reader never sees half a certificate.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CaError> {
    let io = |action, source| CaError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("pem.tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    // The user's alone, like the rest of the data dir.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp).map_err(|e| io("create", e))?;
    f.write_all(bytes).map_err(|e| io("write", e))?;
    f.sync_all().map_err(|e| io("sync", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io("replace", e))
}

/// What a Weir says when another one holds the CA's creation lock.
fn waiting_message(path: &Path) -> String {
    format!(
        "waiting for another Weir creating the CA ({})",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_store(dir: &Path) -> CaStore {
        CaStore {
            dir: dir.join("data").join("ca"),
            keychain: Keychain::in_files("weir-test", &dir.join("secrets")),
        }
    }

    /// The lock as another process would hold it (its own open file: `flock` locks conflict
    /// between open files, in one process too).
    fn hold_lock(store: &CaStore) -> std::fs::File {
        crate::paths::create_private_dir(&store.dir).unwrap();
        let f = crate::paths::open_lock_file(&store.dir.join("create.lock")).unwrap();
        f.lock().unwrap();
        f
    }

    /// A lock held past the bound: a clear error naming the lock file (and a fix), after the
    /// waiting message was said once; it blocked forever with no word.
    #[test]
    fn a_held_lock_is_waited_for_within_a_bound_and_said_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = test_store(dir.path());
        let held = hold_lock(&store);
        let said = std::cell::RefCell::new(Vec::new());
        let started = Instant::now();
        let err = store
            .creation_lock_within(Duration::from_millis(300), |p| {
                said.borrow_mut().push(waiting_message(p));
            })
            .expect_err("the lock is held by another");
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(started.elapsed() < Duration::from_secs(10));
        let lock = store.dir.join("create.lock");
        assert!(
            matches!(&err, CaError::LockHeld { path, .. } if *path == lock),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&lock.display().to_string()),
            "{err}"
        );
        assert!(err.fix().contains("keychain prompt"), "{}", err.fix());
        assert_eq!(
            *said.borrow(),
            vec![format!(
                "waiting for another Weir creating the CA ({})",
                lock.display()
            )]
        );

        // Released while waiting: taken, the message said once.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let said = std::cell::Cell::new(0);
        let got = store
            .creation_lock_within(Duration::from_secs(20), |_| said.set(said.get() + 1))
            .unwrap();
        assert!(got.is_some());
        assert_eq!(said.get(), 1);
        releaser.join().unwrap();

        // Free: taken at once, nothing said.
        drop(got);
        let got = store
            .creation_lock_within(Duration::from_secs(20), |_| panic!("nothing to wait for"))
            .unwrap();
        assert!(got.is_some());
    }

    /// Two creations of the CA at the same moment (as `weir env` and a first `weir serve`) end
    /// with one CA: both callers hold the same one, one of them made it, and the certificate on
    /// disk and the key in the store are that pair. Without the lock each generated its own.
    #[test]
    fn concurrent_creations_agree_on_one_ca() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let store = CaStore {
            dir: data.join("ca"),
            keychain: Keychain::in_files("weir-test", &dir.path().join("secrets")),
        };
        let hosts = vec!["api.githubcopilot.com".to_string()];
        for round in 0..4 {
            let _ = std::fs::remove_dir_all(&data);
            let _ = store.keychain.delete(KEY_ACCOUNT);
            let start = Arc::new(std::sync::Barrier::new(2));
            let made: Vec<LoadOutcome> = std::thread::scope(|s| {
                let runs: Vec<_> = (0..2)
                    .map(|_| {
                        let (store, hosts, start) = (store.clone(), &hosts, start.clone());
                        s.spawn(move || {
                            start.wait();
                            store.load_or_create(hosts).unwrap()
                        })
                    })
                    .collect();
                runs.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let prints: Vec<String> = made.iter().map(|o| o.ca.fingerprint_sha256()).collect();
            assert_eq!(prints[0], prints[1], "round {round}: two CAs made");
            assert_eq!(
                made.iter().filter(|o| o.created).count(),
                1,
                "round {round}"
            );
            let on_disk = store
                .load()
                .expect("the certificate and key on disk are a pair");
            assert_eq!(on_disk.fingerprint_sha256(), prints[0], "round {round}");
        }
    }
}
