//! A learned per-plan host's list answers survive a restart like a configured upstream's: a
//! list fetched through `api.learned.githubcopilot.com` (learned from a token answer's
//! `endpoints.api`) is sealed into `cache.sqlite`; after a restart, once a token answer teaches
//! the host again, a request while that host cannot be reached is answered from the stored copy.
//! The setup is `tests/real_hosts.rs`'s: Weir's upstream connections go through a loopback
//! CONNECT proxy that leads every tunnel to a TLS fixture for the learned name; after the restart
//! the proxy leads to a closed port. Needs `curl` and a keychain (run under
//! scripts/with-keychain.sh; it says so and returns without one).

mod common;
#[path = "common/tls.rs"]
mod tls;
#[path = "common/tls_client.rs"]
mod tls_client;

use common::{has_keychain, Upstream};
use std::net::SocketAddr;
use std::path::Path;
use tls::{output, TestCa, TlsUpstream};
use tls_client::{curl, parse_curl, ConnectProxy};
use weir::status::CachePersistence;

const LEARNED: &str = "api.learned.githubcopilot.com";
const TOKEN_PATH: &str = "/copilot_internal/v2/token";
/// gh's list request (cli/cli `pkg/cmd/agent-task/capi/sessions.go`).
const LIST: &str = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";

/// Lists go stale at once and stay usable on error for a day: after the restart the request
/// asks the upstream first. Retries are short and the breaker stays shut.
const STALE_AT_ONCE: &str = "[classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"24h\"\n[breaker]\nminimum_calls = 1000\n[retry]\nbase = \"1ms\"\ncap = \"5ms\"\n";

fn token_answer() -> String {
    format!(
        r#"{{"token":"tid=1;exp=1","expires_at":{},"refresh_in":1500,"endpoints":{{"api":"https://{LEARNED}"}}}}"#,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 1800
    )
}

/// A Weir on `data` whose upstream connections go through the CONNECT proxy at `corp`,
/// managing only the fake GitHub API `github`; and the path of its interception CA for curl.
async fn weir_on(
    data: &Path,
    github: &Upstream,
    corp: SocketAddr,
) -> (weir::EngineHandle, String, std::path::PathBuf) {
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         upstream_proxy = \"http://{corp}\"\n\
         [[upstream]]\nname = \"github-api\"\norigin = \"{}\"\nconnect_to = \"{}\"\n\
         [network]\ndetect_os = false\n{STALE_AT_ONCE}",
        github.origin(),
        github.addr
    );
    let settings = weir::config::parse_str(&toml, "t.toml").unwrap();
    let ca_pem = data.with_extension("ca.pem");
    let opts = weir::EngineOptions::new(settings, data.to_path_buf());
    let (handle, proxy) = tls_client::start_intercepting(opts, &ca_pem).await;
    (handle, proxy, ca_pem)
}

/// Asks for a Copilot token through Weir, whose answer names the learned host.
async fn learn(proxy: &str, github: &Upstream) {
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy).unwrap())
        .build()
        .unwrap();
    let r = client
        .get(format!("{}{TOKEN_PATH}", github.origin()))
        .header("authorization", "token gho_alice")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// gh's list on the learned host through Weir: (body, status, cache-status).
async fn list(proxy: &str, ca_pem: &Path) -> (String, u16, String) {
    let url = format!("https://{LEARNED}{LIST}");
    let auth = "Authorization: Bearer tid=1";
    let (body, status, _, cs) = parse_curl(&output(curl(proxy, ca_pem, &url, &["-H", auth])).await);
    (body, status, cs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_hosts_list_is_served_from_disk_after_a_restart_during_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    // The fixtures' CA, trusted by Weir's upstream client through SSL_CERT_FILE (read when an
    // engine starts; this binary has one test).
    let test_ca = TestCa::new();
    std::env::set_var("SSL_CERT_FILE", &test_ca.pem_path);
    let learned = TlsUpstream::start(&test_ca, LEARNED).await;
    let corp = ConnectProxy::start(learned.addr).await;
    let github = Upstream::start().await;
    github.set(|b| b.path_bodies = vec![(TOKEN_PATH.into(), token_answer())]);

    let (first, proxy, ca_pem) = weir_on(&data, &github, corp.addr).await;
    learn(&proxy, &github).await;
    let (before, s, cs) = list(&proxy, &ca_pem).await;
    assert_eq!(
        (s, cs.as_str()),
        (200, "weir; fwd=miss; stored"),
        "{before}"
    );
    assert_eq!(learned.count(LIST), 1);
    // The token is cached in memory only; the learned host's list is on disk.
    first.flush_cache().await;
    match first.status().await.cache.persistence {
        CachePersistence::Persisted { entries, .. } => assert_eq!(entries, 1),
        other => panic!("{other:?}"),
    }
    first.shutdown().await;

    // The learned host cannot be reached any more: the CONNECT proxy leads to a closed port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let dead = ConnectProxy::start(closed).await;
    let (second, proxy, ca_pem) = weir_on(&data, &github, dead.addr).await;
    match second.status().await.cache.persistence {
        CachePersistence::Persisted {
            loaded_at_start,
            rejected_at_start,
            ..
        } => assert_eq!((loaded_at_start, rejected_at_start), (1, 0)),
        other => panic!("{other:?}"),
    }
    learn(&proxy, &github).await;
    let (body, s, cs) = list(&proxy, &ca_pem).await;
    assert_eq!(s, 200, "{cs} {body}");
    assert_eq!(body, before, "the same answer as before the restart");
    assert_eq!(
        cs, "weir; hit; fwd=stale; detail=connection",
        "stale, with the upstream's error"
    );
    assert_eq!(learned.count(LIST), 1, "the learned host was not reached");
    assert!(!dead.seen.lock().unwrap().is_empty(), "Weir tried the host");
    second.shutdown().await;
}
