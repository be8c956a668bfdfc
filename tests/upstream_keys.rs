//! Keys that outlive a run name their upstream, not its position (issue #21): the disk cache's
//! rows and a queued create's dedupe key survive a restart, and reordering the `[[upstream]]`
//! tables in between must not hand one upstream's stored answer, or its queued create, to a
//! request for another with the same path, identity and body.
//!
//! Two real loopback upstreams `a` and `b`; Weir starts with `a` first, stops, and starts again
//! on the same data dir with `b` first. Both tests need a keychain (the cache's sealing key, the
//! identity key and queued credentials live there): run under scripts/with-keychain.sh (they
//! say so and return without one).

mod common;
use common::Upstream;
use std::path::Path;
use weir::status::CachePersistence;

const LIST: &str = "/agents/sessions";
const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";
const TOKEN: &str = "ghu_UPSTREAMKEYS1234567890abcdef";

use common::has_keychain;

/// Weir on `data` with the upstreams as `[[upstream]]` tables in the order given. Lists stay
/// fresh for an hour (a stored answer is a hit after the restart); the breaker never opens.
async fn start(data: &Path, upstreams: &[(&str, &Upstream)]) -> weir::EngineHandle {
    let mut toml = String::from(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n",
    );
    for (name, up) in upstreams {
        toml.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\norigin = \"{}\"\n",
            up.origin()
        ));
    }
    toml.push_str("[classes.list]\nfresh_ttl = \"1h\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n[network]\ndetect_os = false\n");
    let settings = weir::config::parse_str(&toml, "test.toml").expect("test config");
    weir::start(weir::EngineOptions::new(settings, data.to_path_buf()))
        .await
        .expect("weir starts")
}

fn client(h: &weir::EngineHandle) -> reqwest::Client {
    common::proxied_with_token(h, TOKEN)
}

struct Answer {
    status: u16,
    cache_status: String,
    queued: Option<String>,
    body: String,
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let r = req.send().await.unwrap();
    let header = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    let (cache_status, queued) = (
        header("cache-status").unwrap_or_default(),
        header("weir-queued"),
    );
    Answer {
        status: r.status().as_u16(),
        cache_status,
        queued,
        body: r.text().await.unwrap(),
    }
}

async fn get(h: &weir::EngineHandle, up: &Upstream) -> Answer {
    send(client(h).get(format!("{}{LIST}", up.origin()))).await
}

async fn create(h: &weir::EngineHandle, up: &Upstream, body: &str) -> Answer {
    send(
        client(h)
            .post(format!("{}{JOBS}", up.origin()))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordered_upstreams_never_get_each_others_stored_answers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let (body_a, body_b) = (
        r#"{"sessions":[{"id":"from-a"}]}"#,
        r#"{"sessions":[{"id":"from-b"}]}"#,
    );
    a.set(|x| x.body = Some(body_a.into()));
    b.set(|x| x.body = Some(body_b.into()));

    let first = start(&data, &[("a", &a), ("b", &b)]).await;
    let r = get(&first, &a).await;
    assert_eq!(
        (r.status, r.cache_status.as_str(), r.body.as_str()),
        (200, "weir; fwd=miss; stored", body_a)
    );
    first.flush_cache().await;
    assert!(
        matches!(
            first.status().await.cache.persistence,
            CachePersistence::Persisted { entries: 1, .. }
        ),
        "a's answer is on disk"
    );
    first.shutdown().await;

    // Same names, same path, same caller; only the tables' order changed.
    let second = start(&data, &[("b", &b), ("a", &a)]).await;
    match second.status().await.cache.persistence {
        CachePersistence::Persisted {
            loaded_at_start, ..
        } => assert_eq!(loaded_at_start, 1),
        other => panic!("{other:?}"),
    }
    let r = get(&second, &b).await;
    assert_eq!(
        (r.status, r.cache_status.as_str(), r.body.as_str()),
        (200, "weir; fwd=miss; stored", body_b),
        "b (now first) is asked, not served a's stored answer"
    );
    assert_eq!(b.count(LIST), 1);
    // a's stored answer is still a's, found by its name at its new place.
    let r = get(&second, &a).await;
    assert_eq!(
        (r.status, r.cache_status.as_str(), r.body.as_str()),
        (200, "weir; hit", body_a)
    );
    assert_eq!(a.count(LIST), 1, "a was not asked again");
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_create_is_no_duplicate_of_the_same_create_to_another_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !has_keychain(&data) {
        return;
    }
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    // a cannot take creates (its item stays queued through the restart); b can.
    a.set(|x| x.status = 503);
    b.set(|x| {
        x.status = 201;
        x.body = Some(r#"{"job_id":"b-job","session_id":"b-session"}"#.into());
    });
    let task = r#"{"problem_statement":"Count the sheep backwards"}"#;

    let first = start(&data, &[("a", &a), ("b", &b)]).await;
    let r = create(&first, &a, task).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let queued_at_a = r.queued.expect("a's create was queued");
    first.shutdown().await;

    let second = start(&data, &[("b", &b), ("a", &a)]).await;
    let r = create(&second, &b, task).await;
    assert_eq!(
        (r.status, r.queued.as_deref()),
        (201, None),
        "b's create went to b: {}",
        r.body
    );
    assert!(r.body.contains("b-job"), "b's own answer: {}", r.body);
    assert_eq!(b.count(JOBS), 1, "b received the create once");
    // The same create to a again is still a duplicate of a's queued one, across the reorder.
    let r = create(&second, &a, task).await;
    assert_eq!(
        (r.status, r.queued.as_deref()),
        (201, Some(queued_at_a.as_str())),
        "{}",
        r.body
    );
    assert_eq!(b.count(JOBS), 1);
    second.shutdown().await;
}
