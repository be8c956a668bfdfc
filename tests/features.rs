//! Optional parts are cargo features (#21): through the real `weir` binary, a config file that
//! names a table whose feature this build left out fails at start with the file, the line, the
//! key and the feature to build (exit 2), and `serve --gateway` without `gateway` says the same.
//! In a build with the feature, the same file is not refused for it.

#[path = "common/weir_cli.rs"]
mod weir_cli;
use weir_cli::weir;

#[test]
fn a_table_whose_feature_is_not_built_fails_at_start_naming_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    let data = dir.path().join("weir-data");
    let top = "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n";
    let cases = [
        (
            cfg!(feature = "gateway"),
            format!("{top}\n[gateway]\nlisten = \"0.0.0.0:8443\"\ntls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"\nallow = [\"10.0.0.0/8\"]\n"),
            4,
            "gateway",
            "gateway",
        ),
        (
            cfg!(feature = "team"),
            format!("{top}[team]\nnats_url = \"nats://127.0.0.1:4222\"\n"),
            3,
            "team",
            "team",
        ),
        (
            cfg!(feature = "metered"),
            format!("{top}[network]\nsystem_bus_address = \"unix:path=/tmp/weir-no-bus\"\n"),
            4,
            "network.system_bus_address",
            "metered",
        ),
    ];
    let mut refused = 0;
    for (built, text, line, key, feature) in &cases {
        std::fs::write(&cfg, text).unwrap();
        if *built {
            // Only read the config (no listener is started): never refused for its feature.
            let out = weir(dir.path(), &["env", "--config", cfg.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("built without"), "{err}");
            continue;
        }
        let out = weir(
            dir.path(),
            &[
                "serve",
                "--config",
                cfg.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}\n{err}");
        assert!(
            err.contains(&format!("{}:{line}: key `{key}`", cfg.display())),
            "{err}"
        );
        assert!(
            err.contains(&format!("built without the `{feature}` feature")),
            "{err}"
        );
        assert!(err.contains(&format!("--features {feature}")), "{err}");
        refused += 1;
    }
    let built = cases.iter().filter(|c| c.0).count();
    assert_eq!(refused + built, cases.len());

    // `--gateway` itself, with a config that has no table at all.
    if !cfg!(feature = "gateway") {
        std::fs::write(&cfg, top).unwrap();
        let out = weir(
            dir.path(),
            &[
                "serve",
                "--gateway",
                "--config",
                cfg.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("built without the `gateway` feature")
                && err.contains("--features gateway"),
            "{err}"
        );
    }
}
