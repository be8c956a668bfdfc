//! `weir doctor`: is this machine set up for Weir? One ✓/✗ line per check, the fix under every
//! ✗, exit code 1 if anything failed. Checks: Weir answers on its address, the keychain works,
//! the local CA is there (key in the keychain) and trusted by the system store, the shell's
//! environment points at Weir, and each managed upstream is reachable with Weir's own client.

use super::context::{CommonArgs, Context};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use weir::intercept::CertInfo;

#[derive(clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    common: CommonArgs,
}

/// The outcome of one check.
struct Report {
    failed: usize,
}

impl Report {
    fn ok(&mut self, what: impl AsRef<str>) {
        println!("✓ {}", what.as_ref());
    }
    fn info(&mut self, what: impl AsRef<str>) {
        println!("- {}", what.as_ref());
    }
    fn bad(&mut self, what: impl AsRef<str>, fix: impl AsRef<str>) {
        self.failed += 1;
        println!("✗ {}\n    fix: {}", what.as_ref(), fix.as_ref());
    }
}

pub fn run(args: DoctorArgs) -> ExitCode {
    let cx = match Context::load(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut r = Report { failed: 0 };
    check_listening(&cx, &mut r);
    let ca = check_ca(&cx, &mut r);
    if let Some(info) = &ca {
        check_system_store(info, &mut r);
    }
    check_env(&cx, ca.as_ref(), &mut r);
    check_upstreams(&cx, &mut r);
    if r.failed == 0 {
        println!("weir doctor: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("weir doctor: {} check(s) failed", r.failed);
        ExitCode::FAILURE
    }
}

fn check_listening(cx: &Context, r: &mut Report) {
    let addr = cx.settings.listen;
    let host = weir::config::host_for(addr.ip(), addr.port());
    let fix = format!("start Weir: `weir serve` (or the tray app); if another program holds {host}, set `listen` in the config");
    let attempt = || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        write!(
            s,
            "GET /_weir/api/health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.take(64 * 1024).read_to_string(&mut out)?;
        Ok(out)
    };
    match attempt() {
        Ok(resp)
            if resp.starts_with("HTTP/1.1 200")
                && resp.replace(' ', "").contains("\"ok\":true") =>
        {
            r.ok(format!("Weir answers on http://{host}"))
        }
        Ok(resp) => r.bad(
            format!(
                "something answers on {host}, but not Weir's health check ({})",
                resp.lines().next().unwrap_or("no status line")
            ),
            fix,
        ),
        Err(e) => r.bad(format!("nothing answers on {host}: {e}"), fix),
    }
}

/// The CA certificate when interception is on and the CA is usable.
fn check_ca(cx: &Context, r: &mut Report) -> Option<CertInfo> {
    if !cx.settings.intercept {
        r.info("TLS interception is off (intercept = false): HTTPS to managed hosts is tunnelled untouched");
        return None;
    }
    match cx.store.keychain().probe() {
        Ok(()) => r.ok(format!(
            "the OS keychain is usable (service `{}`)",
            cx.store.keychain().service()
        )),
        Err(e) => r.bad(format!("{e}; without it TLS interception is off"), e.fix()),
    }
    let path = cx.store.cert_path();
    match cx.store.load() {
        Ok(ca) => {
            let info = CertInfo::from_pem(ca.cert_pem()).ok();
            r.ok(format!(
                "local CA {} (sha256 {}), private key in the keychain",
                path.display(),
                ca.fingerprint_sha256()
            ));
            let missing: Vec<String> = cx
                .settings
                .intercept_hosts()
                .into_iter()
                .filter(|h| !ca.is_managed(h))
                .collect();
            if !missing.is_empty() {
                r.bad(
                    format!("the local CA does not cover {}", missing.join(", ")),
                    "`weir ca rotate`, then `weir ca install`",
                );
            }
            if let Some(i) = info.as_ref().filter(|i| !i.valid_now) {
                r.bad(
                    format!(
                        "the local CA is not valid now ({} to {})",
                        i.not_before, i.not_after
                    ),
                    "`weir ca rotate`, then `weir ca install`",
                );
            }
            info
        }
        Err(e) => {
            r.bad(format!("no usable local CA: {e}"), e.fix());
            None
        }
    }
}

/// Whether a PEM bundle file holds the certificate `der`.
fn bundle_contains(path: &Path, der: &[u8]) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let found = rustls_pemfile::certs(&mut bytes.as_slice())
        .filter_map(Result::ok)
        .any(|c| c.as_ref() == der);
    found
}

fn check_system_store(info: &CertInfo, r: &mut Report) {
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
        Some((true, where_)) => r.ok(format!(
            "the local CA is trusted by the system store ({where_})"
        )),
        Some((false, where_)) => r.bad(
            format!("the local CA is not in the system store ({where_})"),
            fix,
        ),
        None => r.bad("no system certificate bundle found to check", fix),
    }
}

fn check_env(cx: &Context, ca: Option<&CertInfo>, r: &mut Report) {
    let fix =
        "`eval \"$(weir env)\"` in your shell profile (fish: `weir env --shell fish | source`)";
    let want = cx.proxy_url();
    let proxy = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .find_map(|k| std::env::var(k).ok().map(|v| (*k, v)));
    match proxy {
        Some((k, v)) if v.trim_end_matches('/') == want => {
            r.ok(format!("{k} points at Weir ({want})"))
        }
        Some((k, v)) => r.bad(format!("{k} is {v}, not Weir's {want}"), fix),
        None => r.bad(
            "HTTPS_PROXY is not set: command-line tools do not use Weir",
            fix,
        ),
    }
    let Some(ca) = ca else { return };
    let ca_path = cx.store.cert_path();
    match std::env::var_os("NODE_EXTRA_CA_CERTS") {
        Some(v) if bundle_contains(Path::new(&v), &ca.der) => {
            r.ok("NODE_EXTRA_CA_CERTS holds Weir's CA")
        }
        Some(v) => r.bad(
            format!(
                "NODE_EXTRA_CA_CERTS ({}) does not hold Weir's CA {}",
                Path::new(&v).display(),
                ca_path.display()
            ),
            fix,
        ),
        None => r.bad(
            "NODE_EXTRA_CA_CERTS is not set: Node tools will not trust Weir's CA",
            fix,
        ),
    }
    match std::env::var_os("SSL_CERT_FILE") {
        Some(v) if bundle_contains(Path::new(&v), &ca.der) => r.ok("SSL_CERT_FILE holds Weir's CA"),
        Some(v) => r.bad(format!("SSL_CERT_FILE ({}) does not hold Weir's CA", Path::new(&v).display()), fix),
        None => r.bad("SSL_CERT_FILE is not set: gh, Python and other OpenSSL/Go tools rely on the system store alone", fix),
    }
}

fn check_upstreams(cx: &Context, r: &mut Report) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return r.bad(
                format!("cannot start the async runtime: {e}"),
                "report this",
            )
        }
    };
    let results = rt.block_on(async {
        let client = weir::http_client::UpstreamClient::for_settings(&cx.settings);
        let t = weir::http_client::Timeouts {
            headers: Duration::from_secs(5),
            body: Duration::from_secs(5),
        };
        let mut out = Vec::new();
        for u in &cx.settings.upstreams {
            // GET, not HEAD: some servers mishandle HEAD over HTTP/2; only the status is read.
            let mut req = http::Request::new(weir::http_client::empty());
            *req.uri_mut() = match format!("{}/", u.origin).parse() {
                Ok(uri) => uri,
                Err(_) => continue,
            };
            out.push((u, client.send(req, t).await.map(|resp| resp.status())));
        }
        out
    });
    for (u, res) in results {
        let via = match (&u.net.connect_to, &cx.settings.upstream_proxy) {
            (Some(c), _) => format!(" via {c}"),
            (None, Some(p)) => format!(" via proxy {}", p.uri()),
            (None, None) => String::new(),
        };
        match res {
            Ok(status) => r.ok(format!(
                "upstream `{}` {}{via} is reachable (HTTP {})",
                u.name,
                u.origin,
                status.as_u16()
            )),
            Err(e) => r.bad(
                format!(
                    "upstream `{}` {}{via} is not reachable: {e}",
                    u.name, u.origin
                ),
                "check the network (and `upstream_proxy` / `connect_to` / `ca_file` in the config)",
            ),
        }
    }
}
