//! The real GitHub Copilot CLI (npm `@github/copilot-linux-x64@1.0.102`) as a tested client:
//! the test installs the pinned package (npm pack, integrity checked) under the target dir,
//! then re-runs itself inside a private network namespace (`unshare -rn`, loopback only) where
//! the fake agents API, Weir (TLS interception) and the CLI run together, so nothing can leave
//! the machine. It reads from the fake's log what the CLI actually sent, and asserts that its
//! repeated start-up calls reach the fake once per fresh window and that a `--connect` to a
//! cloud session is recognised by Weir's class counters.
//!
//! Needs `npm` (to fetch the package once), `unshare` and `ip` (util-linux, iproute2).

#[path = "common/agents_answers.rs"]
mod agents_answers;
#[path = "common/agents_api.rs"]
mod agents_api;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/tls.rs"]
mod tls;

use agents_api::{AgentsApi, Logged, HOSTS};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tls::TlsWeir;

const PACKAGE: &str = "@github/copilot-linux-x64";
const VERSION: &str = "1.0.102";
/// `npm view @github/copilot-linux-x64@1.0.102 dist.shasum`: the tarball must be this one.
const SHASUM: &str = "349fe620c2e7b6215db41110b02ed32f8a3ea19f";
/// Set in the re-run inside the namespace.
const INNER: &str = "WEIR_COPILOT_CLI_NETNS";

const NAMES: [&str; 5] = [
    "github-api",
    "copilot-api",
    "copilot-individual",
    "copilot-business",
    "copilot-enterprise",
];

/// The CLI binary, fetched once into the target dir with npm (`None`: npm is not installed).
fn installed_cli() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("copilot-cli-{VERSION}"));
    let bin = dir.join("package/copilot");
    if bin.is_file() {
        return Some(bin);
    }
    let npm = which("npm")?;
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(npm)
        .args([
            "pack",
            &format!("{PACKAGE}@{VERSION}"),
            "--pack-destination",
        ])
        .arg(&dir)
        .output()
        .expect("npm runs");
    assert!(
        out.status.success(),
        "npm pack {PACKAGE}@{VERSION} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tgz = dir.join(format!("github-copilot-linux-x64-{VERSION}.tgz"));
    let sum = std::process::Command::new("sha1sum")
        .arg(&tgz)
        .output()
        .expect("sha1sum runs");
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert!(
        sum.starts_with(SHASUM),
        "{} is not the pinned package: {sum}",
        tgz.display()
    );
    let untar = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(&dir)
        .status()
        .expect("tar runs");
    assert!(untar.success(), "untar {}", tgz.display());
    let _ = std::fs::remove_file(&tgz);
    assert!(bin.is_file(), "{} missing after untar", bin.display());
    Some(bin)
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The outer test: installs the CLI, then runs `inner` in a new user + network namespace.
#[test]
fn copilot_cli_through_weir_in_a_private_network() {
    if std::env::var_os(INNER).is_some() {
        return; // the re-run executes only `inner`
    }
    let Some(cli) = installed_cli() else {
        eprintln!("SKIPPED: npm is not installed, so {PACKAGE}@{VERSION} cannot be fetched");
        return;
    };
    let unshare = tls::require_tool("unshare", "apt-get install -y util-linux");
    tls::require_tool("ip", "apt-get install -y iproute2");
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new(unshare)
        .args([
            "-rn",
            "sh",
            "-c",
            "ip link set lo up && exec \"$0\" --exact inner --ignored --nocapture --test-threads=1",
        ])
        .arg(&me)
        .env(INNER, &cli)
        .output()
        .expect("unshare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "inside the namespace:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "the inner test did not run:\n{stdout}"
    );
}

/// Weir managing every real host through the fake.
fn weir_toml(api: &AgentsApi) -> String {
    let mut t = String::new();
    // TODO(helper hosts): the per-plan hosts become default upstreams in src/config/load.rs.
    for (name, host) in NAMES.iter().zip(HOSTS) {
        t.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\norigin = \"https://{host}\"\nconnect_to = \"{}\"\nca_file = \"{}\"\n\n",
            api.addr,
            api.ca_pem.display()
        ));
    }
    t
}

/// Runs the CLI with `args` through Weir until it exits or `limit` passes (then it is killed).
async fn run_cli(
    cli: &Path,
    weir: &TlsWeir,
    home: &Path,
    args: &[&str],
    limit: Duration,
) -> (Option<i32>, String, String) {
    // The CLI trusts the bundle in SSL_CERT_FILE; Weir's CA alone failed one of its handshakes,
    // so it gets the system roots plus Weir's CA.
    let bundle = home.join("roots-and-weir.pem");
    let mut pem = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    pem.extend(std::fs::read(&weir.ca_pem).unwrap());
    std::fs::write(&bundle, pem).unwrap();
    // The CLI unpacks its runtime (~6 s) into $XDG_CACHE_HOME/copilot/pkg: that part is shared
    // beside the binary, the rest of the cache (it keeps the user and managed settings there)
    // belongs to this HOME, so that every HOME is a cold start.
    let shared_pkg = cli.parent().unwrap().join("xdg-cache/copilot/pkg");
    std::fs::create_dir_all(&shared_pkg).unwrap();
    let cache = home.join(".cache/copilot");
    std::fs::create_dir_all(&cache).unwrap();
    if !cache.join("pkg").exists() {
        std::os::unix::fs::symlink(&shared_pkg, cache.join("pkg")).unwrap();
    }
    let mut cmd = tokio::process::Command::new(cli);
    cmd.args(args)
        .arg("--disable-client-telemetry")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("COPILOT_GITHUB_TOKEN", "gho_weircopilotclitest000000000000")
        .env("COPILOT_AUTO_UPDATE", "false")
        .env("CI", "true")
        .env("NO_COLOR", "1")
        .env("HTTPS_PROXY", weir.proxy_url())
        .env("HTTP_PROXY", weir.proxy_url())
        .env("SSL_CERT_FILE", &bundle)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("the CLI starts");
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => {
            let out = out.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        // Dropping the future drops the child, which kill_on_drop kills.
        Err(_) => (None, String::new(), "(killed after the time limit)".into()),
    }
}

fn show(log: &[Logged]) -> String {
    log.iter()
        .map(|l| {
            let h: Vec<String> = l
                .headers
                .iter()
                .filter(|(k, _)| k != "authorization")
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            format!(
                "{} {} {}{} [{}] auth={:?} {}\n    {}\n",
                l.route,
                l.method,
                l.host,
                l.path_and_query,
                l.body.len(),
                l.header("authorization")
                    .map(|a| a.split(' ').next().unwrap_or("")),
                String::from_utf8_lossy(&l.body[..l.body.len().min(300)]),
                h.join(" | ")
            )
        })
        .collect()
}

/// The value of one `/metrics` counter line (0 when absent).
fn metric(metrics: &str, name: &str, upstream: &str, class: &str) -> u64 {
    let prefix = format!("{name}{{upstream=\"{upstream}\",class=\"{class}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Every corpus entry of the CLI in `ids` was seen at the fake as the corpus says: host,
/// method, path and query, the corpus's headers, and (for JSON-RPC) the body.
fn seen_as_in_corpus(log: &[Logged], ids: &[&str]) {
    let corpus = corpus::Corpus::load();
    let mut vars = corpus::Vars::default();
    vars.0.insert("github_token".into(), TOKEN.to_string());
    for id in ids {
        let call = corpus.call(id);
        assert_eq!(call.client, corpus::Client::CopilotCli, "{id}");
        let req = call.request(&vars);
        let matching: Vec<&Logged> = log
            .iter()
            .filter(|l| {
                l.host == req.host
                    && l.method == req.method.as_str()
                    && l.path_and_query == req.path_and_query
            })
            .collect();
        assert!(
            !matching.is_empty(),
            "{id}: never sent as the corpus says\n{}",
            show(log)
        );
        let fits = |l: &&Logged| {
            let headers = req.headers.iter().all(|(k, v)| {
                l.header(k).is_some_and(|got| {
                    got.eq_ignore_ascii_case(v) && (k != "Authorization" || got == v)
                })
            });
            let body = match (&call.body, id.starts_with("cli.mcp")) {
                (Some(want), true) => {
                    serde_json::from_slice::<serde_json::Value>(&l.body)
                        .ok()
                        .as_ref()
                        == Some(want)
                }
                _ => true,
            };
            headers && body
        };
        assert!(
            matching.iter().any(fits),
            "{id}: sent, but not with the corpus's headers/body\n{}",
            show(&matching.into_iter().cloned().collect::<Vec<_>>())
        );
    }
}

const TOKEN: &str = "gho_weircopilotclitest000000000000";

/// Inside the namespace: the fake, Weir and the CLI, and what the CLI sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by copilot_cli_through_weir_in_a_private_network inside unshare -rn"]
async fn inner() {
    let cli = PathBuf::from(std::env::var_os(INNER).expect("run by the outer test"));
    let api = AgentsApi::start().await;
    // One fresh window longer than the whole test, so that "once per window" is about Weir,
    // not about how fast this machine runs the CLI.
    let long = "[classes.list]\nfresh_ttl = \"10m\"\n[classes.view]\nfresh_ttl = \"10m\"\n";
    let weir = TlsWeir::start(&format!("{}{long}", weir_toml(&api))).await;
    let metrics = || async {
        reqwest::get(format!("{}/metrics", weir.proxy_url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };

    // Two cold start-ups (empty HOMEs: the CLI keeps some answers there), each with a prompt.
    let mut per_run = vec![];
    for run in 0..2 {
        let home = tempfile::tempdir().unwrap();
        let (code, out, err) = run_cli(
            &cli,
            &weir,
            home.path(),
            &["-p", "Say hello", "--allow-all-tools"],
            Duration::from_secs(120),
        )
        .await;
        let log = api.log();
        assert_eq!(
            code,
            Some(0),
            "start-up {run}: {out}\n{err}\n{}",
            show(&log)
        );
        assert!(
            out.contains("Hello from the fake agents API."),
            "start-up {run}: {out}\n{err}"
        );
        per_run.push(api.count("mcp.readonly"));
    }
    let log = api.log();
    println!("== what the CLI sent\n{}", show(&log));
    seen_as_in_corpus(
        &log,
        &[
            "cli.user",
            "cli.managed_settings",
            "cli.team_customizations",
            "cli.mcp.discover",
            "cli.mcp.initialize",
            "cli.mcp.initialized",
            "cli.mcp.tools_list",
            "cli.models",
            "cli.memory_enabled",
        ],
    );
    // Its start-up reads reach the fake once per fresh window, however many CLIs start.
    for route in [
        "copilot_user",
        "managed_settings",
        "team_customizations",
        "models",
    ] {
        assert_eq!(
            api.count(route),
            1,
            "{route}: two start-ups, one upstream call\n{}",
            show(&log)
        );
    }
    let m = metrics().await;
    let asked = metric(&m, "weir_client_requests_total", "github-api", "view");
    let hits = metric(&m, "weir_cache_hits_fresh_total", "github-api", "view");
    assert!(
        asked >= 6 && hits >= 3,
        "github-api view: {asked} asked, {hits} fresh hits\n{m}"
    );
    assert!(
        metric(
            &m,
            "weir_cache_hits_fresh_total",
            "copilot-individual",
            "list"
        ) >= 1,
        "{m}"
    );
    // JSON-RPC to the MCP server is never cached: every message of both start-ups went through.
    assert_eq!(
        per_run[1],
        2 * per_run[0],
        "MCP messages per start-up: {per_run:?}"
    );
    assert!(per_run[0] >= 3, "{per_run:?}");
    assert_eq!(
        api.count("chat.completions"),
        2,
        "one completion per prompt"
    );

    // `--connect <session id>` to the fake's cloud session.
    let home = tempfile::tempdir().unwrap();
    let sid = api.sessions()[0]["id"].as_str().unwrap().to_string();
    let n = api.log().len();
    let (code, out, err) = run_cli(
        &cli,
        &weir,
        home.path(),
        &[
            "--connect",
            &sid,
            "-p",
            "What is the status?",
            "--allow-all-tools",
            "--log-level",
            "debug",
        ],
        Duration::from_secs(120),
    )
    .await;
    let log = api.log();
    println!("== --connect\n{}", show(&log[n..]));
    assert_eq!(code, Some(0), "--connect: {out}\n{err}");
    seen_as_in_corpus(
        &log[n..],
        &[
            "cli.connect.task",
            "cli.connect.tasks_active",
            "cli.connect.tasks_archived",
            "cli.connect.repository",
        ],
    );
    // The CLI matched the task to a remote session (it logs when it does not).
    let logs = std::fs::read_dir(home.path().join(".copilot/logs"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect::<String>();
    assert!(
        logs.contains("connectMode=true"),
        "the CLI did not enter connect mode"
    );
    assert!(
        !logs.contains("No remote session or task matched"),
        "the CLI did not accept the fake's task as a remote session"
    );
    // Weir recognised the session's calls: the task as a view, the task lists as lists.
    let m = metrics().await;
    assert!(
        metric(
            &m,
            "weir_client_requests_total",
            "copilot-individual",
            "view"
        ) >= 1,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "weir_client_requests_total",
            "copilot-individual",
            "list"
        ) >= 4,
        "{m}"
    );
}
