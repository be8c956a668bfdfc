//! Logs never shrink, and keep growing (#29): a follower polls a session's log through a
//! running Weir with TLS interception, against the loopback fake agents API, with gh's own
//! rule (cli/cli `pkg/cmd/agent-task/shared/log.go`, `Follow`): each poll prints
//! `logs[len(last):]`, so an answer shorter than the last panics gh, and any failed poll ends
//! `--follow`. Each answer must start with the one before it, through a lagging replica's
//! shorter answer, a 503 storm, an engine restart in the middle of it, and after healing the
//! log must grow again at once.
//!
//! Real time, scaled down (one poll a second instead of gh's five; the `stream` class's
//! windows and the breaker's waits shrunk to match), because the restart reads the sealed
//! cache back through the keychain: run under `scripts/with-keychain.sh` (the test says so
//! and returns without one).

#[path = "common/agents_answers.rs"]
mod agents_answers;
#[path = "common/agents_api.rs"]
mod agents_api;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/through_weir.rs"]
mod through_weir;
#[path = "common/tls.rs"]
mod tls;

use agents_api::{AgentsApi, Fault, FaultKind, HOSTS, PLAN_HOST};
use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const NAMES: [&str; 5] = [
    "github-api",
    "copilot-api",
    "copilot-individual",
    "copilot-business",
    "copilot-enterprise",
];

const POLL: Duration = Duration::from_secs(1);

/// The `stream` class's windows and the breaker's waits, scaled to a one-second poll: fresh
/// 1 s, a stale copy waits 250 ms for its refresh, strained refreshes paced to one per 20 s.
const CLASSES: &str = "[classes.stream]\nfresh_ttl = \"1s\"\nstale_while_revalidate = \"2s\"\n\
stale_if_error = \"1h\"\ndegraded_refresh = \"20s\"\nper_try_timeout = \"2s\"\ndeadline = \"2s\"\n\
[breaker]\njitter = false\nopen_wait = \"1s\"\nopen_wait_max = \"2s\"\n\
[retry]\njitter = false\nbase = \"10ms\"\ncap = \"50ms\"\n[queue]\ncredentials = \"memory\"\n";

fn toml(api: &AgentsApi) -> String {
    let mut t = String::from(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         [network]\ndetect_os = false\n",
    );
    for (name, host) in NAMES.iter().zip(HOSTS) {
        t.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\norigin = \"https://{host}\"\nconnect_to = \"{}\"\nca_file = \"{}\"\n\n",
            api.addr,
            api.ca_pem.display()
        ));
    }
    t.push_str(CLASSES);
    t
}

async fn start(api: &AgentsApi, data: &Path, ca: &Arc<weir_tls::LocalCa>) -> weir::EngineHandle {
    let settings = weir::config::parse_str(&toml(api), "test.toml").expect("test config");
    let mut opts = weir::EngineOptions::new(settings, data.to_path_buf());
    opts.local_ca = Some(ca.clone());
    weir::start(opts).await.expect("weir starts")
}

/// One poll of `path` on the plan host through Weir with gh's headers (the corpus's
/// `gh.view.logs`): the status, `Cache-Status` and body.
async fn get(
    weir: &weir::EngineHandle,
    ca: &weir_tls::LocalCa,
    path: &str,
) -> (u16, String, Bytes) {
    let headers = [
        ("authorization", "Bearer gho_LOGFOLLOWER0123456789"),
        ("copilot-integration-id", "copilot-4-cli"),
        ("x-github-api-version", "2026-01-09"),
        ("user-agent", "GitHub CLI 2.83.0"),
    ];
    let (status, h, body) =
        through_weir::get(weir.local_addr(), ca.cert_der(), PLAN_HOST, path, &headers).await;
    let cs = h
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, cs, body)
}

/// gh's `Follow`: what it printed so far, and each poll's rule.
#[derive(Default)]
struct Follower {
    last: Bytes,
    polls: usize,
    statuses: Vec<String>,
}

impl Follower {
    /// One poll: a failure would end `--follow`; a shorter log would panic gh
    /// (`logs[len(last):]`); a log that does not start with the last one prints garbage
    /// (and VS Code drops it).
    async fn poll(&mut self, weir: &weir::EngineHandle, ca: &weir_tls::LocalCa, path: &str) {
        let (status, cs, body) = get(weir, ca, path).await;
        self.polls += 1;
        let n = self.polls;
        assert_eq!(status, 200, "poll {n} failed ({cs}): --follow would end");
        assert!(
            body.len() >= self.last.len(),
            "poll {n}: {} bytes after {} ({cs}): gh would panic",
            body.len(),
            self.last.len()
        );
        assert!(
            body.starts_with(&self.last),
            "poll {n} ({cs}) does not extend the log it follows"
        );
        self.statuses.push(cs);
        self.last = body;
    }
}

fn has_keychain(data: &Path) -> bool {
    let ok = weir::secrets::Namespace::for_data_dir(data)
        .keychain()
        .probe()
        .is_ok();
    if !ok {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_never_shrinks_through_a_storm_and_a_restart_and_grows_after_healing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let api = AgentsApi::start().await;
    let settings = weir::config::parse_str(&toml(&api), "test.toml").unwrap();
    let ca = Arc::new(
        weir_tls::LocalCa::generate_for_owner(
            &settings.intercept_hosts(),
            weir_tls::OffsetDateTime::now_utc(),
            "test",
        )
        .unwrap(),
    );
    let id = api.first_session_id();
    let path = format!("/agents/sessions/{id}/logs");
    let line = |i: usize| format!("data: {{\"line\":{i}}}\n\n");
    let mut follower = Follower::default();
    let mut written = 0;

    // Healthy: the agent writes a line before each poll, and each poll shows it.
    let weir = start(&api, &data, &ca).await;
    for _ in 0..4 {
        written += 1;
        api.append_log(&id, &line(written));
        tokio::time::sleep(POLL).await;
        follower.poll(&weir, &ca, &path).await;
    }
    assert_eq!(follower.last, api.full_log(&id), "{:?}", follower.statuses);

    // A replica one write behind answers the next refresh: shorter than what gh printed.
    written += 1;
    api.append_log(&id, &line(written));
    tokio::time::sleep(POLL).await;
    follower.poll(&weir, &ca, &path).await;
    api.lag_once();
    tokio::time::sleep(POLL).await;
    follower.poll(&weir, &ca, &path).await;

    // A 503 storm: the agent keeps writing, nothing can be read.
    api.fail(Fault {
        route: Some("sessions.logs"),
        kind: FaultKind::Status(503),
        times: None,
    });
    for _ in 0..6 {
        written += 1;
        api.append_log(&id, &line(written));
        tokio::time::sleep(POLL).await;
        follower.poll(&weir, &ca, &path).await;
    }

    // Weir restarts in the middle of it: the log it had comes back from the sealed cache.
    weir.flush_cache().await;
    weir.shutdown().await;
    let weir = start(&api, &data, &ca).await;
    match weir.status().await.cache.persistence {
        weir::status::CachePersistence::Persisted {
            loaded_at_start, ..
        } => assert!(
            loaded_at_start >= 1,
            "the log was not kept across the restart"
        ),
        other => panic!("not persisted: {other:?}"),
    }
    for _ in 0..8 {
        written += 1;
        api.append_log(&id, &line(written));
        tokio::time::sleep(POLL).await;
        follower.poll(&weir, &ca, &path).await;
    }
    assert!(
        follower.last.len() < api.full_log(&id).len(),
        "the storm hid the new lines"
    );

    // Healed: the breaker's next probe (its wait is at most 2 s here) is the refresh of this
    // log; the poll after it shows the whole log. Held for `degraded_refresh` (20 s) instead,
    // the follower would see the outage's copy for ~15 more polls.
    api.heal();
    for _ in 0..4 {
        tokio::time::sleep(POLL).await;
        follower.poll(&weir, &ca, &path).await;
    }
    assert_eq!(
        follower.last,
        api.full_log(&id),
        "the log did not grow after healing: {:?}",
        follower.statuses
    );
    // And it keeps growing, one poll behind the agent at most.
    for _ in 0..3 {
        written += 1;
        api.append_log(&id, &line(written));
        tokio::time::sleep(POLL).await;
        follower.poll(&weir, &ca, &path).await;
    }
    let full = api.full_log(&id);
    assert!(
        full.as_bytes().starts_with(&follower.last)
            && follower.last.len() + line(written).len() >= full.len(),
        "{:?}",
        follower.statuses
    );
    weir.shutdown().await;
}
