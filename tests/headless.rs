//! A headless box (#30): no session bus at all, so no OS keychain, and default settings
//! (`[secrets] store = "auto"`). Through the real `weir` binary, whose environment has no
//! `DBUS_SESSION_BUS_ADDRESS`: its secrets go to owner-only files in the data dir, and it
//! intercepts, queues and persists as on a desktop:
//! - an intercepted HTTPS request to a managed host is cached (the second is a hit), the CA key
//!   is a 0600 file, and after a restart the same CA is used and the persisted answer is read
//!   back (the upstream is not asked again);
//! - a create during an outage is queued, survives `kill -9` and is replayed exactly once;
//! - `weir doctor` says the secrets are in files, where, and what that means.
//!
//! scripts/test.sh also runs this binary with no session bus (`env -u DBUS_SESSION_BUS_ADDRESS`).
//! Needs curl.

mod common;
#[path = "common/tls.rs"]
mod tls;
#[path = "common/tls_client.rs"]
mod tls_client;
#[path = "common/weir_cli.rs"]
mod weir_cli;

use common::{eventually, Upstream};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tls::{output, TestCa, TlsUpstream, HOST};
use tls_client::{curl, parse_curl};

const LIST: &str = "/agents/sessions";
const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

/// A throwaway install: HOME, config file and data dir.
struct Box_ {
    dir: tempfile::TempDir,
    config: PathBuf,
    data: PathBuf,
    port: u16,
}

impl Box_ {
    fn new(body: &str) -> Box_ {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("weir.toml");
        std::fs::write(
            &config,
            format!("default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\nwatch_github_status = false\n{body}"),
        )
        .unwrap();
        let data = dir.path().join("data");
        Box_ {
            dir,
            config,
            data,
            port,
        }
    }

    /// `weir ARGS --config … --data-dir …` with no session bus and a throwaway HOME.
    fn weir(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data)
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("WEIR_KEYCHAIN_SERVICE")
            .env_remove("WEIR_CONTROL_SECRET")
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("cfg"))
            .env("XDG_DATA_HOME", self.dir.path().join("xdg"))
            .env("WEIR_LOG", "weir=info");
        c
    }

    /// Starts `weir serve`; returns it with what it printed up to the line about where the
    /// secrets are (or all it printed in 30 s, when there is no such line).
    fn serve(&self) -> (Serving, String) {
        let mut child = self
            .weir(&["serve"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut said = String::new();
        while let Ok(l) = rx.recv_timeout(Duration::from_secs(30)) {
            said.push_str(&l);
            said.push('\n');
            if l.contains("secrets are in") {
                break;
            }
        }
        (Serving(child), said)
    }

    fn proxy(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The file store's directory (one per data dir; the service name of a non-default dir).
    fn secrets(&self) -> PathBuf {
        let d: Vec<PathBuf> = std::fs::read_dir(self.data.join("secrets"))
            .expect("a secrets directory in the data dir")
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(d.len(), 1, "{d:?}");
        d.into_iter().next().unwrap()
    }

    async fn status(&self) -> serde_json::Value {
        reqwest::get(format!("{}/_weir/api/status", self.proxy()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A running `weir serve`, killed if the test fails before it stops it.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn term(mut s: Serving) {
    let _ = Command::new("kill")
        .args(["-TERM", &s.0.id().to_string()])
        .status();
    s.0.wait().unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_session_bus_weir_intercepts_caches_and_keeps_its_cache_across_a_restart() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    // Lists stay fresh for an hour: after the restart a hit cannot be a revalidation.
    let b = Box_::new(&format!(
        "{}[classes.list]\nfresh_ttl = \"1h\"\n",
        tls::upstream_toml(&up, &ca)
    ));

    let (child, said) = b.serve();
    assert!(
        said.contains("HTTPS to githubcopilot.com is intercepted"),
        "{said}"
    );
    assert!(
        said.contains("secrets are in owner-only files in")
            && said.contains(&b.data.join("secrets").display().to_string()),
        "{said}"
    );
    // The CA key is a 0600 file in a 0700 directory, named like the keychain's account.
    let secrets = b.secrets();
    assert_eq!(mode(&b.data.join("secrets")), 0o700);
    assert_eq!(mode(&secrets), 0o700);
    for f in [
        "local-ca-key",
        "control-secret",
        "identity-key",
        "cache-key",
    ] {
        assert_eq!(mode(&secrets.join(f)), 0o600, "{f}");
    }
    let key = std::fs::read_to_string(secrets.join("local-ca-key")).unwrap();
    let cert_path = b.data.join("ca/weir-ca.pem");
    let cert = std::fs::read_to_string(&cert_path).unwrap();
    let ca1 = weir_tls::LocalCa::from_pem(&cert, &key).expect("the key file matches the cert");
    assert!(said.contains(&ca1.fingerprint_sha256()), "{said}");

    // (a) An intercepted request to a managed host is cached: the second one is a hit.
    let url = format!("https://{HOST}{LIST}");
    let (first, code, _, cache) =
        parse_curl(&output(curl(&b.proxy(), &cert_path, &url, &[])).await);
    assert_eq!((code, cache.contains("stored")), (200, true), "{cache}");
    let (second, _, _, cache) = parse_curl(&output(curl(&b.proxy(), &cert_path, &url, &[])).await);
    assert_eq!(cache, "weir; hit");
    assert_eq!(second, first);
    assert_eq!(up.count(LIST), 1);
    let v = b.status().await;
    assert_eq!(v["cache"]["persistence"]["state"], "persisted", "{v}");
    assert_eq!(v["queue"]["credentials"], "file", "{v}");
    term(child);

    // (c) After a restart: the same CA (its key read back from the file) and the persisted
    // answer, served without asking the upstream (the fixture numbers its answers).
    let (child, said) = b.serve();
    assert!(said.contains(&ca1.fingerprint_sha256()), "{said}");
    let v = b.status().await;
    assert_eq!(v["cache"]["persistence"]["loaded_at_start"], 1, "{v}");
    let (again, code, _, cache) =
        parse_curl(&output(curl(&b.proxy(), &cert_path, &url, &[])).await);
    assert_eq!((code, again.as_str()), (200, first.as_str()), "{cache}");
    assert!(cache.contains("hit"), "{cache}");
    assert_eq!(
        up.count(LIST),
        1,
        "the restart read the answer back from disk"
    );

    // (d) `weir doctor` says where the secrets are and what that means.
    let out = b.weir(&["doctor"]).output().unwrap();
    let doc = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        doc.contains("secrets are in files")
            && doc.contains(&secrets.display().to_string())
            && doc.contains("Anyone who can read your home directory as you"),
        "{doc}"
    );
    assert!(doc.contains("private key in the file store"), "{doc}");
    term(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_session_bus_a_create_queued_in_an_outage_survives_kill_9_and_is_sent_once() {
    // The upstream's port is reserved, then closed: connection refused = an outage.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = listener.local_addr().unwrap();
    drop(listener);
    let b = Box_::new(&format!("intercept = false\n[[upstream]]\nname = \"jobs\"\norigin = \"http://{up_addr}\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n"));
    let (mut weir, said) = b.serve();
    assert!(said.contains("secrets are in owner-only files"), "{said}");
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(b.proxy()).unwrap())
        .build()
        .unwrap();
    let body = r#"{"problem_statement":"headless create"}"#;
    let r = client
        .post(format!("http://{up_addr}{JOBS}"))
        .header("authorization", "token headless-cred")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 201, "queued, not refused: {text}");
    // The replay credential is a file of its own.
    let secrets = b.secrets();
    let creds: Vec<String> = std::fs::read_dir(&secrets)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("queue-"))
        .collect();
    assert_eq!(creds.len(), 1, "{creds:?}");
    assert_eq!(mode(&secrets.join(&creds[0])), 0o600);
    weir.0.kill().unwrap(); // SIGKILL
    weir.0.wait().unwrap();

    let up = Upstream::start_on(tokio::net::TcpListener::bind(up_addr).await.unwrap()).await;
    up.set(|b| {
        b.status = 201;
        b.body = Some(r#"{"job_id":"j"}"#.into());
    });
    let (weir, _) = b.serve();
    let sent = eventually(1000, || up.count(JOBS) >= 1).await;
    // Give a double (if any) the chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let posts: Vec<_> = up
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert!(sent, "not replayed");
    assert_eq!(posts.len(), 1, "exactly one replay");
    assert_eq!(&posts[0].body[..], body.as_bytes());
    assert_eq!(
        posts[0].headers.get("authorization").map(|v| v.as_bytes()),
        Some(&b"token headless-cred"[..]),
        "the replay carries the credential read back from its file"
    );
    // A finished item's credential does not outlive it.
    let gone = eventually(200, || !secrets.join(&creds[0]).exists()).await;
    assert!(gone, "the credential file is removed after the replay");
    term(weir);
}

/// The CI runner's steps in the documented order (docs/install.md): `weir env` and `weir ca
/// install` right after `weir serve &`, which may not have made anything yet. Run before any
/// start, they make the CA with its key in the file store `weir serve` then uses; they asked
/// the OS keychain and failed with its fix (start gnome-keyring) on a box that needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_session_bus_weir_env_before_the_first_start_makes_the_ca_serve_uses() {
    let ca = TestCa::new();
    let up = TlsUpstream::start(&ca, HOST).await;
    let b = Box_::new(&tls::upstream_toml(&up, &ca));
    let out = b.weir(&["env"]).output().unwrap();
    let (env, err) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("keychain"), "{err}");
    let cert_path = b.data.join("ca/weir-ca.pem");
    assert!(
        env.contains("NODE_EXTRA_CA_CERTS") && env.contains(&cert_path.display().to_string()),
        "{env}\n{err}"
    );
    let secrets = b.secrets();
    assert_eq!(mode(&secrets.join("local-ca-key")), 0o600);
    let out = b.weir(&["ca", "install"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = std::fs::read_to_string(secrets.join("local-ca-key")).unwrap();
    let cert = std::fs::read_to_string(&cert_path).unwrap();
    let made = weir_tls::LocalCa::from_pem(&cert, &key).expect("the key file matches the cert");
    let (child, said) = b.serve();
    assert!(said.contains(&made.fingerprint_sha256()), "{said}");
    term(child);
}

/// `weir token set` on a box where Weir never started: the token is a file, and the command
/// does not speak of a running Weir to restart (it said "The running Weir at … was not told
/// (connection refused); restart it").
#[test]
fn with_no_session_bus_a_token_set_before_the_first_start_says_so() {
    let b = Box_::new("");
    let out = weir_cli::feed(
        &mut b.weir(&["token", "set"]),
        "gho_headlessBeforeStart0123\n",
    );
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("an owner-only file in"), "{said}");
    assert!(!said.contains("The running Weir"), "{said}");
    assert!(said.contains("reads the token when it starts"), "{said}");
    assert_eq!(mode(&b.secrets().join("github-token")), 0o600);
}

/// A file-store control secret saved with a trailing newline (an editor, `echo … >`, a
/// provisioning script) is read trimmed by `weir serve` and by the CLI: with the newline kept
/// no `X-Weir-Secret` header could carry it, and every control call, the CLI's included, was
/// refused with 401.
#[test]
fn with_no_session_bus_a_control_secret_file_ending_in_a_newline_still_works() {
    let b = Box_::new("");
    let (child, _) = b.serve();
    term(child);
    let file = b.secrets().join("control-secret");
    let secret = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{}\n", secret.trim())).unwrap();
    let (child, _) = b.serve();
    let out = b.weir(&["mode", "cache-only"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = b.weir(&["env", "--if-running"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("HTTPS_PROXY"),
        "--if-running finds this Weir"
    );
    term(child);
}
