//! The real hosts: a Copilot API host announced in a token answer passing through Weir
//! (`endpoints.api`) is managed from then on — TLS-intercepted with Weir's CA (whose name
//! constraint is `githubcopilot.com`), cached and coalesced like the built-in hosts — while a
//! host outside githubcopilot.com is never learned. Nothing leaves loopback: Weir's own
//! connections go through a loopback CONNECT proxy (`upstream_proxy`) that leads every tunnel
//! to a TLS fixture holding a certificate for the learned name, and the token API is a loopback
//! fake. Needs `curl`.

mod common;
#[path = "common/tls.rs"]
mod tls;
#[path = "common/tls_client.rs"]
mod tls_client;

use common::Upstream;
use tls::{output, TestCa, TlsUpstream};
use tls_client::{curl, parse_curl, ConnectProxy};

const LEARNED: &str = "api.learned.githubcopilot.com";
const TOKEN_PATH: &str = "/copilot_internal/v2/token";
/// gh's request body for its Copilot API host, as go-gh's GraphQL client encodes it.
const GH_QUERY: &str = "{\"query\":\"query CopilotEndpoints{viewer{copilotEndpoints{api}}}\"}\n";
/// gh's list request (cli/cli `pkg/cmd/agent-task/capi/sessions.go`).
const LIST: &str = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";

fn token_answer(api: &str) -> String {
    format!(
        r#"{{"token":"tid=1;exp=1","expires_at":{},"refresh_in":1500,"endpoints":{{"api":"{api}","proxy":"https://proxy.learned.githubcopilot.com"}}}}"#,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 1800
    )
}

/// The fixtures' CA, one per process: Weir's upstream client trusts it through
/// `SSL_CERT_FILE` (read when an engine starts), which every test of this binary shares.
fn fixture_ca() -> &'static TestCa {
    static CA: std::sync::OnceLock<TestCa> = std::sync::OnceLock::new();
    CA.get_or_init(|| {
        let ca = TestCa::new();
        std::env::set_var("SSL_CERT_FILE", &ca.pem_path);
        ca
    })
}

/// A running Weir whose upstream connections go through `corp` (the loopback CONNECT proxy in
/// front of the learned host's TLS fixture), managing only the fake GitHub API `github`; and
/// the path of its interception CA for curl.
async fn weir_for(
    github: &Upstream,
    corp: &ConnectProxy,
    dir: &std::path::Path,
) -> (
    weir::EngineHandle,
    String,
    std::path::PathBuf,
    weir::config::Settings,
) {
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         upstream_proxy = \"http://{}\"\n\
         [[upstream]]\nname = \"github-api\"\norigin = \"{}\"\nconnect_to = \"{}\"\n\
         [network]\ndetect_os = false\n",
        corp.addr,
        github.origin(),
        github.addr
    );
    let settings = weir::config::parse_str(&toml, "t.toml").unwrap();
    let ca_pem = dir.join("weir-ca.pem");
    let opts = weir::EngineOptions::new(settings.clone(), dir.join("data"));
    let (handle, proxy) = tls_client::start_intercepting(opts, &ca_pem).await;
    let mut settings = settings;
    settings.listen = handle.local_addr();
    (handle, proxy, ca_pem, settings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_announced_in_a_token_answer_is_managed_from_then_on() {
    let test_ca = fixture_ca();
    let learned = TlsUpstream::start(test_ca, LEARNED).await;
    let corp = ConnectProxy::start(learned.addr).await;
    let github = Upstream::start().await;
    github.set(|b| {
        b.path_bodies = vec![(
            TOKEN_PATH.into(),
            token_answer(&format!("https://{LEARNED}")),
        )]
    });
    let dir = tempfile::tempdir().unwrap();
    let (handle, proxy, ca_pem, settings) = weir_for(&github, &corp, dir.path()).await;

    // VS Code asks for its Copilot token on api.github.com, through Weir.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&proxy).unwrap())
        .build()
        .unwrap();
    let r = client
        .get(format!("{}{TOKEN_PATH}", github.origin()))
        .header("authorization", "token gho_alice")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        upstream_names(&proxy).await,
        ["github-api", "learned:api.learned.githubcopilot.com"]
    );

    // Its agent calls to the announced host are intercepted, cached and coalesced.
    let url = format!("https://{LEARNED}{LIST}");
    let auth = "Authorization: Bearer tid=1";
    let first = parse_curl(&output(curl(&proxy, &ca_pem, &url, &["-H", auth])).await);
    assert_eq!(first.1, 200, "{first:?}");
    assert_eq!(first.3, "weir; fwd=miss; stored", "{first:?}");
    let again = parse_curl(&output(curl(&proxy, &ca_pem, &url, &["-H", auth])).await);
    assert_eq!(again.3, "weir; hit", "{again:?}");
    assert_eq!(learned.count(LIST), 1, "one upstream call for both");
    assert_eq!(learned.seen()[0].host, LEARNED);

    // `weir doctor` names the learned host (it is in no config file).
    let data = dir.path().join("data");
    let checks = tokio::task::spawn_blocking(move || {
        weir::client_setup::run_checks(&weir::client_setup::Install::new(settings, data))
    })
    .await
    .unwrap();
    let learned_checks: Vec<_> = checks.iter().filter(|c| c.what.contains(LEARNED)).collect();
    assert_eq!(learned_checks.len(), 1, "{checks:#?}");
    assert_eq!(learned_checks[0].outcome, weir::client_setup::Outcome::Info);
    assert!(learned_checks[0].what.contains("learned while Weir runs"));

    // A host outside githubcopilot.com is never learned, whatever a token answer says.
    github.set(|b| {
        b.path_bodies = vec![(TOKEN_PATH.into(), token_answer("https://api.example.com"))]
    });
    let r = client
        .get(format!("{}{TOKEN_PATH}", github.origin()))
        .header("authorization", "token gho_bob")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(upstream_names(&proxy).await.len(), 2);
    handle.shutdown().await;
}

/// gh 2.80+ learns its Copilot API host from GraphQL (`viewer { copilotEndpoints { api } }`,
/// cli/cli `pkg/cmd/agent-task/shared/capi.go`): `POST api.github.com/graphql` is streamed
/// through to gh unchanged, and the host the answer to gh's exact query names is managed from
/// then on, like a token answer's. Another query's answer (aliases included), or one naming a
/// host outside githubcopilot.com, teaches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_in_ghs_graphql_answer_is_managed_from_then_on() {
    let test_ca = fixture_ca();
    let learned = TlsUpstream::start(test_ca, LEARNED).await;
    let corp = ConnectProxy::start(learned.addr).await;
    let github = Upstream::start().await;
    let answer = |api: &str| {
        serde_json::json!({"data": {"viewer": {"login": "octocat", "copilotEndpoints": {"api": api}}}})
            .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let (handle, proxy, ca_pem, _) = weir_for(&github, &corp, dir.path()).await;
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&proxy).unwrap())
        .build()
        .unwrap();
    let graphql = |body: &'static str| {
        client
            .post(format!("{}/graphql", github.origin()))
            .header("authorization", "token gho_alice")
            .body(body)
            .send()
    };
    // Another query's answer, and one naming a foreign host: nothing is learned.
    github.set(|b| {
        b.path_bodies = vec![(
            "/graphql".into(),
            r#"{"data":{"viewer":{"login":"octocat"}}}"#.into(),
        )]
    });
    let r = graphql(r#"{"query":"query { viewer { login } }"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    github.set(|b| b.path_bodies = vec![("/graphql".into(), answer("https://api.example.com"))]);
    let r = graphql(GH_QUERY).await.unwrap();
    assert_eq!(r.text().await.unwrap(), answer("https://api.example.com"));
    assert_eq!(upstream_names(&proxy).await, ["github-api"]);

    // Issue 31, item 1: a client's own query whose aliases make GitHub's answer take gh's
    // shape (`copilotEndpoints: status { api: message }`) teaches nothing, whatever it names.
    let real = answer(&format!("https://{LEARNED}"));
    github.set(|b| b.path_bodies = vec![("/graphql".into(), real.clone())]);
    for aliased in [
        r#"{"query":"query{viewer{copilotEndpoints:status{api:message}}}"}"#,
        r#"{"query":"query { viewer { copilotEndpoints { api } } }"}"#,
    ] {
        let r = graphql(aliased).await.unwrap();
        assert_eq!(r.text().await.unwrap(), real);
    }
    assert_eq!(upstream_names(&proxy).await, ["github-api"]);

    // gh's own query: its answer reaches gh byte for byte, and the host is managed.
    let r = graphql(GH_QUERY).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), real);
    assert_eq!(
        upstream_names(&proxy).await,
        ["github-api", "learned:api.learned.githubcopilot.com"]
    );
    assert_eq!(
        github.count("/graphql"),
        5,
        "every GraphQL call went upstream"
    );

    // gh's list on that host is intercepted and cached from then on.
    let url = format!("https://{LEARNED}{LIST}");
    let auth = "Authorization: Bearer gho_alice";
    let first = parse_curl(&output(curl(&proxy, &ca_pem, &url, &["-H", auth])).await);
    assert_eq!(first.3, "weir; fwd=miss; stored", "{first:?}");
    let again = parse_curl(&output(curl(&proxy, &ca_pem, &url, &["-H", auth])).await);
    assert_eq!(again.3, "weir; hit", "{again:?}");
    assert_eq!(learned.count(LIST), 1);
    handle.shutdown().await;
}

/// The upstreams Weir's status lists, by name, in its order.
async fn upstream_names(proxy: &str) -> Vec<String> {
    let status: serde_json::Value = reqwest::get(format!("{proxy}/_weir/api/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap().to_string())
        .collect()
}
