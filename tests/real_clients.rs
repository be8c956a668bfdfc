//! Corpus-driven tests: every call in `tests/corpus/calls.json`, sent exactly as its client
//! sends it (host, method, path and query as encoded, headers, body) through a running Weir
//! with TLS interception, real host names routed to the loopback fake agents API
//! (`tests/common/agents_api.rs`), gets its class's behaviour, counted at the fake. Also: the
//! corpus agrees with the route table, the fake answers in the corpus's shapes, and VS Code's
//! URLs built by the real `@vscode/copilot-api` package match the corpus
//! (`tests/node/copilot_api.test.mjs`, run here with `node --test`).

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

use agents_api::{AgentsApi, Fault, FaultKind, HOSTS};
use bytes::Bytes;
use corpus::{Answers, Corpus, Request, Vars};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::collections::BTreeMap;
use tls::TlsWeir;
use weir::config::RouteClass;

/// Weir's upstream name for each of [`HOSTS`] (the names of Weir's built-in upstreams).
const NAMES: [&str; 5] = [
    "github-api",
    "copilot-api",
    "copilot-individual",
    "copilot-business",
    "copilot-enterprise",
];

/// `[[upstream]]` tables managing every host in [`HOSTS`] through the fake, plus `extra`.
// TODO(helper hosts): the per-plan hosts become default upstreams in src/config/load.rs; then
// only `connect_to`/`ca_file` need saying here.
fn weir_toml(api: &AgentsApi, extra: &str) -> String {
    let mut t = String::new();
    for (name, host) in NAMES.iter().zip(HOSTS) {
        t.push_str(&format!(
            "[[upstream]]\nname = \"{}\"\norigin = \"https://{host}\"\nconnect_to = \"{}\"\nca_file = \"{}\"\n\n",
            name,
            api.addr,
            api.ca_pem.display()
        ));
    }
    t.push_str(extra);
    t
}

/// Long fresh windows, so that two calls in a row are inside one however slow this machine is.
const LONG_FRESH: &str =
    "[classes.list]\nfresh_ttl = \"10m\"\n[classes.view]\nfresh_ttl = \"10m\"\n\
                          [classes.stream]\nfresh_ttl = \"10m\"\n";

/// Sends `req` straight to the fake (no Weir), trusting only the fake's CA.
async fn send_direct(api: &AgentsApi, req: &Request) -> (u16, http::HeaderMap, Bytes) {
    let tcp = tokio::net::TcpStream::connect(api.addr).await.unwrap();
    exchange(tcp, &api.ca_der, req).await
}

/// Sends `req` through Weir as a client behind a proxy does: CONNECT host:443, TLS trusting
/// only Weir's CA (SNI = the host), then HTTP/1.1 with the corpus's exact path and headers.
async fn send(weir: &TlsWeir, req: &Request) -> (u16, http::HeaderMap, Bytes) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let target = format!("{}:443", req.host);
    tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "CONNECT answer cut");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "CONNECT refused: {head}");
    exchange(tcp, weir.ca.cert_der(), req).await
}

/// TLS (SNI = the host, trusting only `root`) and one HTTP/1.1 exchange of `req` over `tcp`.
async fn exchange(
    tcp: tokio::net::TcpStream,
    root: &[u8],
    req: &Request,
) -> (u16, http::HeaderMap, Bytes) {
    let tls = tokio_rustls::TlsConnector::from(through_weir::client_config(root))
        .connect(ServerName::try_from(req.host.clone()).unwrap(), tcp)
        .await
        .unwrap_or_else(|e| panic!("{}: TLS: {e}", req.id));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .method(req.method.clone())
        .uri(&req.path_and_query)
        .header("host", &req.host);
    if !req
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
    {
        b = b.header("user-agent", format!("weir-corpus/{}", req.id));
    }
    for (k, v) in &req.headers {
        b = b.header(k, v);
    }
    let body = Full::new(Bytes::from(req.body.clone().unwrap_or_default()));
    let resp = sender.send_request(b.body(body).unwrap()).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status.as_u16(), parts.headers, bytes)
}

/// The corpus's vars with a credential of its own for call `i`, so that no two calls share an
/// identity (and so a cache entry) by accident.
fn vars_for(i: usize) -> Vars {
    let mut v = Vars::default();
    v.0.insert("github_token".into(), format!("gho_weircorpustest{i:04}"));
    v
}

#[test]
fn the_corpus_agrees_with_the_route_table() {
    let corpus = Corpus::load();
    let routes = weir::config::default_routes();
    let vars = Vars::default();
    let mut wrong = vec![];
    for call in &corpus.calls {
        let method = http::Method::from_bytes(call.method.as_bytes()).unwrap();
        let got = weir::config::classify(&routes, &method, &call.path(&vars));
        if got != call.class {
            wrong.push(format!(
                "{} {} {}: {got:?}, corpus says {:?}",
                call.id, call.method, call.path_and_query, call.class
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every class is exercised by some real client's call.
    for class in [
        RouteClass::Model,
        RouteClass::List,
        RouteClass::View,
        RouteClass::Stream,
        RouteClass::Create,
        RouteClass::Token,
        RouteClass::Other,
    ] {
        assert!(corpus.calls.iter().any(|c| c.class == class), "{class:?}");
    }
}

#[test]
fn every_corpus_host_is_served_by_the_fake() {
    let hosts = Corpus::load().hosts();
    for h in &hosts {
        assert!(HOSTS.contains(&h.as_str()), "{h} is not served by the fake");
    }
}

/// Each call twice (a create once) through Weir: cached classes reach the fake once, the
/// others each time; Weir counts each under its class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_call_gets_its_class_behaviour_through_weir() {
    let corpus = Corpus::load();
    let answers = Answers::load();
    let api = AgentsApi::start().await;
    let weir = TlsWeir::start(&weir_toml(&api, LONG_FRESH)).await;
    let mut by_class: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut failures = vec![];
    for (i, call) in corpus.calls.iter().enumerate() {
        let req = call.request(&vars_for(i));
        // Weir's own `GET /user` (its account lookup, once per credential, `User-Agent: weir/…`)
        // is not the client's call.
        let clients = |api: &AgentsApi| {
            api.log()
                .iter()
                .filter(|l| {
                    l.host == req.host
                        && l.method == req.method.as_str()
                        && l.path_and_query == req.path_and_query
                        && !l
                            .header("user-agent")
                            .is_some_and(|u| u.starts_with("weir/"))
                })
                .count()
        };
        let before = clients(&api);
        let sends = if call.class == RouteClass::Create {
            1
        } else {
            2
        };
        let mut last = None;
        for _ in 0..sends {
            let (status, headers, body) = send(&weir, &req).await;
            let want = answers.answers[&call.answer].status;
            if status != want {
                failures.push(format!(
                    "{}: status {status}, want {want}: {}",
                    call.id,
                    String::from_utf8_lossy(&body)
                ));
            }
            last = Some((headers, body));
        }
        *by_class
            .entry((call.host.clone(), call.class.as_str()))
            .or_default() += sends as u64;
        let reached = clients(&api) - before;
        // The fake answers the logs (`stream`) whole, with a length, as the clients read them:
        // a document, so cached like a view.
        let want = if call.class.is_cacheable()
            || call.class == RouteClass::Create
            || call.class == RouteClass::Stream
        {
            1
        } else {
            2
        };
        if reached != want {
            failures.push(format!(
                "{} ({:?}): reached the fake {reached} times for {sends} sends, want {want}",
                call.id, call.class
            ));
        }
        // What the fake received is what the client sent: path, query and headers unchanged.
        let seen = api
            .log()
            .into_iter()
            .rfind(|l| l.path_and_query == req.path_and_query && l.host == req.host)
            .unwrap_or_else(|| panic!("{} never reached the fake", call.id));
        for (k, v) in &req.headers {
            if seen.header(k) != Some(v.as_str()) {
                failures.push(format!(
                    "{}: header {k} arrived as {:?}",
                    call.id,
                    seen.header(k)
                ));
            }
        }
        if let (Some(b), Some((_, got))) = (&req.body, &last) {
            assert_eq!(seen.body.as_ref(), b.as_slice(), "{}: body", call.id);
            let empty_expected = answers.answers[&call.answer].text.as_deref() == Some("");
            assert_eq!(got.is_empty(), empty_expected, "{}: answer body", call.id);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // Weir recognised each call's class: its own counters, per upstream and class.
    let metrics = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for ((host, class), n) in &by_class {
        let i = HOSTS.iter().position(|h| h == host).unwrap();
        let line = format!(
            "weir_client_requests_total{{upstream=\"{}\",class=\"{class}\"}} {n}",
            NAMES[i]
        );
        assert!(
            metrics.lines().any(|l| l == line),
            "missing `{line}` in\n{metrics}"
        );
    }
}

/// A partial outage stays partial (#29, item 11): Mission Control's events POSTs failing
/// open only their own family's breaker; its commands polls and the agent-sessions calls on
/// the same host still reach the upstream, and the status document names the open family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_mission_control_events_hold_back_only_their_own_family() {
    let corpus = Corpus::load();
    let api = AgentsApi::start().await;
    let weir = TlsWeir::start(&weir_toml(&api, "")).await;
    api.fail(Fault {
        route: Some("mc.events"),
        kind: FaultKind::Status(503),
        times: None,
    });
    let events = corpus.call("vscode.mc.events").request(&vars_for(0));
    for _ in 0..12 {
        let (status, _, _) = send(&weir, &events).await;
        assert_eq!(status, 503);
    }
    let reached = api.count("mc.events");
    assert!(
        (1..12).contains(&reached),
        "the events family's breaker opened after {reached} failures of 12"
    );
    for id in ["vscode.mc.commands", "vscode.session", "vscode.mc.commands"] {
        let req = corpus.call(id).request(&vars_for(0));
        let before = api.count_exact(&req.host, req.method.as_str(), &req.path_and_query);
        let (status, _, body) = send(&weir, &req).await;
        assert_eq!(status, 200, "{id}: {}", String::from_utf8_lossy(&body));
        let after = api.count_exact(&req.host, req.method.as_str(), &req.path_and_query);
        if id == "vscode.mc.commands" {
            assert_eq!(after - before, 1, "{id} reached the upstream, never cached");
        }
    }
    let status = weir.status().await;
    let up = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "copilot-individual")
        .unwrap();
    assert_eq!(up["breaker"]["state"], "closed", "{}", up["breaker"]);
    let fam = up["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["family"] == "mirror-events")
        .unwrap_or_else(|| panic!("no mirror-events family in {}", up["families"]));
    assert_eq!(fam["breaker"]["state"], "open", "{fam}");
}

/// The calls the new routes give a class: with no fresh window at all, an outage at the fake
/// is answered from the last good copy (the reason they must not be `other`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_read_calls_are_served_stale_in_an_outage() {
    let corpus = Corpus::load();
    let extra = "[classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n\
                 [classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n\
                 [classes.stream]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n";
    let ids = [
        // The logs, answered as a document: served stale like a view.
        "gh.view.logs",
        "vscode.logs",
        "gh.view.pr_sessions",
        "vscode.job_by_session",
        "vscode.custom_agent",
        "vscode.cca_models",
        "cli.user",
        "cli.managed_settings",
        "cli.team_customizations",
        "cli.models",
        "rest.tasks.list",
        "rest.tasks.one",
        // VS Code's Task API backend (#29): lists, a task and its events pages.
        "vscode.tasks.list",
        "vscode.tasks.list_repo",
        "vscode.tasks.get",
        "vscode.tasks.events",
    ];
    for (i, id) in ids.iter().enumerate() {
        // A Weir of its own per call: one outage opens the upstream's breaker for the next.
        let api = AgentsApi::start().await;
        let weir = TlsWeir::start(&weir_toml(&api, extra)).await;
        let req = corpus.call(id).request(&vars_for(100 + i));
        // The first call with a new credential is keyed to it alone; once Weir has resolved
        // its account (off the request path), answers are kept under the account.
        send(&weir, &req).await;
        accounts_resolved(&weir, 1).await;
        let (status, _, good) = send(&weir, &req).await;
        assert_eq!(status, 200, "{id}: {}", String::from_utf8_lossy(&good));
        api.fail(Fault {
            route: None,
            kind: FaultKind::Status(503),
            times: None,
        });
        // Weir's own `GET /user` (its account lookup, once per credential, `User-Agent: weir/…`)
        // is not the client's call.
        let clients = |api: &AgentsApi| {
            api.log()
                .iter()
                .filter(|l| {
                    l.host == req.host
                        && l.method == req.method.as_str()
                        && l.path_and_query == req.path_and_query
                        && !l
                            .header("user-agent")
                            .is_some_and(|u| u.starts_with("weir/"))
                })
                .count()
        };
        let before = clients(&api);
        let (status, headers, stale) = send(&weir, &req).await;
        api.heal();
        assert_eq!(status, 200, "{id}: {}", String::from_utf8_lossy(&stale));
        assert_eq!(stale, good, "{id}: the last good answer");
        let after = api.count_exact(&req.host, req.method.as_str(), &req.path_and_query);
        assert!(
            after > before,
            "{id}: Weir asked the upstream before serving stale"
        );
        let cache = headers
            .get("cache-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            cache.contains("stale") || cache.contains("hit"),
            "{id}: {cache}"
        );
    }
}

/// Waits (bounded) until Weir has resolved `n` credentials to accounts.
/// `gh agent-task view --log --follow` polls the whole log every 5 s: two polls inside one
/// fresh window reach the upstream once and get the same bytes (the answer is a document; a
/// true event stream would pass each time, see `tests/passthrough.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_follow_polls_of_the_logs_are_one_upstream_call() {
    let corpus = Corpus::load();
    let answers = Answers::load();
    let api = AgentsApi::start().await;
    let weir = TlsWeir::start(&weir_toml(&api, LONG_FRESH)).await;
    let req = corpus.call("gh.view.logs").request(&vars_for(200));
    let (s1, h1, first) = send(&weir, &req).await;
    let (s2, h2, second) = send(&weir, &req).await;
    assert_eq!((s1, s2), (200, 200));
    let want = answers.answers["session_logs"].text.clone().unwrap();
    assert_eq!(first, want.as_bytes(), "the log, byte for byte");
    assert_eq!(second, first);
    assert_eq!(h1["cache-status"], "weir; fwd=miss; stored");
    assert_eq!(h2["cache-status"], "weir; hit");
    assert_eq!(h2["content-type"], "text/event-stream");
    let reached = api.count_exact(&req.host, "GET", &req.path_and_query);
    assert_eq!(reached, 1, "two polls, one upstream call");
}

/// The Copilot CLI sends `bearer` on `managed_settings` and `Bearer` elsewhere. The scheme is
/// case-insensitive (RFC 9110), so both are one credential to Weir: one account lookup, one
/// cache entry. (The fake gives each distinct `Authorization` value its own account, so two
/// identities here would be two lookups and two upstream calls.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_spellings_of_the_scheme_are_one_credential() {
    let corpus = Corpus::load();
    let api = AgentsApi::start().await;
    let weir = TlsWeir::start(&weir_toml(&api, LONG_FRESH)).await;
    let lower = corpus.call("cli.managed_settings").request(&vars_for(300));
    let mut upper = lower.clone();
    for (k, v) in upper.headers.iter_mut() {
        if k.eq_ignore_ascii_case("authorization") {
            assert!(
                v.starts_with("bearer "),
                "the corpus spells it lower-case: {v}"
            );
            *v = v.replacen("bearer ", "Bearer ", 1);
        }
    }
    let (status, _, first) = send(&weir, &lower).await;
    assert_eq!(status, 200);
    accounts_resolved(&weir, 1).await;
    let (status, headers, second) = send(&weir, &upper).await;
    assert_eq!(status, 200);
    assert_eq!(second, first);
    assert_eq!(headers["cache-status"], "weir; hit");
    let path = &lower.path_and_query;
    assert_eq!(
        api.count_exact(&lower.host, "GET", path),
        1,
        "one cache entry"
    );
    assert_eq!(api.count("user"), 1, "one account lookup");
    assert_eq!(
        weir.status().await["identity"]["resolved"].as_u64(),
        Some(1)
    );
}

async fn accounts_resolved(weir: &TlsWeir, n: u64) {
    for _ in 0..500 {
        if weir.status().await["identity"]["resolved"].as_u64() >= Some(n) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "Weir resolved fewer than {n} accounts: {}",
        weir.status().await["identity"]
    );
}

/// The fake's answers have the corpus's shapes: every key of the template is present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_answers_in_the_corpus_shapes() {
    let corpus = Corpus::load();
    let answers = Answers::load();
    let api = AgentsApi::start().await;
    let weir = TlsWeir::start(&weir_toml(&api, "")).await;
    for (i, call) in corpus.calls.iter().enumerate() {
        let a = &answers.answers[&call.answer];
        let (status, _, body) = send(&weir, &call.request(&vars_for(200 + i))).await;
        assert_eq!(status, a.status, "{}", call.id);
        if let Some(text) = &a.text {
            let head = &text.as_bytes()[..text.len().min(6)];
            let got = String::from_utf8_lossy(&body);
            assert!(body.starts_with(head), "{}: {got:?}", call.id);
            continue;
        }
        let got: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{}: {e}", call.id));
        let want = answers.body(&call.answer);
        same_keys(&want, &got, &call.id);
    }
}

fn same_keys(want: &serde_json::Value, got: &serde_json::Value, at: &str) {
    match (want, got) {
        (serde_json::Value::Object(w), serde_json::Value::Object(g)) => {
            for (k, v) in w {
                let g = g.get(k).unwrap_or_else(|| panic!("{at}: no `{k}`"));
                same_keys(v, g, &format!("{at}.{k}"));
            }
        }
        (serde_json::Value::Array(w), serde_json::Value::Array(g)) => {
            if let (Some(w), Some(g)) = (w.first(), g.first()) {
                same_keys(w, g, &format!("{at}[0]"));
            }
        }
        _ => {}
    }
}

/// VS Code's URLs are not transcribed: the real `@vscode/copilot-api` (pinned as VS Code pins
/// it) builds every VS Code call of the corpus, both backends (v1 jobs and sessions, v2 Task
/// API), and the Node test compares them byte for byte.
#[test]
fn vscode_calls_are_built_by_the_real_copilot_api_package() {
    let node = tls::require_tool("node", "apt-get install -y nodejs npm");
    let dir = tls::repo_root().join("tests/node");
    assert!(
        dir.join("node_modules/@vscode/copilot-api/package.json")
            .is_file(),
        "tests/node/node_modules is missing; run: npm ci --prefix tests/node"
    );
    let pkg: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("node_modules/@vscode/copilot-api/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        pkg["version"], "0.5.2",
        "the version microsoft/vscode's extensions/copilot depends on (^0.5.2)"
    );
    let out = std::process::Command::new(node)
        .arg("--test")
        .arg(dir.join("copilot_api.test.mjs"))
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# pass 5"), "{stdout}");
}

/// docs/real-clients.md lists every corpus call with its class, so the table cannot drift
/// from the corpus (or the route table, which the corpus is checked against above).
#[test]
fn the_docs_table_lists_every_corpus_call() {
    let doc = std::fs::read_to_string(tls::repo_root().join("docs/real-clients.md")).unwrap();
    let corpus = Corpus::load();
    let mut missing = vec![];
    for c in &corpus.calls {
        let row = format!(
            "| `{}` | {} | {} | `{}` | {} |",
            c.id,
            c.method,
            c.host,
            c.path_and_query.replace('|', "\\|"),
            c.class.as_str()
        );
        if !doc.lines().any(|l| l == row) {
            missing.push(row);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/real-clients.md lacks these rows:\n{}",
        missing.join("\n")
    );
}

/// The fake fails when told to, on one route or all, for a number of requests or until healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_fails_when_told() {
    let corpus = Corpus::load();
    let api = AgentsApi::start().await;
    let list = corpus.call("gh.list.page1").request(&Vars::default());
    let view = corpus.call("gh.view.session").request(&Vars::default());
    api.fail(Fault {
        route: Some("sessions.list"),
        kind: FaultKind::Status(503),
        times: Some(1),
    });
    assert_eq!(send_direct(&api, &list).await.0, 503);
    assert_eq!(
        send_direct(&api, &view).await.0,
        200,
        "only the list route fails"
    );
    assert_eq!(send_direct(&api, &list).await.0, 200, "once, then healthy");
    api.fail(Fault {
        route: None,
        kind: FaultKind::RateLimited {
            retry_after_secs: 7,
        },
        times: None,
    });
    for req in [&list, &view] {
        let (status, headers, _) = send_direct(&api, req).await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after"], "7");
    }
    api.heal();
    api.fail(Fault {
        route: None,
        kind: FaultKind::Delay(std::time::Duration::from_millis(20)),
        times: Some(1),
    });
    let (status, _, body) = send_direct(&api, &view).await;
    assert_eq!(status, 200, "a delayed answer is still the answer");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["id"], Vars::default().0["session_id"].as_str());
    assert_eq!(
        api.count("sessions.list"),
        3,
        "every request is logged, failed or not"
    );
    // Paging on the real parameters: page_size and page_number, short last page.
    api.seed_sessions(45, "octo-org/hello");
    let page = |n: u32| {
        let mut r = list.clone();
        r.path_and_query = r
            .path_and_query
            .replace("page_number=1", &format!("page_number={n}"));
        r
    };
    let mut sizes = vec![];
    for n in 1..=2 {
        let (_, _, body) = send_direct(&api, &page(n)).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        sizes.push(v["sessions"].as_array().unwrap().len());
        assert!(
            v.get("has_next_page").is_none(),
            "no field a real page is not known to carry"
        );
    }
    assert_eq!(
        sizes,
        [46, 0],
        "46 sessions in pages of 50: one short page, then none"
    );
}
