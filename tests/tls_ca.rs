//! The local CA's lifecycle through the real `weir` binary and the real Secret Service:
//! first run creates it with the private key in the keychain and in no file; `weir ca show`
//! and `weir ca rotate`; an unavailable keychain leaves managed hosts as blind tunnels with a
//! warning; `weir doctor` reports every check with its fix.
//!
//! Run under `scripts/with-keychain.sh cargo test -p weir --test tls_ca` (needs dbus-x11,
//! gnome-keyring, libsecret-tools and curl). Set WEIR_SKIP_KEYCHAIN_TESTS=1 to skip them on a
//! machine without a Secret Service; otherwise a missing keychain fails them.

#[path = "common/tls.rs"]
mod tls;
#[path = "common/tls_client.rs"]
mod tls_client;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tls::{output, TestCa, TlsUpstream, HOST};
use tls_client::{curl, parse_curl};
use weir_keychain::Keychain;

const LIST: &str = "/agents/sessions";

/// A keychain service unique to this test, after checking the Secret Service works.
fn keychain(test: &str) -> Option<String> {
    let service = format!("weir-test-{test}-{}", std::process::id());
    match Keychain::new(&service).probe() {
        Ok(()) => Some(service),
        Err(_) if std::env::var("WEIR_SKIP_KEYCHAIN_TESTS").is_ok_and(|v| v == "1") => None,
        Err(e) => panic!("no usable keychain: {e}\nfix: {}\nRun as `scripts/with-keychain.sh cargo test -p weir --test tls_ca`", e.fix()),
    }
}

/// An install: config file (managing the fixture, listening on a free port) and data dir.
struct Install {
    dir: tempfile::TempDir,
    config: PathBuf,
    data: PathBuf,
    port: u16,
    service: String,
}

impl Install {
    fn new(up: &TlsUpstream, ca: &TestCa, service: &str) -> Install {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("weir.toml");
        std::fs::write(
            &config,
            format!(
                "default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\n{}",
                tls::upstream_toml(up, ca)
            ),
        )
        .unwrap();
        let data = dir.path().join("data");
        Install {
            dir,
            config,
            data,
            port,
            service: service.to_string(),
        }
    }

    /// `weir ARGS --config .. --data-dir ..` with the user's own HOME and keychain kept out.
    fn weir(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data);
        c.env("HOME", self.dir.path())
            .env("WEIR_KEYCHAIN_SERVICE", &self.service)
            .env("WEIR_LOG", "weir=info");
        c
    }

    fn proxy(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn cert(&self) -> PathBuf {
        self.data.join("ca/weir-ca.pem")
    }

    /// Starts `weir serve` and returns it with the line saying what happens to HTTPS.
    fn serve(&self, env: &[(&str, &str)]) -> (Child, String) {
        let mut cmd = self.weir(&["serve"]);
        cmd.envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let https = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("HTTPS to"))
            .expect("serve prints the HTTPS line");
        std::thread::spawn(move || lines.for_each(drop));
        (child, https)
    }
}

fn stop(mut child: Child) -> String {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_run_keeps_the_key_in_the_keychain_only_and_rotate_replaces_it() {
    let Some(service) = keychain("ca-lifecycle") else {
        return;
    };
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let inst = Install::new(&up, &ca, &service);

    let (child, https) = inst.serve(&[]);
    assert!(
        // The CA's name constraint covers every Copilot API host (docs/hosts.md).
        https.contains("HTTPS to githubcopilot.com is intercepted"),
        "{https}"
    );
    let kc = Keychain::new(&service);
    let key = kc
        .get("local-ca-key")
        .unwrap()
        .expect("the CA key is in the keychain");
    let cert = std::fs::read_to_string(inst.cert()).unwrap();
    let ca1 =
        weir_tls::LocalCa::from_pem(&cert, &key).expect("key and certificate belong together");
    assert!(https.contains(&ca1.fingerprint_sha256()), "{https}");

    // A real client trusting the certificate Weir wrote gets Weir's policies.
    let url = format!("https://{HOST}{LIST}");
    let (_, code, _, cache) =
        parse_curl(&output(curl(&inst.proxy(), &inst.cert(), &url, &[])).await);
    assert_eq!((code, cache.contains("stored")), (200, true), "{cache}");
    let (_, _, _, cache) = parse_curl(&output(curl(&inst.proxy(), &inst.cert(), &url, &[])).await);
    assert_eq!(cache, "weir; hit");
    stop(child);

    // The key's PEM body is in no file of the data dir (nor is any private key).
    let body: Vec<&str> = key.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!body.is_empty());
    let all = files(&inst.data);
    assert!(all.iter().any(|f| f.ends_with("ca/weir-ca.pem")), "{all:?}");
    for f in &all {
        let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).to_string();
        assert!(
            !text.contains("PRIVATE KEY"),
            "{} holds a private key",
            f.display()
        );
        for line in &body {
            assert!(
                !text.contains(line),
                "{} holds part of the CA key",
                f.display()
            );
        }
    }

    // `weir ca show` reads the certificate and finds the key.
    let out = inst.weir(&["ca", "show"]).output().unwrap();
    let show = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{show}");
    assert!(
        show.contains(&ca1.fingerprint_sha256())
            && show.contains("githubcopilot.com")
            && show.contains("in the OS keychain"),
        "{show}"
    );

    // Rotation: new CA, old key gone, removal steps for the old one then install steps.
    let out = inst.weir(&["ca", "rotate"]).output().unwrap();
    let rot = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{rot}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key2 = kc.get("local-ca-key").unwrap().unwrap();
    assert_ne!(key2, key, "the old key was replaced");
    let ca2 =
        weir_tls::LocalCa::from_pem(&std::fs::read_to_string(inst.cert()).unwrap(), &key2).unwrap();
    assert_ne!(ca2.fingerprint_sha256(), ca1.fingerprint_sha256());
    assert!(rot.contains(&ca2.fingerprint_sha256()), "{rot}");
    assert_eq!(
        std::fs::read_to_string(inst.data.join("ca/weir-ca.old.pem")).unwrap(),
        cert
    );
    let (stop_old, trust_new) = (
        rot.find("Stop trusting the old CA").unwrap(),
        rot.find("Trust the new CA").unwrap(),
    );
    assert!(stop_old < trust_new, "{rot}");
    if weir_tls::Os::current() == weir_tls::Os::Debian {
        assert!(
            rot.contains("rm -f /usr/local/share/ca-certificates/weir-ca.crt")
                && rot.contains("update-ca-certificates"),
            "{rot}"
        );
    }
    kc.delete("local-ca-key").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_keychain_managed_https_stays_a_blind_tunnel() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let inst = Install::new(&up, &ca, "weir-test-no-keychain");
    // With no keychain, `auto` keeps the key in files (tests/headless.rs); here the file store
    // cannot be made either (`secrets` is a plain file), so there is nowhere to keep the key.
    std::fs::create_dir_all(&inst.data).unwrap();
    std::fs::write(inst.data.join("secrets"), b"not a directory").unwrap();
    let no_bus = [(
        "DBUS_SESSION_BUS_ADDRESS",
        "unix:path=/nonexistent/weir-test-bus",
    )];
    let (child, https) = inst.serve(&no_bus);
    assert!(https.contains("tunnelled untouched"), "{https}");
    assert!(
        !inst.cert().exists(),
        "no CA without a keychain to hold its key"
    );
    // The client sees the origin's own certificate (trusting only the upstream's CA works).
    let url = format!("https://{HOST}{LIST}");
    let (_, code, _, cache) =
        parse_curl(&output(curl(&inst.proxy(), &ca.pem_path, &url, &[])).await);
    assert_eq!((code, cache.as_str()), (200, ""));

    let out = inst.weir(&["doctor"]).envs(no_bus).output().unwrap();
    let doc = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{doc}");
    assert!(
        doc.contains(&format!("✓ Weir answers on http://127.0.0.1:{}", inst.port)),
        "{doc}"
    );
    assert!(doc.contains("✗ no OS keychain is available"), "{doc}");
    assert!(
        doc.contains("without it TLS interception is off\n    fix: "),
        "{doc}"
    );
    let err = stop(child);
    assert!(
        err.contains("TLS interception is off") && err.contains("Fix:"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_check_and_its_fix() {
    let Some(service) = keychain("doctor") else {
        return;
    };
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let inst = Install::new(&up, &ca, &service);

    // Not running yet: the first check fails with how to start it.
    let out = inst.weir(&["doctor"]).output().unwrap();
    let doc = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{doc}");
    assert!(
        doc.contains(&format!("✗ nothing answers on 127.0.0.1:{}", inst.port))
            && doc.contains("fix: start Weir: `weir serve`"),
        "{doc}"
    );

    let (child, _) = inst.serve(&[]);
    // The environment `weir env` prints (bash syntax), applied the way `eval` would.
    let out = inst.weir(&["env"]).output().unwrap();
    let env_text = String::from_utf8_lossy(&out.stdout).to_string();
    let vars: Vec<(String, String)> = env_text
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect();
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(get("HTTPS_PROXY"), inst.proxy(), "{env_text}");
    assert_eq!(get("https_proxy"), inst.proxy());
    assert_eq!(get("NO_PROXY"), "localhost,127.0.0.1,::1");
    assert_eq!(PathBuf::from(get("NODE_EXTRA_CA_CERTS")), inst.cert());
    assert_eq!(get("SSL_CERT_FILE"), get("REQUESTS_CA_BUNDLE"));
    let bundle = std::fs::read_to_string(get("SSL_CERT_FILE")).unwrap();
    assert!(
        bundle.ends_with(&std::fs::read_to_string(inst.cert()).unwrap()),
        "the bundle ends with Weir's CA"
    );
    assert!(
        bundle.matches("BEGIN CERTIFICATE").count() > 1,
        "and holds the system roots too"
    );

    let out = inst
        .weir(&["doctor"])
        .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    let doc = String::from_utf8_lossy(&out.stdout).to_string();
    for want in [
        format!("✓ Weir answers on http://127.0.0.1:{}", inst.port),
        "✓ the OS keychain is usable".to_string(),
        "private key in the keychain".to_string(),
        format!("✓ HTTPS_PROXY points at Weir ({})", inst.proxy()),
        "✓ NODE_EXTRA_CA_CERTS holds Weir's CA".to_string(),
        "✓ SSL_CERT_FILE holds Weir's CA".to_string(),
        format!(
            "✓ upstream `copilot-api` https://{HOST} via {} is reachable (HTTP 200)",
            up.addr
        ),
    ] {
        assert!(doc.contains(&want), "missing {want:?} in:\n{doc}");
    }
    // Nobody ran `weir ca install` on this machine: that one fails, with its fix, so exit 1.
    assert!(
        doc.contains("✗ the local CA is not in the system store")
            && doc.contains("fix: `weir ca install --apply`"),
        "{doc}"
    );
    assert_eq!(out.status.code(), Some(1), "{doc}");
    assert!(doc.ends_with("weir doctor: 1 check(s) failed\n"), "{doc}");
    stop(child);
    Keychain::new(&service).delete("local-ca-key").unwrap();
}

/// `weir ca install` installs only a CA Weir made, from the certificate in memory. A CA put in
/// place of Weir's file — here the most convincing one: signed with the very key in the
/// keychain, but without name constraints, so it could vouch for any site — is refused with
/// the reason, no step is printed, and the file is left as it was. Weir's own CA, back in
/// place, installs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_install_refuses_a_replaced_unconstrained_ca() {
    let Some(service) = keychain("ca-install") else {
        return;
    };
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let inst = Install::new(&up, &ca, &service);
    let first = inst.weir(&["ca", "install"]).output().unwrap();
    let shown = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(first.status.success(), "{}", both(&first));
    assert!(
        shown.contains(&inst.cert().display().to_string()),
        "{shown}"
    );
    let weirs = std::fs::read_to_string(inst.cert()).unwrap();

    let key_pem = Keychain::new(&service)
        .get_secret("local-ca-key")
        .unwrap()
        .expect("the CA key is in the keychain");
    let key = rcgen::KeyPair::from_pem(key_pem.expose()).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Weir local CA (replaced)");
    let unconstrained = params.self_signed(&key).unwrap().pem();
    std::fs::write(inst.cert(), &unconstrained).unwrap();

    let out = inst.weir(&["ca", "install"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(err.contains("name-constrained"), "says why: {err}");
    assert!(err.contains("fix:"), "{err}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("weir-ca.pem"),
        "no install step: {}",
        both(&out)
    );
    assert_eq!(std::fs::read_to_string(inst.cert()).unwrap(), unconstrained);

    std::fs::write(inst.cert(), &weirs).unwrap();
    let again = inst.weir(&["ca", "install"]).output().unwrap();
    assert!(again.status.success(), "{}", both(&again));
    Keychain::new(&service).delete("local-ca-key").unwrap();
}

fn both(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
