//! Client set-up commands that need no keychain: `weir setup vscode` (printing, and merging
//! into a JSONC settings.json with a backup), `weir env` in each shell syntax, `weir ca path`
//! and `weir ca install`, and config errors of the new keys naming file, line and key.

use std::path::Path;
use std::process::Output;

#[path = "common/weir_cli.rs"]
mod weir_cli;
use weir_cli::weir;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn setup_vscode_prints_and_merges_settings_keeping_comments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:9911\"\n").unwrap();
    let cfg_s = cfg.to_str().unwrap();

    let out = weir(dir.path(), &["setup", "vscode", "--config", cfg_s]);
    let shown = stdout(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("\"http.proxy\": \"http://127.0.0.1:9911\"")
            && shown.contains("\"http.proxySupport\": \"override\"")
            && shown.contains("\"http.proxyStrictSSL\": true"),
        "{shown}"
    );

    let settings = dir.path().join("settings.json");
    let original =
        "{\n  // keep me\n  \"editor.tabSize\": 2,\n  \"http.proxyStrictSSL\": false,\n}\n";
    std::fs::write(&settings, original).unwrap();
    let out = weir(
        dir.path(),
        &[
            "setup",
            "vscode",
            "--apply",
            "--settings",
            settings.to_str().unwrap(),
            "--config",
            cfg_s,
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = std::fs::read_to_string(&settings).unwrap();
    assert!(
        merged.contains("// keep me") && merged.contains("\"editor.tabSize\": 2"),
        "{merged}"
    );
    assert!(
        merged.contains("\"http.proxyStrictSSL\": true") && !merged.contains("false"),
        "{merged}"
    );
    assert!(
        merged.contains("\"http.proxy\": \"http://127.0.0.1:9911\""),
        "{merged}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("settings.json.bak")).unwrap(),
        original
    );

    // Applying twice changes nothing more.
    let out = weir(
        dir.path(),
        &[
            "setup",
            "vscode",
            "--apply",
            "--settings",
            settings.to_str().unwrap(),
            "--config",
            cfg_s,
        ],
    );
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), merged);

    // A file that is not JSONC is left alone and reported.
    std::fs::write(&settings, "{ \"a\": ").unwrap();
    let out = weir(
        dir.path(),
        &[
            "setup",
            "vscode",
            "--apply",
            "--settings",
            settings.to_str().unwrap(),
            "--config",
            cfg_s,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not valid JSONC"));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), "{ \"a\": ");
}

#[test]
fn env_prints_each_shell_and_skips_ca_variables_when_interception_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:9912\"\nintercept = false\n").unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let bash = stdout(&weir(dir.path(), &["env", "--config", cfg_s]));
    assert!(
        bash.contains("export HTTPS_PROXY=http://127.0.0.1:9912\n")
            && bash.contains("export no_proxy=localhost,127.0.0.1,::1\n"),
        "{bash}"
    );
    assert!(!bash.contains("NODE_EXTRA_CA_CERTS"), "{bash}");
    let fish = stdout(&weir(
        dir.path(),
        &["env", "--shell", "fish", "--config", cfg_s],
    ));
    assert!(
        fish.contains("set -gx HTTP_PROXY http://127.0.0.1:9912\n"),
        "{fish}"
    );
    let ps = stdout(&weir(
        dir.path(),
        &["env", "--shell", "powershell", "--config", cfg_s],
    ));
    assert!(
        ps.contains("$env:NO_PROXY = 'localhost,127.0.0.1,::1'\n"),
        "{ps}"
    );
}

#[test]
fn ca_path_and_install_steps_name_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("weir-data");
    let data_s = data.to_str().unwrap();
    let out = weir(dir.path(), &["ca", "path", "--data-dir", data_s]);
    let path = stdout(&out).trim().to_string();
    assert_eq!(Path::new(&path), data.join("ca/weir-ca.pem"));

    // No keychain: `install` settles the secret store as `weir serve` would (the file store
    // in the data dir), makes the CA there and names the certificate in its steps.
    let out = weir(dir.path(), &["ca", "install", "--data-dir", data_s]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(&path), "{said}");
    assert!(
        data.join("secrets").is_dir(),
        "the CA's key is in the file store"
    );
    assert!(Path::new(&path).is_file());

    // A certificate on disk is not enough: without its key in the secret store Weir cannot
    // vouch for it, so nothing is installed and the error says why, with the fix (with the
    // keychain, install rewrites the file from the CA in memory:
    // `tls_ca::ca_install_refuses_a_replaced_unconstrained_ca`).
    let other = dir.path().join("other-data");
    let other_s = other.to_str().unwrap();
    let hosts = vec!["api.githubcopilot.com".to_string()];
    let ca =
        weir_tls::LocalCa::generate_for_owner(&hosts, weir_tls::OffsetDateTime::now_utc(), "t")
            .unwrap();
    std::fs::create_dir_all(other.join("ca")).unwrap();
    std::fs::write(other.join("ca/weir-ca.pem"), ca.cert_pem()).unwrap();
    let out = weir(dir.path(), &["ca", "install", "--data-dir", other_s]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("its private key is not in the secret store") && err.contains("fix:"),
        "{err}"
    );
    assert!(!stdout(&out).contains("weir-ca.pem"), "no install step");
}

#[test]
fn bad_network_keys_exit_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    let cases = [
        ("[[upstream]]\nname = \"a\"\norigin = \"https://a.example\"\nconnect_to = \"127.0.0.1\"\n", 4, "upstream.connect_to"),
        ("[[upstream]]\nname = \"a\"\norigin = \"https://a.example\"\nca_file = \"missing.pem\"\n", 4, "upstream.ca_file"),
        ("listen = \"127.0.0.1:0\"\nupstream_proxy = \"https://proxy:1\"\n", 2, "upstream_proxy"),
        ("intercept = 1\n", 1, "intercept"),
    ];
    for (text, line, key) in cases {
        std::fs::write(&cfg, text).unwrap();
        let out = weir(dir.path(), &["serve", "--config", cfg.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{}:{line}: key `{key}`", cfg.display())),
            "{err}"
        );
    }
    // A relative ca_file is read next to the config file.
    std::fs::write(
        &cfg,
        "[[upstream]]\nname = \"a\"\norigin = \"https://a.example\"\nca_file = \"up.pem\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("up.pem"), "not a pem").unwrap();
    let out = weir(dir.path(), &["doctor", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!(
        "{}/up.pem holds no PEM certificate",
        dir.path().display()
    )));
}

/// Plain-text links off this machine are not the default. `nats://` to a non-loopback NATS
/// server is refused (the team's login, kept in the keychain and addable at any time with
/// `weir team set-credentials`, would cross the network in clear) unless
/// `allow_plaintext = true`; loopback and `tls://` are fine. The gateway's PostgreSQL link
/// defaults to `sslmode=require` for a database host that is not loopback. Errors name the
/// file, line and key.
// Both links are optional parts (features `team` and `gateway`).
#[cfg(all(feature = "team", feature = "gateway"))]
#[test]
fn plaintext_links_off_this_machine_are_refused_or_encrypted_by_default() {
    let team = |url: &str, extra: &str| {
        weir::config::parse_str(
            &format!("listen = \"127.0.0.1:0\"\n[team]\nnats_url = \"{url}\"\n{extra}"),
            "/etc/weir/w.toml",
        )
    };
    let e = team("nats://nats.corp.example:4222", "")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/etc/weir/w.toml:3: key `team.nats_url`")
            && e.contains("tls://")
            && e.contains("allow_plaintext"),
        "{e}"
    );
    assert!(team("nats://nats.corp.example:4222", "allow_plaintext = true\n").is_ok());
    for ok in [
        "nats://127.0.0.1:4222",
        "nats://localhost:4222",
        "nats://[::1]:4222",
        "tls://nats.corp.example:4222",
    ] {
        assert!(team(ok, "").is_ok(), "{ok}");
    }
    let e = team(
        "tls://nats.corp.example:4222",
        "allow_plaintext = \"yes\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(":4: key `") && e.contains("allow_plaintext"),
        "{e}"
    );

    let gateway = |url: &str| {
        let toml = format!(
            "[gateway]\nlisten = \"0.0.0.0:8443\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"k.pem\"\nallow = [\"10.0.0.0/8\"]\npostgres_url = \"{url}\"\nsecret_key_file = \"k\"\n"
        );
        let s = weir::config::parse_str(&toml, "w.toml").unwrap();
        s.gateway.unwrap().postgres.unwrap().sslmode
    };
    use weir::config::PgSslMode;
    assert_eq!(
        gateway("postgresql://weir@db.corp.example/weir"),
        PgSslMode::Require
    );
    assert_eq!(
        gateway("host=10.1.2.3 user=weir dbname=weir"),
        PgSslMode::Require
    );
    assert_eq!(
        gateway("postgresql://weir@127.0.0.1/weir"),
        PgSslMode::Disable
    );
    assert_eq!(
        gateway("postgresql://weir@localhost/weir"),
        PgSslMode::Disable
    );
    assert_eq!(
        gateway("host=/run/postgresql user=weir"),
        PgSslMode::Disable
    );
    // Said outright, plain text is still the operator's choice.
    assert_eq!(
        gateway("postgresql://weir@db.corp.example/weir?sslmode=disable"),
        PgSslMode::Disable
    );
}
