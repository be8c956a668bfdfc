#![cfg(feature = "team")]
//! Team signals against a real `nats-server` (started per test in a temp dir, JetStream on):
//! teammates' breakers move this Weir's without a failing call of its own, published messages
//! hold nothing private, forged facts are ignored, and with NATS down Weir works as before.

mod common;
#[path = "common/nats.rs"]
mod nats;
#[path = "common/tls.rs"]
mod tls;
#[path = "common/weir_cli.rs"]
mod weir_cli;

use common::{eventually_status, Upstream};
use futures::StreamExt;
use nats::NatsServer;
use std::time::Duration;
use weir::status::{StatusSnapshot, TeamLink};
use weir::team::{NatsAuth, TeamKey, TeamSecrets};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

struct TeamWeir {
    handle: weir::EngineHandle,
    _dir: tempfile::TempDir,
}

impl TeamWeir {
    async fn start(origin: &str, team: &str, auth: Option<NatsAuth>) -> TeamWeir {
        let toml = format!(
            "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
             [[upstream]]\nname = \"copilot-api\"\norigin = \"{origin}\"\n\
             [breaker]\nminimum_calls = 2\njitter = false\nopen_wait = \"30s\"\n\
             [retry]\njitter = false\n[rate_limit]\nenabled = false\n\
             [classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"0s\"\n\
             [team]\n{team}\n"
        );
        let settings = weir::config::parse_str(&toml, "team.toml").expect("test config");
        let dir = tempfile::tempdir().unwrap();
        let mut opts = weir::EngineOptions::new(settings, dir.path().to_path_buf());
        opts.team_secrets = Some(TeamSecrets {
            key: TeamKey::from_hex(KEY),
            auth,
        });
        let handle = weir::start(opts).await.expect("weir starts");
        TeamWeir { handle, _dir: dir }
    }

    fn client(&self, token: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(format!("http://{}", self.handle.local_addr())).unwrap())
            .default_headers({
                let mut h = reqwest::header::HeaderMap::new();
                h.insert("authorization", format!("token {token}").parse().unwrap());
                h
            })
            .build()
            .unwrap()
    }

    async fn status(&self) -> StatusSnapshot {
        self.handle.status().await
    }
}

fn team_of(s: &StatusSnapshot) -> &weir::status::TeamStatus {
    s.team.as_ref().expect("[team] is on")
}

/// Polls (bounded: 30 s) until every Weir's team link is up.
async fn connected(weirs: &[&TeamWeir]) {
    for w in weirs {
        assert!(
            eventually_status(&w.handle, 1500, |s| team_of(s).connected).await,
            "team link up: {:?}",
            team_of(&w.status().await)
        );
    }
}

/// Fails `calls` requests through `w` (its upstream answers 500).
async fn fail_through(w: &TeamWeir, origin: &str, calls: usize) {
    let c = w.client("ghp_a");
    for i in 0..calls {
        let _ = c
            .get(format!("{origin}/agents/sessions?n={i}"))
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_weir_opens_and_two_teammates_act_without_failing_calls() {
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &["--user", "weir", "--pass", "team-pass"]).await;
    let auth = Some(NatsAuth::UserPassword {
        user: "weir".into(),
        password: "team-pass".into(),
    });
    let broken = Upstream::start().await;
    broken.set(|b| b.status = 500);
    let healthy = Upstream::start().await;
    let team = |action: &str| {
        format!(
            "nats_url = \"{}\"\npeers_needed = 1\nwindow = \"60s\"\naction = \"{action}\"\n",
            nats.url()
        )
    };
    let a = TeamWeir::start(&broken.origin(), &team("cautious"), auth.clone()).await;
    let b = TeamWeir::start(&healthy.origin(), &team("cautious"), auth.clone()).await;
    let c = TeamWeir::start(&healthy.origin(), &team("open"), auth.clone()).await;
    connected(&[&a, &b, &c]).await;

    fail_through(&a, &broken.origin(), 3).await;
    let sa = a.status().await;
    assert_eq!(
        sa.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Open
    );

    // B becomes cautious, C opens: no call of theirs reached an upstream.
    assert!(
        eventually_status(&b.handle, 1500, |s| !s.upstreams[0]
            .guard
            .breaker
            .caution
            .is_empty())
        .await,
        "{:?}",
        team_of(&b.status().await)
    );
    assert!(
        eventually_status(&c.handle, 1500, |s| s.upstreams[0].guard.breaker.state
            == weir::events::BreakerState::Open)
        .await
    );
    assert_eq!(healthy.total(), 0, "no failing (or any) call of their own");
    for w in [&b, &c] {
        // Each fact travels on its own: wait (bounded) until A's was taken in. One shared NATS
        // login: the server cannot tell teammates apart, so they count as one (docs/team.md).
        assert!(
            eventually_status(&w.handle, 1500, |s| team_of(s).peers_seen >= 1
                && team_of(s).upstreams[0].acting)
            .await,
            "{:?}",
            team_of(&w.status().await)
        );
        let s = w.status().await;
        let t = team_of(&s);
        assert_eq!(t.upstreams[0].peers_failing, 1);
        assert!(t.upstreams[0].acting);
        assert_eq!(
            t.summary.as_deref(),
            Some("1 teammate sees copilot-api failing")
        );
    }
    assert!(c.status().await.upstreams[0]
        .guard
        .breaker
        .reason
        .contains("teammates"));
    // C opened on the teammates' word: a request there is refused without reaching upstream.
    let r = c
        .client("ghp_c")
        .get(format!("{}/agents/sessions", healthy.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(healthy.total(), 0);

    // Local evidence wins: B's own call succeeds, so B stops being cautious.
    let r = b
        .client("ghp_b")
        .get(format!("{}/agents/sessions", healthy.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        eventually_status(&b.handle, 1500, |s| s.upstreams[0]
            .guard
            .breaker
            .caution
            .is_empty()
            && team_of(s).upstreams[0].overruled)
        .await
    );
    // And B still counts A as failing, but does not act on it again.
    assert_eq!(team_of(&b.status().await).upstreams[0].peers_failing, 1);
    assert!(!team_of(&b.status().await).upstreams[0].acting);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammates_upstream_wide_pause_is_honoured_until_it_ends() {
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &["--auth", "team-token"]).await;
    let auth = Some(NatsAuth::Token {
        token: "team-token".into(),
    });
    let paused = Upstream::start().await;
    paused.set(|b| {
        b.status = 503;
        b.extra_headers = vec![("retry-after".into(), "120".into())];
    });
    let healthy = Upstream::start().await;
    // A pause is honoured only when `peers_needed` teammates report one; here one is enough.
    let team = format!("nats_url = \"{}\"\npeers_needed = 1\n", nats.url());
    let a = TeamWeir::start(&paused.origin(), &team, auth.clone()).await;
    let b = TeamWeir::start(&healthy.origin(), &team, auth.clone()).await;
    connected(&[&a, &b]).await;
    // A request without a credential: the pause is upstream-wide.
    let _ = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", a.handle.local_addr())).unwrap())
        .build()
        .unwrap()
        .get(format!("{}/agents/sessions", paused.origin()))
        .send()
        .await
        .unwrap();
    assert!(a.status().await.upstreams[0]
        .guard
        .cooldown_remaining_s
        .is_some());
    assert!(
        eventually_status(&b.handle, 1500, |s| s.upstreams[0]
            .guard
            .cooldown_remaining_s
            .is_some_and(|r| r > 60.0))
        .await
    );
    let s = b.status().await;
    assert!(team_of(&s).upstreams[0].pause_until.is_some());
    let r = b
        .client("ghp_b")
        .get(format!("{}/agents/sessions", healthy.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "held back by the teammate's pause");
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(healthy.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_messages_hold_no_token_account_repository_or_path() {
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &[]).await;
    let spy = async_nats::connect(nats.url()).await.unwrap();
    let mut everything = spy.subscribe(">").await.unwrap();
    spy.flush().await.unwrap();

    let broken = Upstream::start().await;
    broken.set(|b| b.status = 500);
    let paused = Upstream::start().await;
    paused.set(|b| {
        b.status = 503;
        b.extra_headers = vec![("retry-after".into(), "30".into())];
    });
    let healthy = Upstream::start().await;
    let team = format!("nats_url = \"{}\"\npeers_needed = 1\n", nats.url());
    let a = TeamWeir::start(&broken.origin(), &team, None).await;
    let b = TeamWeir::start(&healthy.origin(), &team, None).await;
    let c = TeamWeir::start(&paused.origin(), &team, None).await;
    connected(&[&a, &b, &c]).await;
    fail_through(&a, &broken.origin(), 3).await;
    assert!(eventually_status(&b.handle, 1500, |s| team_of(s).upstreams[0].acting).await);

    // Known markers in the traffic: a token, an account, a repository and a path.
    let token = "ghp_MARKERTOKEN0123456789";
    let repo = "marker-org/MARKER-REPO";
    let account = "MARKER-ACCOUNT-4242";
    for (w, origin) in [
        (&c, paused.origin()),
        (&a, broken.origin()),
        (&b, healthy.origin()),
    ] {
        let c = w.client(token);
        for path in [
            format!("/agents/swe/v1/jobs/{repo}?login={account}"),
            format!("/agents/sessions?repo_nwo={repo}&user={account}"),
            format!("/repos/{repo}/contents/src/MARKER_PATH/secret.rs"),
        ] {
            let _ = c.get(format!("{origin}{path}")).send().await.unwrap();
        }
    }
    // Let a heartbeat or two go by, then read everything the server carried.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    spy.flush().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(Some(m)) =
        tokio::time::timeout(Duration::from_millis(300), everything.next()).await
    {
        seen.push(m);
    }
    assert!(seen.len() >= 3, "facts were published: {}", seen.len());
    let data_dirs = [a._dir.path(), b._dir.path(), c._dir.path()].map(|p| p.display().to_string());
    let mut with_pause = 0;
    for m in &seen {
        // Weir's probe of the server's publish permissions: an empty, unsigned message.
        if m.subject.contains("._probe.") {
            assert!(m.payload.is_empty() && m.headers.is_none());
            continue;
        }
        let mut text = format!("{}\n", m.subject);
        if let Some(h) = &m.headers {
            for (k, vs) in h.iter() {
                for v in vs {
                    text.push_str(&format!("{k}: {}\n", v.as_str()));
                }
            }
        }
        text.push_str(&String::from_utf8_lossy(&m.payload));
        for marker in [
            "MARKER",
            "ghp_",
            token,
            repo,
            account,
            "marker-org",
            "/agents",
            "/repos",
            "secret.rs",
        ] {
            assert!(!text.contains(marker), "{marker:?} published in:\n{text}");
        }
        for d in &data_dirs {
            assert!(!text.contains(d.as_str()), "a path was published:\n{text}");
        }
        assert!(m.subject.as_str().starts_with("weir.v1."), "{}", m.subject);
        // Every payload is a fact with exactly the documented keys.
        let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "at_ms", "cause", "degraded", "github", "pause", "peer", "since_ms", "state",
                "upstream", "v"
            ]
        );
        with_pause += usize::from(!v["pause"].is_null());
    }
    assert!(with_pause > 0, "the pause was published too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nats_down_weir_serves_and_says_disconnected_then_connects() {
    let bin = require_nats!();
    let port = nats::free_port();
    let healthy = Upstream::start().await;
    let team = format!("nats_url = \"nats://127.0.0.1:{port}\"\n");
    let w = TeamWeir::start(&healthy.origin(), &team, None).await;
    for i in 0..3 {
        let r = w
            .client("ghp_w")
            .get(format!("{}/agents/sessions?i={i}", healthy.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(healthy.total(), 3);
    let s = w.status().await;
    let t = team_of(&s);
    assert_eq!(t.link, TeamLink::Disconnected);
    assert!(!t.connected);
    assert!(t.error.is_some(), "{t:?}");
    assert_eq!(t.published, 0);
    // The dashboard's JSON says the same.
    let json: serde_json::Value =
        reqwest::get(format!("http://{}/_weir/api/status", w.handle.local_addr()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(json["team"]["link"], "disconnected");
    assert_eq!(json["team"]["connected"], false);

    // The server comes up: the client reconnects by itself.
    let _nats = NatsServer::start_on(&bin, port, &[]).await;
    assert!(
        eventually_status(&w.handle, 2000, |s| team_of(s).connected).await,
        "{:?}",
        team_of(&w.status().await)
    );
    // And this Weir's facts go out: the publish loop, asleep while the link was down with
    // nothing to tick for (#32 item 4), woke with the connection.
    assert!(
        eventually_status(&w.handle, 2000, |s| team_of(s).published > 0).await,
        "{:?}",
        team_of(&w.status().await)
    );
}

/// #32 item 4: a server that cannot be reached is tried ~16 times in the link's first ~20 s
/// (async-nats's own delays, up to 4 s apart), then not again for 15 s: an idle Weir away from
/// the team's network is asleep. A port that accepts and closes at once counts the attempts
/// (and the TLS diagnosis's look, at most one per 30 s). Before, attempts went on every 4 s:
/// no quiet stretch of 8 s ever came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_tried_less_often_after_the_first_seconds() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = tokio::time::Instant::now();
    let tried = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let counting = {
        let tried = tried.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tried.lock().unwrap().push(started.elapsed());
                drop(sock);
            }
        })
    };
    let healthy = Upstream::start().await;
    let team = format!("nats_url = \"nats://127.0.0.1:{port}\"\n");
    let _w = TeamWeir::start(&healthy.origin(), &team, None).await;
    let watched = Duration::from_secs(34);
    tokio::time::sleep_until(started + watched).await;
    counting.abort();
    let tried = tried.lock().unwrap().clone();
    assert!(tried.len() >= 10, "the quick attempts: {tried:?}");
    assert!(tried.len() <= 16 + 2, "{tried:?}");
    let quiet = watched - *tried.last().unwrap();
    assert!(
        quiet >= Duration::from_secs(8),
        "a quiet stretch after the quick attempts: {tried:?}"
    );
}

/// #32 item 4: past its first ~20 s of quick attempts, a link whose server is unreachable
/// tries again only after a growing wait (15 s, then 30, to a minute), so an idle Weir away
/// from the team's network sleeps. A call through this Weir says the network may be back: the
/// next attempt comes at once (at least 4 s after the last), not at the end of the wait. The
/// server comes up 24 s in (the quick attempts over, the next planned one ~35 s in), and the
/// link must be up before 33 s: only the call can have brought the attempt forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_brings_a_waiting_link_back_at_once() {
    let bin = require_nats!();
    let port = nats::free_port();
    let healthy = Upstream::start().await;
    let team = format!("nats_url = \"nats://127.0.0.1:{port}\"\n");
    let started = tokio::time::Instant::now();
    let w = TeamWeir::start(&healthy.origin(), &team, None).await;
    tokio::time::sleep_until(started + Duration::from_secs(24)).await;
    assert!(!team_of(&w.status().await).connected);
    let _nats = NatsServer::start_on(&bin, port, &[]).await;
    let r = w
        .client("ghp_w")
        .get(format!("{}/agents/sessions", healthy.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let until = started + Duration::from_secs(33);
    while !team_of(&w.status().await).connected && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        team_of(&w.status().await).connected,
        "the call brought the next attempt forward: {:?}",
        team_of(&w.status().await)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_unsigned_and_stale_facts_are_ignored() {
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &[]).await;
    let healthy = Upstream::start().await;
    let team = format!(
        "nats_url = \"{}\"\npeers_needed = 1\naction = \"open\"\n",
        nats.url()
    );
    let w = TeamWeir::start(&healthy.origin(), &team, None).await;
    connected(&[&w]).await;
    let forger = async_nats::connect(nats.url()).await.unwrap();
    let subject = "weir.v1.copilot-api.breaker.forger";
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let fact = |peer: u8, at_ms: u64| {
        serde_json::json!({
            "v": 1, "peer": format!("{peer:032x}"), "upstream": "copilot-api", "state": "open",
            "degraded": false, "cause": "local", "since_ms": at_ms, "pause": null, "github": null, "at_ms": at_ms
        })
        .to_string()
    };
    let wrong = TeamKey::from_hex(&weir::team::new_key_hex()).unwrap();
    let right = TeamKey::from_hex(KEY).unwrap();
    let send = |payload: String, sig: Option<String>| {
        let forger = forger.clone();
        async move {
            let mut h = async_nats::HeaderMap::new();
            if let Some(s) = sig {
                h.insert("Weir-Signature", s.as_str());
            }
            forger
                .publish_with_headers(subject, h, payload.into())
                .await
                .unwrap();
            forger.flush().await.unwrap();
        }
    };
    let p1 = fact(1, now_ms);
    send(p1.clone(), None).await; // unsigned
    let p2 = fact(2, now_ms);
    send(p2.clone(), Some(wrong.sign(subject, p2.as_bytes()))).await; // wrong key
    let p3 = fact(3, now_ms - 3_600_000);
    send(p3.clone(), Some(right.sign(subject, p3.as_bytes()))).await; // an hour old
    let p4 = fact(4, now_ms);
    let moved = "weir.v1.other.breaker.forger";
    send(p4.clone(), Some(right.sign(moved, p4.as_bytes()))).await; // signed for another subject
    assert!(eventually_status(&w.handle, 1500, |s| team_of(s).rejected >= 4).await);
    let s = w.status().await;
    assert_eq!(team_of(&s).upstreams[0].peers_failing, 0);
    assert_eq!(
        s.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Closed
    );

    // The same fact, properly signed, is believed (so the refusals above were the checks').
    let p5 = fact(5, now_ms);
    send(p5.clone(), Some(right.sign(subject, p5.as_bytes()))).await;
    assert!(
        eventually_status(&w.handle, 1500, |s| s.upstreams[0].guard.breaker.state
            == weir::events::BreakerState::Open)
        .await
    );
}

/// Runs `weir team <args>` for `data` with `stdin` piped in.
fn weir_team(
    args: &[&str],
    cfg: &std::path::Path,
    data: &std::path::Path,
    stdin: &str,
) -> std::process::Output {
    weir_cli::feed(
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("team")
            .arg("--config")
            .arg(cfg)
            .arg("--data-dir")
            .arg(data)
            .args(args),
        stdin,
    )
}

/// `weir team set-key` / `set-credentials` put the secrets in this install's keychain, and an
/// engine for that data dir reads them: it logs in to a server that requires the password and
/// its facts carry the key's signatures. Needs a keychain (scripts/with-keychain.sh); skips
/// without one. Bad input is refused with exit code 2 either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_stores_the_team_secrets_and_the_engine_uses_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:0\"\n").unwrap();
    let bad = weir_team(&["set-key"], &cfg, &data, "not-a-key\n");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("64 hex digits"));
    let empty = weir_team(&["set-credentials", "--user", "weir"], &cfg, &data, "");
    assert_eq!(empty.status.code(), Some(2));

    let k = weir::secrets::Namespace::for_data_dir(&data).keychain();
    if k.probe().is_err() {
        eprintln!("\n!!!!!!!! SKIPPED (keychain part): no keychain; run under scripts/with-keychain.sh !!!!!!!!\n");
        return;
    }
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &["--user", "weir", "--pass", "s3cret-pass"]).await;
    let out = weir_team(&["set-key"], &cfg, &data, &format!("{KEY}\n"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = weir_team(
        &["set-credentials", "--user", "weir"],
        &cfg,
        &data,
        "s3cret-pass\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret-pass"));

    let spy = async_nats::ConnectOptions::new()
        .user_and_password("weir".into(), "s3cret-pass".into())
        .connect(nats.url())
        .await
        .unwrap();
    let mut facts = spy.subscribe("weir.v1.copilot-api.>").await.unwrap();
    spy.flush().await.unwrap();
    let healthy = Upstream::start().await;
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\
         [[upstream]]\nname = \"copilot-api\"\norigin = \"{}\"\n[team]\nnats_url = \"{}\"\n",
        healthy.origin(),
        nats.url()
    );
    let settings = weir::config::parse_str(&toml, "team.toml").unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    assert!(
        eventually_status(&handle, 1500, |s| team_of(s).connected).await,
        "{:?}",
        team_of(&handle.status().await)
    );
    let m = tokio::time::timeout(Duration::from_secs(10), facts.next())
        .await
        .expect("a fact within 10 s")
        .unwrap();
    let sig = m
        .headers
        .as_ref()
        .unwrap()
        .get("Weir-Signature")
        .unwrap()
        .as_str()
        .to_string();
    assert!(TeamKey::from_hex(KEY)
        .unwrap()
        .verify(m.subject.as_str(), &m.payload, &sig));
    handle.shutdown().await;
    for a in ["team-key", "team-credentials"] {
        let _ = k.delete(a);
    }
}

/// A NATS address that accepts connections and never answers (a hung server, a firewall that
/// swallows packets): requests are served as before and the status says disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_nats_server_never_delays_requests() {
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = hole.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = hole.accept().await {
            conns.push(s); // accepted, never read from or written to
        }
    });
    let healthy = Upstream::start().await;
    let w = TeamWeir::start(
        &healthy.origin(),
        &format!("nats_url = \"nats://{addr}\"\n"),
        None,
    )
    .await;
    let c = w.client("ghp_w");
    for i in 0..20 {
        let r = c
            .get(format!("{}/agents/sessions?i={i}", healthy.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(healthy.total(), 20);
    let s = w.status().await;
    assert_eq!(team_of(&s).link, TeamLink::Disconnected);
    assert_eq!(team_of(&s).published, 0);
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_travel_over_tls_and_a_wrong_ca_or_a_plain_url_says_why() {
    let bin = require_nats!();
    let ca = tls::TestCa::new();
    let (cert, key) = ca.issue_files(&["127.0.0.1"], ca.dir.path(), "nats");
    let nats = NatsServer::start_tls(&bin, &cert, &key).await;
    let broken = Upstream::start().await;
    broken.set(|b| b.status = 500);
    let healthy = Upstream::start().await;
    let team = format!(
        "nats_url = \"{}\"\npeers_needed = 1\naction = \"open\"\nca_file = \"{}\"\n",
        nats.tls_url(),
        ca.pem_path.display()
    );
    let a = TeamWeir::start(&broken.origin(), &team, None).await;
    let b = TeamWeir::start(&healthy.origin(), &team, None).await;
    connected(&[&a, &b]).await;
    fail_through(&a, &broken.origin(), 3).await;
    // A's fact reached B over TLS: B opens without a call of its own.
    assert!(
        eventually_status(&b.handle, 1500, |s| s.upstreams[0].guard.breaker.state
            == weir::events::BreakerState::Open)
        .await,
        "{:?}",
        team_of(&b.status().await)
    );
    assert_eq!(team_of(&b.status().await).upstreams[0].peers_failing, 1);
    assert_eq!(healthy.total(), 0);

    // A CA that did not sign the server's certificate, and a plain nats:// URL (the server
    // asks for TLS; without the team's CA the certificate is not trusted): each says why in
    // the status, and each Weir serves as without [team].
    let other = tls::TestCa::new();
    let wrong_ca = format!(
        "nats_url = \"{}\"\nca_file = \"{}\"\n",
        nats.tls_url(),
        other.pem_path.display()
    );
    let plain = format!("nats_url = \"{}\"\n", nats.url());
    for (team, hint) in [(wrong_ca, "check [team] ca_file"), (plain, "use tls://")] {
        let w = TeamWeir::start(&healthy.origin(), &team, None).await;
        let said = eventually_status(&w.handle, 1500, |s| {
            team_of(s)
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("team: NATS TLS handshake failed: "))
        })
        .await;
        let s = w.status().await;
        let t = team_of(&s);
        assert!(said, "{t:?}");
        let error = t.error.clone().unwrap();
        assert!(
            error.contains("invalid peer certificate") && error.contains(hint),
            "{error}"
        );
        assert_eq!(t.link, TeamLink::Disconnected);
        assert_eq!(t.published, 0);
        let r = w
            .client("ghp_w")
            .get(format!("{}/agents/sessions", healthy.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(healthy.total(), 2);

    // tls:// to a server without TLS: refused (never downgraded), and said so.
    let bare = NatsServer::start(&bin, &[]).await;
    let w = TeamWeir::start(
        &healthy.origin(),
        &format!("nats_url = \"tls://{}\"\n", bare.addr),
        None,
    )
    .await;
    assert!(
        eventually_status(&w.handle, 1500, |s| team_of(s)
            .error
            .as_deref()
            .is_some_and(|e| e.contains("does not offer TLS")))
        .await,
        "{:?}",
        team_of(&w.status().await)
    );
    assert!(!team_of(&w.status().await).connected);
}

/// A `nats-server` config where each teammate's user may publish facts only under its own
/// name (docs/team.md, "Security model"). `mallory` may also publish on the subject earlier
/// Weirs used (`weir.v1.<upstream>.breaker`, no sender), so this test also fails against them.
fn per_user_config(dir: &std::path::Path, users: &[&str]) -> std::path::PathBuf {
    let mut conf = String::from("authorization {\n  users = [\n");
    for u in users {
        let extra = if *u == "mallory" {
            ", \"weir.v1.*.breaker\""
        } else {
            ""
        };
        conf.push_str(&format!(
            "    {{user: {u}, password: pw-{u}, permissions: {{publish: [\"weir.v1.*.breaker.{u}\"{extra}], subscribe: [\"weir.v1.>\", \"_INBOX.>\"]}}}}\n"
        ));
    }
    conf.push_str("  ]\n}\n");
    let path = dir.join("nats.conf");
    std::fs::write(&path, conf).unwrap();
    path
}

/// Issue 22, item 2: one holder of the team key poses as K teammates, with K different `peer`
/// fields, on its own subject, on the old subject and on its teammates' subjects, and asks for
/// a long pause in every fact. Teammates are counted by the NATS user the server let publish,
/// so it is one reporter: with `peers_needed = 2` this Weir neither opens nor pauses, and
/// the facts it could not send under other names never arrive. A second, real teammate
/// reporting the same makes two: then both the opening and the pause are honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holder_posing_as_k_peers_is_one_teammate() {
    let bin = require_nats!();
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = per_user_config(conf_dir.path(), &["alice", "bob", "mallory"]);
    let nats = NatsServer::start(&bin, &["-c", conf.to_str().unwrap()]).await;
    let healthy = Upstream::start().await;
    let team = format!(
        "nats_url = \"{}\"\npeers_needed = 2\naction = \"open\"\n",
        nats.url()
    );
    let login = |u: &str| {
        Some(NatsAuth::UserPassword {
            user: u.into(),
            password: format!("pw-{u}"),
        })
    };
    let alice = TeamWeir::start(&healthy.origin(), &team, login("alice")).await;
    connected(&[&alice]).await;
    let key = TeamKey::from_hex(KEY).unwrap();
    let fact = |peer: u8| {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        serde_json::json!({
            "v": 1, "peer": format!("{peer:032x}"), "upstream": "copilot-api", "state": "open",
            "degraded": false, "cause": "local", "since_ms": now_ms,
            "pause": {"until_ms": now_ms + 3_600_000, "kind": "overloaded"},
            "github": null, "at_ms": now_ms
        })
        .to_string()
    };
    let connect = |u: &'static str| {
        let url = nats.url();
        async move {
            async_nats::ConnectOptions::new()
                .user_and_password(u.into(), format!("pw-{u}"))
                .connect(url)
                .await
                .unwrap()
        }
    };
    let send = |c: async_nats::Client, subject: String, payload: String| {
        let sig = key.sign(&subject, payload.as_bytes());
        async move {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Weir-Signature", sig.as_str());
            // A refused publish is only reported by the server, asynchronously.
            let _ = c.publish_with_headers(subject, h, payload.into()).await;
            let _ = c.flush().await;
        }
    };
    let mallory = connect("mallory").await;
    let received_before = team_of(&alice.status().await).received;
    for round in 0..3u8 {
        for peer in 1..=4u8 {
            let p = fact(round * 10 + peer);
            for subject in [
                "weir.v1.copilot-api.breaker.mallory",
                "weir.v1.copilot-api.breaker",
                "weir.v1.copilot-api.breaker.bob",
                "weir.v1.copilot-api.breaker.carol",
            ] {
                send(mallory.clone(), subject.into(), p.clone()).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Her facts arrived and were believed...
    assert!(
        eventually_status(&alice.handle, 1500, |s| team_of(s).received
            >= received_before + 12
            && team_of(s).upstreams[0].peers_failing >= 1)
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = alice.status().await;
    let t = team_of(&s);
    // ...and she is one teammate: no opening, no pause, nothing held.
    assert_eq!(t.upstreams[0].peers_failing, 1, "{t:?}");
    assert!(!t.upstreams[0].acting);
    assert!(t.upstreams[0].pause_until.is_none());
    assert_eq!(
        s.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Closed
    );
    assert!(s.upstreams[0].guard.cooldown_remaining_s.is_none());
    let r = alice
        .client("ghp_a")
        .get(format!("{}/agents/sessions", healthy.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "served: nothing holds the upstream");

    // A second teammate, bob, sees the same on his own login: two teammates agree.
    let bob = connect("bob").await;
    send(bob, "weir.v1.copilot-api.breaker.bob".into(), fact(99)).await;
    assert!(
        eventually_status(&alice.handle, 1500, |s| s.upstreams[0].guard.breaker.state
            == weir::events::BreakerState::Open
            && s.upstreams[0].guard.cooldown_remaining_s.is_some())
        .await,
        "{:?}",
        team_of(&alice.status().await)
    );
    let s = alice.status().await;
    assert_eq!(team_of(&s).upstreams[0].peers_failing, 2);
    // The pause is capped (10 minutes), not the hour asked for.
    assert!(s.upstreams[0].guard.cooldown_remaining_s.unwrap() <= 600.0);
}

/// Issue 31, item 4: a server that refuses this Weir's *subscription* to its probe (whose
/// refusal text names the probe) but lets anyone publish under any name does not enforce
/// names: teammates are not counted by the names in subjects, so one key holder posing as two
/// teammates is one reporter, and nothing opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_probe_subscription_is_not_taken_for_enforced_names() {
    let bin = require_nats!();
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        "authorization {\n  users = [\n\
         {user: alice, password: pw-alice, permissions: {publish: [\"weir.v1.>\"], subscribe: {allow: [\"weir.v1.>\", \"_INBOX.>\"], deny: [\"weir.v1._probe.>\"]}}}\n\
         {user: mallory, password: pw-mallory, permissions: {publish: [\"weir.v1.>\"], subscribe: [\"weir.v1.>\", \"_INBOX.>\"]}}\n  ]\n}\n",
    )
    .unwrap();
    let nats = NatsServer::start(&bin, &["-c", conf.to_str().unwrap()]).await;
    let healthy = Upstream::start().await;
    let team = format!(
        "nats_url = \"{}\"\npeers_needed = 2\naction = \"open\"\n",
        nats.url()
    );
    let alice = TeamWeir::start(
        &healthy.origin(),
        &team,
        Some(NatsAuth::UserPassword {
            user: "alice".into(),
            password: "pw-alice".into(),
        }),
    )
    .await;
    connected(&[&alice]).await;
    // The probe is sent and its subscription refused meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let key = TeamKey::from_hex(KEY).unwrap();
    let mallory = async_nats::ConnectOptions::new()
        .user_and_password("mallory".into(), "pw-mallory".into())
        .connect(nats.url())
        .await
        .unwrap();
    let received_before = team_of(&alice.status().await).received;
    for round in 0..3u8 {
        for (peer, name) in [(1u8, "bob"), (2, "carol")] {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let payload = serde_json::json!({
                "v": 1, "peer": format!("{:032x}", round * 10 + peer), "upstream": "copilot-api",
                "state": "open", "degraded": false, "cause": "local", "since_ms": now_ms,
                "pause": null, "github": null, "at_ms": now_ms
            })
            .to_string();
            let subject = format!("weir.v1.copilot-api.breaker.{name}");
            let mut h = async_nats::HeaderMap::new();
            h.insert(
                "Weir-Signature",
                key.sign(&subject, payload.as_bytes()).as_str(),
            );
            mallory
                .publish_with_headers(subject, h, payload.into())
                .await
                .unwrap();
        }
        mallory.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        eventually_status(&alice.handle, 1500, |s| team_of(s).received
            >= received_before + 6
            && team_of(s).upstreams[0].peers_failing >= 1)
        .await,
        "{:?}",
        team_of(&alice.status().await)
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = alice.status().await;
    assert_eq!(
        team_of(&s).upstreams[0].peers_failing,
        1,
        "{:?}",
        team_of(&s)
    );
    assert_eq!(
        s.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Closed
    );
}

/// #32 item 4: the publish loop of a quiet link sleeps until its next heartbeat (20 s here),
/// yet what a call changes is still published at once: a breaker opened by failing calls,
/// and an upstream-wide pause asked for by a 429 (recorded as a breaker success: no
/// transition announces it; the breaker's activity signal wakes the link). "At once" is
/// judged against the heartbeat, not a wall-clock second that load can stretch: each fact must
/// arrive before either Weir's next heartbeat can be due (20 s after they started: neither
/// published before), so nothing but the wake-up can have sent it. Fails with the activity
/// wake-up disabled (the pause then waits for the heartbeat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_link_still_publishes_a_change_at_once() {
    let bin = require_nats!();
    let nats = NatsServer::start(&bin, &[]).await;
    let spy = async_nats::connect(nats.url()).await.unwrap();
    let mut facts = spy.subscribe("weir.v1.copilot-api.>").await.unwrap();
    spy.flush().await.unwrap();
    let broken = Upstream::start().await;
    broken.set(|b| b.status = 500);
    let limited = Upstream::start().await;
    limited.set(|b| {
        b.status = 429;
        b.extra_headers = vec![("retry-after".into(), "30".into())];
    });
    // Two teammates needed: neither acts on the other's report (B, quiet, stays quiet).
    let team = format!(
        "nats_url = \"{}\"\npeers_needed = 2\nwindow = \"60s\"\n",
        nats.url()
    );
    // The heartbeat with a 60 s window (window / 3): every heartbeat of either Weir comes at
    // least this long after its first fact, so after `started + HEARTBEAT`.
    const HEARTBEAT: Duration = Duration::from_secs(20);
    let started = tokio::time::Instant::now();
    let before_a_heartbeat = started + HEARTBEAT - Duration::from_secs(1);
    let a = TeamWeir::start(&broken.origin(), &team, None).await;
    let b = TeamWeir::start(&limited.origin(), &team, None).await;
    connected(&[&a, &b]).await;
    // The first facts go out, then both links are quiet (next heartbeat: 20 s away).
    tokio::time::sleep(Duration::from_secs(2)).await;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), facts.next()).await {}

    // Waits (until `until`) for a fact that `pred` accepts.
    async fn published(
        facts: &mut async_nats::Subscriber,
        until: tokio::time::Instant,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> bool {
        while let Ok(Some(m)) = tokio::time::timeout_at(until, facts.next()).await {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            if pred(&v) {
                return true;
            }
        }
        false
    }

    // A request without a credential: the pause is upstream-wide.
    let _ = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", b.handle.local_addr())).unwrap())
        .build()
        .unwrap()
        .get(format!("{}/agents/sessions", limited.origin()))
        .send()
        .await
        .unwrap();
    assert!(b.status().await.upstreams[0]
        .guard
        .cooldown_remaining_s
        .is_some());
    assert!(
        published(&mut facts, before_a_heartbeat, |v| !v["pause"].is_null()).await,
        "the pause was published at once, not at the next heartbeat"
    );

    fail_through(&a, &broken.origin(), 3).await;
    assert_eq!(
        a.status().await.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Open
    );
    assert!(
        published(&mut facts, before_a_heartbeat, |v| v["state"] == "open").await,
        "the opening was published at once, not at the next heartbeat"
    );
}
