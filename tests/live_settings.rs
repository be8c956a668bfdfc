//! Settings apply live: a TTL and a breaker threshold changed through the settings API and
//! through the config file on disk each take effect on the next request (counted at a real
//! loopback upstream); a broken file leaves the old settings running and the status names
//! file:line; a restart-only key is reported, not applied, until `EngineHandle::restart`; and a
//! request already under way keeps the settings it started with to its last attempt.

mod common;

use common::{with_secret, Upstream};
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir::config::RestartKey;
use weir::events::{Event, SettingsSource};

/// Weir started from a real config file (watched), in a temp dir.
struct Live {
    weir: common::Weir,
    config: PathBuf,
    events: tokio::sync::broadcast::Receiver<Event>,
}

fn config_text(origin: &str, extra: &str) -> String {
    format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n\n[[upstream]]\nname = \"up0\"\norigin = \"{origin}\"\n\n{extra}"
    )
}

async fn start(origin: &str, extra: &str) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, config_text(origin, extra)).unwrap();
    let settings = weir::config::load_file(&config).unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(config.clone());
    let handle = weir::start(opts).await.expect("weir starts");
    let events = handle.subscribe();
    Live {
        weir: common::Weir { handle, dir },
        config,
        events,
    }
}

/// Waits for the next settings event (a bound, not a timing assertion).
async fn next_settings_event(rx: &mut tokio::sync::broadcast::Receiver<Event>) -> Event {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match rx.recv().await.unwrap() {
                e @ (Event::SettingsApplied { .. } | Event::SettingsRejected { .. }) => return e,
                _ => continue,
            }
        }
    })
    .await
    .expect("a settings event within 20 s")
}

/// Replaces the file the way editors do: write a new file, rename it over the old one.
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn put_settings(l: &Live, body: serde_json::Value) -> reqwest::Response {
    let url = format!("{}/_weir/api/settings", l.weir.proxy_url());
    with_secret(
        reqwest::Client::new().put(url).json(&body),
        l.weir.handle.control_secret(),
    )
    .await
}

const LIST: &str = "/agents/sessions";

async fn get(l: &Live, origin: &str, path: &str) -> reqwest::Response {
    l.weir
        .client("alice")
        .get(format!("{origin}{path}"))
        .send()
        .await
        .unwrap()
}

// Every list request goes upstream while fresh_ttl = 0; after the change to 1h the answer the
// last request stored is fresh for the next one: no further upstream call.
const ZERO_TTL: &str = "[classes.list]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n";

#[tokio::test]
async fn a_ttl_changed_through_the_api_applies_on_the_next_request() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), ZERO_TTL).await;
    for _ in 0..2 {
        assert_eq!(get(&l, &up.origin(), LIST).await.status(), 200);
    }
    assert_eq!(
        up.count(LIST),
        2,
        "fresh_ttl 0s: each request went upstream"
    );

    let r = put_settings(
        &l,
        serde_json::json!({"classes": {"list": {"fresh_ttl": "1h"}}}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["applied"], true);
    assert_eq!(body["restart_required"], serde_json::json!([]));
    assert!(matches!(
        next_settings_event(&mut l.events).await,
        Event::SettingsApplied {
            source: SettingsSource::Api,
            ..
        }
    ));

    let r = get(&l, &up.origin(), LIST).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-status"],
        "weir; hit",
        "the stored answer is fresh under the new TTL"
    );
    assert_eq!(up.count(LIST), 2, "no upstream call after the change");
    let s = l.weir.handle.status().await;
    assert_eq!(s.settings.version, 1);
    assert_eq!(s.settings.applied_from, Some(SettingsSource::Api));
    // The watcher saw the API's own write: same text, nothing applied twice.
    tokio::time::sleep(weir_debounce() * 3).await;
    assert_eq!(l.weir.handle.status().await.settings.version, 1);
}

/// The watcher's debounce, as a bound for "the watcher had its chance".
fn weir_debounce() -> Duration {
    Duration::from_millis(200)
}

#[tokio::test]
async fn a_ttl_changed_in_the_file_applies_on_the_next_request() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), ZERO_TTL).await;
    get(&l, &up.origin(), LIST).await;
    get(&l, &up.origin(), LIST).await;
    assert_eq!(up.count(LIST), 2);
    assert!(l.weir.handle.status().await.settings.watching);

    replace_file(
        &l.config,
        &config_text(
            &up.origin(),
            "# edited by hand\n[classes.list]\nfresh_ttl = \"1h\"\nstale_while_revalidate = \"0s\"\n",
        ),
    );
    assert!(matches!(
        next_settings_event(&mut l.events).await,
        Event::SettingsApplied {
            source: SettingsSource::File,
            ..
        }
    ));
    let r = get(&l, &up.origin(), LIST).await;
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    assert_eq!(up.count(LIST), 2);

    // And back down: 0s again, the next request goes upstream.
    std::fs::write(&l.config, config_text(&up.origin(), ZERO_TTL)).unwrap();
    next_settings_event(&mut l.events).await;
    get(&l, &up.origin(), LIST).await;
    assert_eq!(up.count(LIST), 3);
}

// No retries (budget ratio 1 % with no floor), so each failing request is one upstream call.
const FAILING: &str =
    "[retry]\nbudget_ratio = 0.01\nbudget_min_per_sec = 0\n[breaker]\njitter = false\n";

/// Three failing calls: under the default 20-call minimum the breaker stays closed. After
/// `change` lowers the minimum to 3, the next call is let through and opens it (the three
/// earlier failures are still in the window), and the one after is refused: 4 upstream calls
/// for 5 requests.
async fn breaker_threshold_applies(change: impl AsyncFnOnce(&mut Live, &str)) {
    let up = Upstream::start().await;
    up.set(|b| b.status = 500);
    let mut l = start(&up.origin(), FAILING).await;
    let path = "/other/thing";
    for _ in 0..3 {
        assert_eq!(get(&l, &up.origin(), path).await.status(), 500);
    }
    assert_eq!(up.count(path), 3);
    let s = l.weir.handle.status().await;
    assert_eq!(
        s.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Closed
    );

    change(&mut l, &up.origin()).await;

    assert_eq!(get(&l, &up.origin(), path).await.status(), 500);
    assert_eq!(
        up.count(path),
        4,
        "the next request went upstream and opened it"
    );
    let r = get(&l, &up.origin(), path).await;
    assert_eq!(r.status(), 503);
    assert_eq!(up.count(path), 4, "refused by the breaker, not sent");
    let s = l.weir.handle.status().await;
    assert_eq!(
        s.upstreams[0].guard.breaker.state,
        weir::events::BreakerState::Open
    );

    // Another change (here a TTL) reconfigures the breaker in place: it stays open.
    let r = put_settings(
        &l,
        serde_json::json!({"classes": {"view": {"fresh_ttl": "9s"}}}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(get(&l, &up.origin(), path).await.status(), 503);
    assert_eq!(up.count(path), 4, "still open after the settings change");
    let s = l.weir.handle.status().await;
    assert_eq!(s.upstreams[0].guard.breaker.opens_total, 1);
}

#[tokio::test]
async fn a_breaker_threshold_changed_through_the_api_applies_on_the_next_request() {
    breaker_threshold_applies(async |l: &mut Live, _origin: &str| {
        let r = put_settings(l, serde_json::json!({"breaker": {"minimum_calls": 3}})).await;
        assert_eq!(r.status(), 200);
        next_settings_event(&mut l.events).await;
    })
    .await;
}

#[tokio::test]
async fn a_breaker_threshold_changed_in_the_file_applies_on_the_next_request() {
    breaker_threshold_applies(async |l: &mut Live, origin: &str| {
        replace_file(
            &l.config,
            &config_text(origin, &format!("{FAILING}minimum_calls = 3\n")),
        );
        assert!(matches!(
            next_settings_event(&mut l.events).await,
            Event::SettingsApplied {
                source: SettingsSource::File,
                ..
            }
        ));
    })
    .await;
}

#[tokio::test]
async fn a_broken_file_leaves_the_old_settings_running_and_the_status_names_file_and_line() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), ZERO_TTL).await;

    // Bad TOML (an unclosed array on line 9).
    let bad_toml = config_text(&up.origin(), "[classes.list]\nfresh_ttl = [\"1h\"\n");
    std::fs::write(&l.config, &bad_toml).unwrap();
    let Event::SettingsRejected { error, source, .. } = next_settings_event(&mut l.events).await
    else {
        panic!("a bad file is refused")
    };
    assert_eq!(source, SettingsSource::File);
    assert_eq!(error.file, l.config.display().to_string());
    assert!(error.line.is_some());
    let s = l.weir.handle.status().await;
    assert_eq!(s.settings.error.as_ref(), Some(&error));
    assert_eq!(s.settings.version, 0, "nothing applied");

    // A bad value on a known line: the old TTL (0s) keeps every request going upstream.
    let bad_value = config_text(&up.origin(), "[classes.list]\nfresh_ttl = \"soon\"\n");
    let line = bad_value.lines().position(|l| l.contains("soon")).unwrap() + 1;
    replace_file(&l.config, &bad_value);
    let Event::SettingsRejected { error, .. } = next_settings_event(&mut l.events).await else {
        panic!("a bad value is refused")
    };
    assert_eq!(error.line, Some(line));
    assert_eq!(error.key.as_deref(), Some("classes.list.fresh_ttl"));
    let shown = l
        .weir
        .handle
        .status()
        .await
        .settings
        .error
        .unwrap()
        .to_string();
    assert!(
        shown.starts_with(&format!(
            "{}:{line}: key `classes.list.fresh_ttl`",
            l.config.display()
        )),
        "{shown}"
    );
    get(&l, &up.origin(), LIST).await;
    get(&l, &up.origin(), LIST).await;
    assert_eq!(
        up.count(LIST),
        2,
        "the old settings (fresh_ttl 0s) still run"
    );
    assert_eq!(
        l.weir
            .handle
            .settings()
            .classes
            .get(weir::config::RouteClass::List)
            .fresh_ttl,
        Duration::ZERO
    );

    // Fixed: applied, and the error is gone.
    std::fs::write(&l.config, config_text(&up.origin(), "")).unwrap();
    assert!(matches!(
        next_settings_event(&mut l.events).await,
        Event::SettingsApplied { .. }
    ));
    let s = l.weir.handle.status().await;
    assert!(s.settings.error.is_none());
    assert_eq!(s.settings.version, 1);
}

#[tokio::test]
async fn a_restart_only_key_is_reported_not_applied_until_restart() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), "").await;
    let before = l.weir.handle.status().await;
    assert_eq!(before.cache.max_bytes, 64 << 20);

    replace_file(
        &l.config,
        &config_text(
            &up.origin(),
            "[cache]\nmax_bytes = 1048576\n[classes.view]\nfresh_ttl = \"7s\"\n",
        ),
    );
    let Event::SettingsApplied {
        restart_required, ..
    } = next_settings_event(&mut l.events).await
    else {
        panic!("applied")
    };
    assert_eq!(restart_required, [RestartKey::CacheMaxBytes]);
    let s = l.weir.handle.status().await;
    assert_eq!(s.settings.restart_required, [RestartKey::CacheMaxBytes]);
    assert_eq!(s.cache.max_bytes, 64 << 20, "not applied while running");
    let live = l.weir.handle.settings();
    assert_eq!(
        live.classes.get(weir::config::RouteClass::View).fresh_ttl,
        Duration::from_secs(7),
        "the live keys of the same change are in force"
    );
    let status_json = l.weir.status().await;
    assert_eq!(
        status_json["settings"]["restart_required"],
        serde_json::json!(["cache.max_bytes"])
    );

    // Through the API the answer says it too; where credentials go is still refused.
    let r = put_settings(
        &l,
        serde_json::json!({"classes": {"view": {"fresh_ttl": "8s"}}}),
    )
    .await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["restart_required"],
        serde_json::json!(["cache.max_bytes"])
    );
    let r = put_settings(
        &l,
        serde_json::json!({"upstream_proxy": "http://127.0.0.1:1"}),
    )
    .await;
    assert_eq!(r.status(), 422);

    // Restart engine: same address, the new value in force, nothing pending.
    let old_addr = l.weir.handle.local_addr();
    let new = l.weir.handle.restart().await.expect("restarts");
    assert_eq!(new.local_addr(), old_addr, "the restart keeps the address");
    let s = new.status().await;
    assert_eq!(s.cache.max_bytes, 1 << 20);
    assert!(s.settings.restart_required.is_empty());
    assert_eq!(
        new.settings()
            .classes
            .get(weir::config::RouteClass::View)
            .fresh_ttl,
        Duration::from_secs(8)
    );
    let r = get(&l, &up.origin(), "/agents/sessions/1").await;
    assert_eq!(r.status(), 200, "the new engine serves on the same address");
    new.shutdown().await;
}

#[tokio::test]
async fn a_restart_with_a_broken_file_keeps_the_engine_running() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), "").await;
    std::fs::write(&l.config, "listen = [\n").unwrap();
    next_settings_event(&mut l.events).await;
    let e = l.weir.handle.restart().await.err().expect("refused");
    assert!(matches!(e, weir::EngineError::Config(_)), "{e}");
    assert_eq!(
        get(&l, &up.origin(), LIST).await.status(),
        200,
        "still running"
    );
}

#[tokio::test]
async fn routes_key_headers_and_limits_changed_in_the_file_apply_on_the_next_request() {
    let up = Upstream::start().await;
    let mut l = start(&up.origin(), "").await;
    let steps = "/agents/sessions/7/steps";
    // Not a known route: class `other`, never cached.
    get(&l, &up.origin(), steps).await;
    get(&l, &up.origin(), steps).await;
    assert_eq!(up.count(steps), 2);
    let create = "/agents/swe/v1/jobs/o/r";
    let body = "x".repeat(2048);

    replace_file(
        &l.config,
        &config_text(
            &up.origin(),
            "[[route]]\nmethod = \"GET\"\npath = \"/agents/sessions/{id}/steps\"\nclass = \"view\"\n\n[limits]\nmax_body_bytes = 1024\n\n[cache]\nkey_headers = [\"accept\", \"x-tenant\"]\n",
        ),
    );
    assert!(matches!(
        next_settings_event(&mut l.events).await,
        Event::SettingsApplied { .. }
    ));
    // The route: now `view`, cached per identity.
    get(&l, &up.origin(), steps).await;
    let r = get(&l, &up.origin(), steps).await;
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    assert_eq!(up.count(steps), 3);
    // The key header: another x-tenant is another cache entry.
    let r = l
        .weir
        .client("alice")
        .get(format!("{}{steps}", up.origin()))
        .header("x-tenant", "b")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.count(steps), 4);
    // The limit: a 2 KiB create body is now too large, refused before the upstream.
    let r = l
        .weir
        .client("alice")
        .post(format!("{}{create}", up.origin()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(up.count(create), 0);
}

/// A request runs under the settings it started with, to its last attempt (#32): a create
/// whose client is still sending its body when `limits.max_body_bytes` is lowered gets the
/// upstream's answer (larger than the new limit) read under its own snapshot's limit. Before
/// the attempts took the request's snapshot they read the settings in force when the call
/// started, and the answer was refused as too large.
#[tokio::test]
async fn a_reload_while_a_create_body_is_sent_does_not_change_that_request() {
    use futures::SinkExt;
    let up = Upstream::start().await;
    let create = "/agents/swe/v1/jobs/o/r";
    let answer = format!("{{\"job_id\":\"j1\",\"pad\":\"{}\"}}", "x".repeat(4096));
    up.set(|b| {
        b.status = 201;
        b.path_bodies = vec![(create.to_string(), answer.clone())];
    });
    let mut l = start(&up.origin(), "").await;
    // The client sends its headers and half its body, then waits.
    let (mut body_tx, body_rx) =
        futures::channel::mpsc::unbounded::<Result<bytes::Bytes, std::io::Error>>();
    body_tx
        .send(Ok(bytes::Bytes::from_static(b"{\"title\":")))
        .await
        .unwrap();
    let client = l.weir.client("alice");
    let url = format!("{}{create}", up.origin());
    let sending = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(body_rx))
            .send()
            .await
    });
    // The request has its settings snapshot once its first body bytes are held (the body
    // is read after the snapshot is taken; counters move only when a request ends).
    let metrics = format!("{}/metrics", l.weir.handle.base_url());
    let secret = l.weir.handle.control_secret().to_string();
    let mut started = false;
    for _ in 0..500 {
        let text = with_secret(reqwest::Client::new().get(&metrics), &secret)
            .await
            .text()
            .await
            .unwrap();
        if text.lines().any(|l| {
            l.strip_prefix("weir_buffered_request_bytes ")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|v| v > 0)
        }) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started, "the create's body reached Weir's pipeline");
    // The reload (the config file changed, as the settings API does not set limits) lands
    // while the body is still on its way.
    replace_file(
        &l.config,
        &config_text(&up.origin(), "[limits]\nmax_body_bytes = 1024\n"),
    );
    assert!(matches!(
        next_settings_event(&mut l.events).await,
        Event::SettingsApplied { .. }
    ));
    assert_eq!(l.weir.handle.settings().limits.max_body_bytes, 1024);
    body_tx
        .send(Ok(bytes::Bytes::from_static(b"\"t\"}")))
        .await
        .unwrap();
    drop(body_tx);
    let resp = sending.await.unwrap().expect("an answer");
    assert_eq!(
        resp.status(),
        201,
        "the upstream's answer, read under the request's limit"
    );
    assert_eq!(resp.text().await.unwrap(), answer);
    assert_eq!(
        up.count(create),
        1,
        "one create upstream, nothing queued or resent"
    );
    // The next request runs under the new limit: the same answer is now too large for it.
    let r = l
        .weir
        .client("alice")
        .post(format!("{}{create}", up.origin()))
        .header("content-type", "application/json")
        .body("{\"title\":\"u\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502, "the next request reads the new limit");
    let problem: serde_json::Value = r.json().await.unwrap();
    assert_eq!(problem["kind"], "upstream_protocol", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("larger than 1024 bytes")),
        "{problem}"
    );
    assert_eq!(
        up.count(create),
        2,
        "the refused answer's create was sent once"
    );
}
