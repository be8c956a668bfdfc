//! `weir doctor`'s checks, as data: Weir answers on its address, the keychain (or the file
//! store that stands in for it) works, the local CA is there (key in that store) and trusted by the system store, the shell's environment
//! points at Weir, and each managed upstream is reachable with Weir's own client. When Weir is
//! not running, every tool still pointed at it is named ([`super::pointed`]), with the undo.

use super::Install;
use crate::intercept::CertInfo;
use crate::secrets::{files_meaning, files_possible, Namespace, StoreChoice};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// The file in the data dir whose presence says the dashboard's Set up view was shown once
/// (the tray and the page open it by themselves until then).
pub const SETUP_SEEN_FILE: &str = "setup-seen";

/// What a check looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    Listening,
    Intercept,
    Keychain,
    LocalCa,
    SystemStore,
    /// A browser's NSS database (checked by the Set up view, not by `weir doctor`).
    BrowserStore,
    Environment,
    Upstream,
    /// A tool still pointed at a Weir that is not running.
    PointedAtWeir,
}

/// How a check came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Neither good nor bad (e.g. interception is turned off).
    Info,
    /// Something to fix, and how.
    Failed {
        fix: String,
    },
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub kind: CheckKind,
    pub what: String,
    pub outcome: Outcome,
}

impl Check {
    fn ok(kind: CheckKind, what: impl Into<String>) -> Check {
        Check {
            kind,
            what: what.into(),
            outcome: Outcome::Ok,
        }
    }
    fn info(kind: CheckKind, what: impl Into<String>) -> Check {
        Check {
            kind,
            what: what.into(),
            outcome: Outcome::Info,
        }
    }
    fn bad(kind: CheckKind, what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            kind,
            what: what.into(),
            outcome: Outcome::Failed { fix: fix.into() },
        }
    }

    /// Whether this check failed.
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }
}

/// Every check, in order. Blocks (sockets, keychain) and runs its own small async runtime for
/// the upstream checks: call it from a plain thread or `spawn_blocking`, not an async task.
pub fn run_checks(install: &Install) -> Vec<Check> {
    let listening = check_listening(install);
    let down = listening.failed();
    let mut out = vec![listening];
    if down {
        out.extend(pointed_checks(install));
    } else {
        out.extend(learned_hosts(install));
    }
    let ca = check_ca(install, &mut out);
    if let Some(info) = &ca {
        out.push(check_system_store(info));
    }
    check_env(install, ca.as_ref(), &mut out);
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => out.extend(rt.block_on(check_upstreams(install))),
        Err(e) => out.push(Check::bad(
            CheckKind::Upstream,
            format!("cannot start the async runtime: {e}"),
            "report this",
        )),
    }
    out
}

/// `GET path` on the running Weir's own listener: the whole answer (head and body), at most
/// `max` bytes.
fn ask_weir(install: &Install, path: &str, max: u64) -> std::io::Result<String> {
    let addr = install.settings.listen;
    let host = crate::config::host_for(addr.ip(), addr.port());
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.take(max).read_to_string(&mut out)?;
    Ok(out)
}

/// The parts of the status document (`crate::status::Status`) this check reads.
#[derive(serde::Deserialize)]
struct StatusUpstreams {
    upstreams: Vec<NamedUpstream>,
}

#[derive(serde::Deserialize)]
struct NamedUpstream {
    name: String,
    origin: String,
}

/// The Copilot API hosts the running Weir learned from token or GraphQL answers
/// (`crate::upstream::learned`): managed like the built-in hosts until Weir stops, and not in
/// the config file, so a user reading it would not know of them.
fn learned_hosts(install: &Install) -> Vec<Check> {
    let Ok(answer) = ask_weir(install, "/_weir/api/status", 4 * 1024 * 1024) else {
        return Vec::new();
    };
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let Ok(status) = serde_json::from_str::<StatusUpstreams>(body) else {
        return Vec::new();
    };
    status
        .upstreams
        .into_iter()
        .filter(|u| u.name.starts_with(crate::upstream::learned::NAME_PREFIX))
        .map(|u| {
            Check::info(
                CheckKind::Upstream,
                format!(
                    "{} is managed: announced in a token or GraphQL answer; learned while Weir runs, not from the config",
                    u.origin
                ),
            )
        })
        .collect()
}

fn check_listening(install: &Install) -> Check {
    let addr = install.settings.listen;
    let host = crate::config::host_for(addr.ip(), addr.port());
    let fix = format!("start Weir: `weir serve` (or the tray app); if another program holds {host}, set `listen` in the config");
    let kind = CheckKind::Listening;
    match ask_weir(install, "/_weir/api/health", 64 * 1024) {
        Ok(resp)
            if resp.starts_with("HTTP/1.1 200")
                && resp.replace(' ', "").contains("\"ok\":true") =>
        {
            Check::ok(kind, format!("Weir answers on http://{host}"))
        }
        Ok(resp) => Check::bad(
            kind,
            format!(
                "something answers on {host}, but not Weir's health check ({})",
                resp.lines().next().unwrap_or("no status line")
            ),
            fix,
        ),
        Err(e) => Check::bad(kind, format!("nothing answers on {host}: {e}"), fix),
    }
}

/// One check per tool still pointed at this (not running) Weir: a failure with the undo, or
/// information for what falls back to `DIRECT` by itself (the PAC).
fn pointed_checks(install: &Install) -> Vec<Check> {
    let kind = CheckKind::PointedAtWeir;
    super::pointed_at_weir(install, &super::Sources::for_this_user())
        .into_iter()
        .map(|t| {
            if t.falls_back_direct {
                Check::info(
                    kind,
                    format!("{}; Weir is not running, it falls back to DIRECT", t.what),
                )
            } else {
                Check::bad(
                    kind,
                    format!("{}, but Weir is not running: it cannot connect", t.what),
                    format!("start Weir, or take it out: {}", t.undo),
                )
            }
        })
        .collect()
}

/// Where Weir's secrets are and whether that store answers: the OS keychain, or owner-only
/// files (said plainly, with what that means). The error is the keychain's when it does not
/// answer (the Set up view tells a keychain that is missing from one that is locked). Blocks on
/// the keychain.
pub fn check_keychain(install: &Install) -> (Check, Option<weir_keychain::KeychainError>) {
    let keychain = install.ca.keychain();
    if let Some(files) = keychain.file_store() {
        return match keychain.probe() {
            Ok(()) => (
                Check::info(
                    CheckKind::Keychain,
                    format!("secrets are in files: {}", files_meaning(files.dir())),
                ),
                None,
            ),
            Err(e) => (
                Check::bad(
                    CheckKind::Keychain,
                    format!("{e}; without it TLS interception is off"),
                    e.fix(),
                ),
                Some(e),
            ),
        };
    }
    match keychain.probe() {
        Ok(()) => (
            Check::ok(
                CheckKind::Keychain,
                format!(
                    "the OS keychain is usable (service `{}`)",
                    keychain.service()
                ),
            ),
            None,
        ),
        // `auto` on a machine without a keychain: the next start makes the file store.
        Err(e @ weir_keychain::KeychainError::NoService { .. })
            if install.settings.secrets_store == StoreChoice::Auto =>
        {
            let ns = Namespace::for_data_dir(&install.data_dir);
            let dir = ns.files_dir().unwrap_or(&install.data_dir);
            if !files_possible(dir) {
                return (
                    Check::bad(
                        CheckKind::Keychain,
                        format!(
                            "{e}, and no file store can be made in {}; without it TLS interception is off",
                            dir.display()
                        ),
                        format!("make {} a directory you can write to, or {}", dir.display(), e.fix()),
                    ),
                    Some(e),
                );
            }
            (
                Check::info(
                    CheckKind::Keychain,
                    format!(
                        "{e}; Weir keeps its secrets in files instead (made when it starts): {}",
                        files_meaning(dir)
                    ),
                ),
                None,
            )
        }
        Err(e) => (
            Check::bad(
                CheckKind::Keychain,
                format!("{e}; without it TLS interception is off"),
                e.fix(),
            ),
            Some(e),
        ),
    }
}

/// The CA certificate when interception is on and the CA is usable.
pub fn check_ca(install: &Install, out: &mut Vec<Check>) -> Option<CertInfo> {
    // Where secrets live matters without interception too (the queue, the cache key).
    out.push(check_keychain(install).0);
    if !install.settings.intercept {
        out.push(Check::info(CheckKind::Intercept, "TLS interception is off (intercept = false): HTTPS to managed hosts is tunnelled untouched"));
        return None;
    }
    let store = &install.ca;
    let rotate = "`weir ca rotate`, then `weir ca install`";
    match store.load() {
        Ok(ca) => {
            let info = CertInfo::from_pem(ca.cert_pem()).ok();
            out.push(Check::ok(
                CheckKind::LocalCa,
                format!(
                    "local CA {} (sha256 {}), private key in {}",
                    store.cert_path().display(),
                    ca.fingerprint_sha256(),
                    match store.keychain().file_store() {
                        Some(f) => format!("the file store ({})", f.dir().display()),
                        None => "the keychain".to_string(),
                    }
                ),
            ));
            let missing: Vec<String> = install
                .settings
                .intercept_hosts()
                .into_iter()
                .filter(|h| !ca.is_managed(h))
                .collect();
            if !missing.is_empty() {
                out.push(Check::bad(
                    CheckKind::LocalCa,
                    format!(
                        "the local CA does not cover {} (made before these hosts were managed; their HTTPS stays a blind tunnel, uncached)",
                        missing.join(", ")
                    ),
                    rotate,
                ));
            }
            if let Some(i) = info.as_ref().filter(|i| !i.valid_now) {
                out.push(Check::bad(
                    CheckKind::LocalCa,
                    format!(
                        "the local CA is not valid now ({} to {})",
                        i.not_before, i.not_after
                    ),
                    rotate,
                ));
            }
            info
        }
        Err(e) => {
            out.push(Check::bad(
                CheckKind::LocalCa,
                format!("no usable local CA: {e}"),
                e.fix(),
            ));
            None
        }
    }
}

/// Whether a PEM bundle file holds the certificate `der`.
pub fn bundle_contains(path: &Path, der: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|bytes| {
        weir_tls::pem_certificates(&bytes)
            .is_ok_and(|certs| certs.iter().any(|c| c.as_ref() == der))
    })
}

pub fn check_system_store(info: &CertInfo) -> Check {
    let kind = CheckKind::SystemStore;
    let fix = "`weir ca install --apply` (or run the steps `weir ca install` prints)";
    // On Linux the distributions' compiled bundles are the system store; elsewhere ask the
    // platform (Keychain, Windows store) through rustls-native-certs.
    let bundles = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ];
    let trusted = if cfg!(target_os = "linux") {
        bundles
            .iter()
            .find(|b| Path::new(b).is_file())
            .map(|b| (bundle_contains(Path::new(b), &info.der), b.to_string()))
    } else {
        let native = rustls_native_certs::load_native_certs();
        Some((
            native.certs.iter().any(|c| c.as_ref() == info.der),
            "the system trust store".to_string(),
        ))
    };
    match trusted {
        Some((true, where_)) => Check::ok(
            kind,
            format!("the local CA is trusted by the system store ({where_})"),
        ),
        Some((false, where_)) => Check::bad(
            kind,
            format!("the local CA is not in the system store ({where_})"),
            fix,
        ),
        None => Check::bad(kind, "no system certificate bundle found to check", fix),
    }
}

/// Whether the NSS database `db` (Chromium's `~/.pki/nssdb`, a Firefox profile) trusts the CA
/// `der` under Weir's nickname, asked with `certutil -L -a` (libnss3-tools). Not part of
/// [`run_checks`]: a browser database is the user's, and its absence is no failure of Weir's.
pub fn check_nss(db: &Path, der: &[u8]) -> Check {
    let kind = CheckKind::BrowserStore;
    let arg = format!("sql:{}", db.display());
    let listed = std::process::Command::new("certutil")
        .args(["-L", "-d", &arg, "-n", weir_tls::trust::NSS_NICKNAME, "-a"])
        .output();
    match listed {
        Err(e) => Check::bad(
            kind,
            format!("cannot run certutil to read {}: {e}", db.display()),
            "install certutil (Debian/Ubuntu: `sudo apt install libnss3-tools`)",
        ),
        Ok(o)
            if o.status.success()
                && weir_tls::pem_certificates(&o.stdout)
                    .is_ok_and(|certs| certs.iter().any(|c| c.as_ref() == der)) =>
        {
            Check::ok(
                kind,
                format!(
                    "the local CA is trusted by the NSS database {}",
                    db.display()
                ),
            )
        }
        Ok(_) => Check::bad(
            kind,
            format!("the local CA is not in the NSS database {}", db.display()),
            "`weir ca install --apply` (its NSS steps need no admin rights)",
        ),
    }
}

/// This process's environment against what `weir env` would set.
fn check_env(install: &Install, ca: Option<&CertInfo>, out: &mut Vec<Check>) {
    let kind = CheckKind::Environment;
    let fix =
        "`eval \"$(weir env)\"` in your shell profile (fish: `weir env --shell fish | source`)";
    let want = install.proxy_url();
    let proxy = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .find_map(|k| std::env::var(k).ok().map(|v| (*k, v)));
    out.push(match proxy {
        Some((k, v)) if v.trim_end_matches('/') == want => {
            Check::ok(kind, format!("{k} points at Weir ({want})"))
        }
        Some((k, v)) => Check::bad(kind, format!("{k} is {v}, not Weir's {want}"), fix),
        None => Check::bad(
            kind,
            "HTTPS_PROXY is not set: command-line tools do not use Weir",
            fix,
        ),
    });
    let Some(ca) = ca else { return };
    let ca_path = install.ca.cert_path();
    out.push(match std::env::var_os("NODE_EXTRA_CA_CERTS") {
        Some(v) if bundle_contains(Path::new(&v), &ca.der) => {
            Check::ok(kind, "NODE_EXTRA_CA_CERTS holds Weir's CA")
        }
        Some(v) => Check::bad(
            kind,
            format!(
                "NODE_EXTRA_CA_CERTS ({}) does not hold Weir's CA {}",
                Path::new(&v).display(),
                ca_path.display()
            ),
            fix,
        ),
        None => Check::bad(
            kind,
            "NODE_EXTRA_CA_CERTS is not set: Node tools will not trust Weir's CA",
            fix,
        ),
    });
    out.push(match std::env::var_os("SSL_CERT_FILE") {
        Some(v) if bundle_contains(Path::new(&v), &ca.der) => {
            Check::ok(kind, "SSL_CERT_FILE holds Weir's CA")
        }
        Some(v) => Check::bad(kind, format!("SSL_CERT_FILE ({}) does not hold Weir's CA", Path::new(&v).display()), fix),
        None => Check::bad(kind, "SSL_CERT_FILE is not set: gh, Python and other OpenSSL/Go tools rely on the system store alone", fix),
    });
}

/// Each managed upstream fetched once (`GET /`, status only) with Weir's own client.
pub async fn check_upstreams(install: &Install) -> Vec<Check> {
    let settings = &install.settings;
    let client = crate::upstream::UpstreamClient::for_settings(settings);
    let t = crate::upstream::Timeouts {
        headers: Duration::from_secs(5),
        body: Duration::from_secs(5),
    };
    let mut out = Vec::new();
    for u in &settings.upstreams {
        // GET, not HEAD: some servers mishandle HEAD over HTTP/2; only the status is read.
        let mut req = http::Request::new(crate::body::empty());
        *req.uri_mut() = match format!("{}/", u.origin).parse() {
            Ok(uri) => uri,
            Err(_) => continue,
        };
        let res = client.send(req, t).await.map(|resp| resp.status());
        let via = match (&u.net.connect_to, &settings.upstream_proxy) {
            (Some(c), _) => format!(" via {c}"),
            (None, Some(p)) => format!(" via proxy {}", p.uri()),
            (None, None) => String::new(),
        };
        out.push(match res {
            Ok(status) => Check::ok(
                CheckKind::Upstream,
                format!(
                    "upstream `{}` {}{via} is reachable (HTTP {})",
                    u.name,
                    u.origin,
                    status.as_u16()
                ),
            ),
            Err(e) => Check::bad(
                CheckKind::Upstream,
                format!(
                    "upstream `{}` {}{via} is not reachable: {e}",
                    u.name, u.origin
                ),
                "check the network (and `upstream_proxy` / `connect_to` / `ca_file` in the config)",
            ),
        });
    }
    out
}
