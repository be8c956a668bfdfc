//! The control secret: `weir secret rotate` replaces it in the keychain (a running Weir keeps
//! its old one until restarted), and the CLI sends it only to this install's Weir — the one
//! whose `/_weir/api/health` names the install id kept in this install's keychain and answers
//! a fresh challenge with the MAC only the secret's holder can make. Needs a keychain: run
//! under scripts/with-keychain.sh (skips without one).

mod common;
use common::Upstream;
use std::path::Path;
use std::process::Command;
use weir::secrets::{Account, Namespace};

fn keychain(data: &Path) -> Option<weir_keychain::Keychain> {
    let k = Namespace::for_data_dir(data).keychain();
    k.probe().is_ok().then_some(k)
}

fn weir(args: &[&str], cfg: &Path, data: &Path) -> std::process::Output {
    weir_with_stdin(args, cfg, data, "")
}

fn weir_with_stdin(args: &[&str], cfg: &Path, data: &Path, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg(args[0])
        .arg("--config")
        .arg(cfg)
        .arg("--data-dir")
        .arg(data)
        .args(&args[1..])
        .env_remove("WEIR_CONTROL_SECRET")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn rotate_replaces_the_secret_in_the_keychain() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let Some(k) = keychain(&data) else {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
        return;
    };
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:0\"\n").unwrap();
    k.set(Account::ControlSecret.as_str(), "old").unwrap();
    let out = weir(&["secret", "rotate"], &cfg, &data);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("restart"),
        "says a running Weir keeps the old one: {stdout}"
    );
    let new = k.get(Account::ControlSecret.as_str()).unwrap().unwrap();
    assert_ne!(new, "old");
    assert_eq!(new.len(), 64);
    assert!(!stdout.contains(&new), "the secret is not printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_does_not_send_the_secret_to_another_weir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let Some(k) = keychain(&data) else {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
        return;
    };
    k.set(Account::ControlSecret.as_str(), "s3cret").unwrap();
    k.set(Account::InstallId.as_str(), "this-install").unwrap();
    // Something else listens where the config says Weir is.
    let other = Upstream::start().await;
    other.set(|b| b.body = Some(r#"{"ok":true,"install_id":"another-install"}"#.into()));
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, format!("listen = \"{}\"\n", other.addr)).unwrap();
    let out = tokio::task::spawn_blocking({
        let (cfg, data) = (cfg.clone(), data.clone());
        move || weir(&["queue", "ls"], &cfg, &data)
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("install"), "{err}");
    assert!(
        other
            .seen()
            .iter()
            .all(|s| !s.headers.contains_key("x-weir-secret")),
        "the secret was never sent"
    );
    assert!(other.count("/_weir/api/queue") == 0);
}

/// #31 item 3: another local user's program on Weir's port while Weir is down answers the
/// health check with this install's id (anyone can read it). None of the commands that send the
/// secret sends it, each says why, and `weir env --if-running` points no shell at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_squatter_with_the_install_id_never_gets_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let Some(k) = keychain(&data) else {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
        return;
    };
    k.set(Account::ControlSecret.as_str(), "s3cret").unwrap();
    k.set(Account::InstallId.as_str(), "this-install").unwrap();
    let squatter = Upstream::start().await;
    // It copies the public answer, and adds a proof of its own making for good measure.
    squatter.set(|b| {
        b.body = Some(
            r#"{"ok":true,"install_id":"this-install","proof":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"}"#
                .into(),
        )
    });
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, format!("listen = \"{}\"\n", squatter.addr)).unwrap();
    let calls: [(&[&str], &str); 6] = [
        (&["queue", "ls"], ""),
        (&["cache", "clear"], ""),
        (&["mode", "cache-only"], ""),
        (&["handoff", "ls"], ""),
        (&["network", "metered", "on"], ""),
        (
            &["token", "set"],
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
        ),
    ];
    for (args, stdin) in calls {
        let out = tokio::task::spawn_blocking({
            let (cfg, data) = (cfg.clone(), data.clone());
            move || weir_with_stdin(args, &cfg, &data, stdin)
        })
        .await
        .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains("did not prove that it holds this install's control secret"),
            "{args:?}: {said}"
        );
        if args[0] != "token" {
            // The token is stored either way; only the running Weir is not told.
            assert!(!out.status.success(), "{args:?}: {said}");
        }
    }
    let env = tokio::task::spawn_blocking({
        let (cfg, data) = (cfg.clone(), data.clone());
        move || weir(&["env", "--if-running"], &cfg, &data)
    })
    .await
    .unwrap();
    assert!(env.status.success());
    assert!(env.stdout.is_empty(), "no shell is pointed at the squatter");
    let seen = squatter.seen();
    assert!(!seen.is_empty(), "the commands did reach the squatter");
    for s in &seen {
        assert!(!s.headers.contains_key("x-weir-secret"), "{s:?}");
        assert!(
            s.path_and_query.starts_with("/_weir/api/health?challenge="),
            "only the challenge, nothing else: {}",
            s.path_and_query
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_talks_to_its_own_weir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    if keychain(&data).is_none() {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.path().join("weir.toml");
    let toml = format!("listen = \"127.0.0.1:{port}\"\nwatch_github_status = false\n");
    std::fs::write(&cfg, &toml).unwrap();
    let settings = weir::config::parse_str(&toml, "t").unwrap();
    let h = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking({
        let (cfg, data) = (cfg.clone(), data.clone());
        move || weir(&["queue", "ls"], &cfg, &data)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The proof holds for this install's own Weir: a secret-carrying call and the shell env.
    for args in [&["mode", "cache-only"][..], &["env", "--if-running"]] {
        let out = tokio::task::spawn_blocking({
            let (cfg, data) = (cfg.clone(), data.clone());
            move || weir(args, &cfg, &data)
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(h.status().await.mode.mode, weir::mode::ModeKind::CacheOnly);
    h.shutdown().await;
}
