//! The fallback policy graph (#14) end to end: real loopback upstreams, a real engine, the
//! org policy file in a temp dir (never /etc).

mod common;
use common::{Upstream, Weir};
use serde_json::Value;

/// Credentials in memory (no keychain needed) and a breaker that never opens: the outage is
/// the upstream's own answers.
const QUEUE: &str = "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";

fn jobs(up: &Upstream, repo: &str) -> String {
    format!("{}/agents/swe/v1/jobs/{repo}", up.origin())
}

fn create_body(n: usize) -> String {
    format!(r#"{{"problem_statement":"task {n}","event_type":"weir-test"}}"#)
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn posts(up: &Upstream, repo: &str) -> usize {
    let path = format!("/agents/swe/v1/jobs/{repo}");
    up.seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path_and_query == path)
        .count()
}

#[tokio::test]
async fn two_repositories_in_one_outage_one_queued_the_other_failed_naming_the_rule() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let rules = "[[policy]]\nrepo = \"acme/*\"\ncreate = \"queue\"\n\n[[policy]]\nrepo = \"other/*\"\ncreate = \"fail\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{QUEUE}{rules}")).await;
    let c = weir.client("alice");

    let r = c
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(header(&r, "weir-policy"), "user:1 create=queue");
    assert!(header(&r, "location").starts_with("/_weir/api/queue/"));

    let r = c
        .post(jobs(&up, "other/web"))
        .body(create_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(header(&r, "weir-policy"), "user:2 create=fail");
    assert!(header(&r, "content-type").starts_with("application/problem+json"));
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "policy_failed");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("user:2") && detail.contains("other/*"),
        "{detail}"
    );
    // The failed create had its one attempt and nothing more (the queued one may be replayed).
    assert_eq!(posts(&up, "other/web"), 1);

    let s = weir.status().await;
    assert_eq!(s["policy"]["user_rules"], 2);
    assert_eq!(s["policy"]["decisions"], 2);
    let recent: Vec<&str> = s["policy"]["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["header"].as_str().unwrap())
        .collect();
    assert_eq!(recent, ["user:2 create=fail", "user:1 create=queue"]);
    // Repository names only with the control secret.
    assert!(
        s["policy"]["recent"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["repo"].is_null()),
        "{}",
        s["policy"]
    );
    let url = format!("{}/_weir/api/status", weir.handle.base_url());
    let open = reqwest::get(&url).await.unwrap().text().await.unwrap();
    assert!(
        !open.contains("acme/api") && !open.contains("other/web"),
        "{open}"
    );
    let with = common::with_secret(
        reqwest::Client::new().get(&url),
        weir.handle.control_secret(),
    )
    .await
    .json::<Value>()
    .await
    .unwrap();
    let repos: Vec<&str> = with["policy"]["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["repo"].as_str().unwrap())
        .collect();
    assert_eq!(repos, ["other/web", "acme/api"]);
    // Exactly one create went to the queue (the failed one did not).
    let states = [
        "queued",
        "replaying",
        "in_doubt",
        "done",
        "failed",
        "cancelled",
        "expired",
    ];
    let items: u64 = states.iter().filter_map(|k| s["queue"][k].as_u64()).sum();
    assert_eq!(items, 1, "{}", s["queue"]);
}

#[tokio::test]
async fn a_user_rule_that_loosens_an_org_rule_is_refused_and_the_org_rule_decides() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let dir = tempfile::tempdir().unwrap();
    let org = dir.path().join("policy.toml");
    std::fs::write(
        &org,
        "# managed by IT\n[[policy]]\nrepo = \"acme/*\"\ncreate = \"fail\"\nmodel = \"never\"\n",
    )
    .unwrap();
    let top = format!("policy_file = \"{}\"\n", org.display());
    let rules = "[[policy]]\nrepo = \"acme/api\"\ncreate = \"queue\"\n";
    let weir = Weir::start_with_top(&top, &[&up.origin()], &format!("{QUEUE}{rules}")).await;

    let s = weir.status().await;
    assert_eq!(s["policy"]["org_rules"], 1);
    assert_eq!(s["policy"]["org_file"], org.display().to_string());
    let refused = s["policy"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let msg = refused[0]["message"].as_str().unwrap();
    let org_at = format!("{}:2", org.display());
    assert!(msg.contains(&org_at) && msg.contains("test.toml:"), "{msg}");
    assert!(msg.contains("never loosened"), "{msg}");
    assert_eq!(
        (
            refused[0]["user"]["index"].as_u64(),
            refused[0]["org"]["index"].as_u64()
        ),
        (Some(1), Some(1))
    );

    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(header(&r, "weir-policy"), "org:1 create=fail");
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "policy_failed");

    // The control API explains the table for that repository, with the control secret only
    // (it names repository globs and the org file's path; issue 31, item 4).
    let api = |q: &str| format!("{}/_weir/api/policy?{q}", weir.proxy_url());
    let open = reqwest::get(api("repo=acme%2Fapi&network=any"))
        .await
        .unwrap();
    assert_eq!(open.status().as_u16(), 401);
    let t: Value = common::with_secret(
        reqwest::Client::new().get(api("repo=acme%2Fapi&network=any")),
        weir.handle.control_secret(),
    )
    .await
    .json()
    .await
    .unwrap();
    let row = |f: &str| {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == f)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            row("create")["action"].as_str(),
            row("create")["rule"]["source"].as_str()
        ),
        (Some("fail"), Some("org"))
    );
    assert!(row("create")["why"]
        .as_str()
        .unwrap()
        .contains("may not loosen"));
    assert_eq!(row("model")["action"], "never");
    assert_eq!(row("list")["rule"]["source"], "default");
    // Outside the org rule's repositories, nothing binds.
    let get = |q: &str| {
        common::with_secret(
            reqwest::Client::new().get(api(q)),
            weir.handle.control_secret(),
        )
    };
    let t: Value = get("repo=else/x").await.json().await.unwrap();
    assert_eq!(t["rows"][1]["action"], "fallback");
    let bad = get("network=wifi").await;
    assert_eq!(bad.status().as_u16(), 400);
}

#[tokio::test]
async fn a_metered_network_makes_lists_cache_only() {
    let up = Upstream::start().await;
    let rules = "[[policy]]\nnetwork = \"metered\"\nlist = \"cache\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{QUEUE}{rules}")).await;
    let c = weir.client("alice");
    let list = |repo: &str| format!("{}/agents/sessions/nwo/{repo}", up.origin());

    let r = c.get(list("acme/api")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "weir-policy"), "default list=pass");
    assert_eq!(up.total(), 1);

    weir.handle.network().force(Some(true));
    let r = c.get(list("acme/api")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "weir-policy"), "user:1 list=cache");
    assert!(header(&r, "cache-status").starts_with("weir; hit"));
    // A list Weir has not cached is not fetched on a metered network.
    let r = c.get(list("acme/web")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(header(&r, "weir-policy"), "user:1 list=cache");
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "policy_cache_miss");
    assert!(p["detail"].as_str().unwrap().contains("user:1"));
    assert_eq!(up.total(), 1, "nothing went upstream while metered");
    assert_eq!(weir.status().await["policy"]["metered"], true);

    weir.handle.network().force(Some(false));
    let r = c.get(list("acme/web")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(up.total(), 2);
}

#[tokio::test]
async fn a_429_surge_queues_creates_without_sending_them() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 201);
    let rules = "[[policy]]\nsituation = \"surge_429\"\ncreate = \"queue\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{QUEUE}{rules}")).await;

    // Before the surge the create goes upstream as usual.
    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(header(&r, "weir-policy"), "default create=fallback");

    // Five rate-limit answers (one per credential, so no credential's own cooldown explains it).
    up.set(|b| b.status = 429);
    for who in ["u1", "u2", "u3", "u4", "u5"] {
        let r = weir
            .client(who)
            .get(format!("{}/agents/sessions", up.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 429);
    }
    up.set(|b| b.status = 201);
    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(header(&r, "weir-policy"), "user:1 create=queue");
    let body: Value = r.json().await.unwrap();
    // Queued without an attempt of its own (the queue's worker sends it, paced, later).
    assert!(
        body["weir"]["reason"]
            .as_str()
            .unwrap()
            .contains("did not send"),
        "{body}"
    );
    assert!(
        weir.status().await["upstreams"][0]["errors_by_kind"]["rate_limited"].as_u64() >= Some(5)
    );
}

#[tokio::test]
async fn local_without_a_local_agent_queues_and_says_so() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let rules = "[[policy]]\nrepo = \"acme/*\"\ncreate = \"local\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{QUEUE}{rules}")).await;
    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(header(&r, "weir-policy"), "user:1 create=local->queue");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "queued");
    assert!(
        body["weir"]["reason"]
            .as_str()
            .unwrap()
            .contains("hand-off failed"),
        "{body}"
    );
}

#[tokio::test]
async fn a_bad_rule_is_refused_with_its_file_and_line() {
    let e = weir::config::parse_str(
        "listen = \"127.0.0.1:0\"\n[[policy]]\nrepo = \"acme/*\"\ncreate = \"later\"\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("c.toml:4: key `policy.create`"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = weir::config::parse_str(
        &format!("policy_file = \"{}\"\n", missing.display()),
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("nope.toml"), "{e}");
}

/// Policy rules are settings: a rule added to the watched config file decides the next create.
#[tokio::test]
async fn a_rule_added_to_the_config_file_applies_on_the_next_request() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let base = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n\n{QUEUE}",
        up.origin()
    );
    std::fs::write(&config, &base).unwrap();
    let mut opts = weir::EngineOptions::new(
        weir::config::load_file(&config).unwrap(),
        dir.path().join("data"),
    );
    opts.config_file = Some(config.clone());
    let handle = weir::start(opts).await.expect("weir starts");
    let mut events = handle.subscribe();
    let weir = Weir { handle, dir };

    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (201, "default create=fallback".into())
    );

    let tmp = config.with_extension("toml.swp");
    std::fs::write(
        &tmp,
        format!("{base}\n[[policy]]\nrepo = \"acme/*\"\ncreate = \"fail\"\n"),
    )
    .unwrap();
    std::fs::rename(&tmp, &config).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            match events.recv().await.unwrap() {
                weir::events::Event::SettingsApplied { .. } => return,
                weir::events::Event::SettingsRejected { .. } => panic!("the new rule was refused"),
                _ => continue,
            }
        }
    })
    .await
    .expect("the change is applied within 20 s");

    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (503, "user:1 create=fail".into())
    );
}

/// A situational rule acts before the attempt: while the upstream's pause runs, creates for the
/// audited repository fail at once, the others queue as usual.
#[tokio::test]
async fn during_a_cooldown_a_situational_fail_rule_sends_nothing_upstream() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.status = 503;
        b.extra_headers = vec![("retry-after".into(), "120".into())];
    });
    let rules = "[[policy]]\nrepo = \"audit/*\"\nsituation = \"cooldown\"\ncreate = \"fail\"\n";
    let weir = Weir::start(&[&up.origin()], &format!("{QUEUE}{rules}")).await;
    // An overload with Retry-After pauses the whole upstream; this create is queued.
    let r = weir
        .client("a")
        .post(jobs(&up, "acme/api"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (201, "default create=fallback".into())
    );
    up.set(|b| b.status = 201);
    let r = weir
        .client("b")
        .post(jobs(&up, "audit/ledger"))
        .body(create_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (503, "user:1 create=fail".into())
    );
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "policy_failed");
    assert!(
        p["detail"].as_str().unwrap().contains("did not send"),
        "{p}"
    );
    assert_eq!(posts(&up, "audit/ledger"), 0);
}

/// Offline (every upstream unreachable) is a network condition: an `offline` rule decides
/// instead of the usual "queue without an attempt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_rule_fails_creates_instead_of_queueing_them() {
    let up = Upstream::start().await;
    let (addr, origin) = (up.addr, up.origin());
    let rules = "[[policy]]\nrepo = \"audit/*\"\nnetwork = \"offline\"\ncreate = \"fail\"\n";
    let weir = Weir::start(&[&origin], &format!("{QUEUE}{rules}")).await;
    let c = weir.client("carol");
    up.kill();
    assert!(common::eventually(250, || std::net::TcpStream::connect(addr).is_err()).await);
    let _ = c
        .get(format!("{origin}/agents/sessions"))
        .send()
        .await
        .unwrap();
    assert!(
        common::eventually_status(&weir.handle, 500, |s| s.mode.mode
            == weir::mode::ModeKind::Offline)
        .await,
        "offline"
    );
    let r = c
        .post(jobs(&up, "audit/ledger"))
        .body(create_body(1))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (503, "user:1 create=fail".into())
    );
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("offline"), "{p}");
    // Other repositories keep the built-in behaviour: queued until a probe finds the network.
    let r = c
        .post(jobs(&up, "acme/api"))
        .body(create_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "weir-policy")),
        (201, "default create=fallback".into())
    );
}
