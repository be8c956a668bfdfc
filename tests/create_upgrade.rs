//! A create queued by a build before the v2 dedupe key (commit 2bba433) is still found by the
//! duplicate check after the upgrade: the same create sent again joins it rather than being
//! queued a second time. Real SQLite, a real loopback upstream, the engine running.

mod common;
use common::{Upstream, Weir};

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";
/// Credentials in memory (no keychain needed) and a breaker that never opens.
const MEMORY_QUEUE: &str = "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n";

fn body(i: usize) -> String {
    format!(r#"{{"problem_statement":"task {i}","event_type":"weir-test"}}"#)
}

/// The dedupe key a build before 2bba433 gave a create without an `Idempotency-Key`: the
/// upstream's position as a little-endian u64, the identity, the length-prefixed path and query,
/// the body (written out here as that build hashed it, not taken from Weir).
fn v1_key(position: u64, identity_hex: &str, path_and_query: &str, body: &[u8]) -> String {
    let identity: [u8; 32] = hex::decode(identity_hex).unwrap().try_into().unwrap();
    let mut h = blake3::Hasher::new();
    h.update(&position.to_le_bytes());
    h.update(&identity);
    h.update(&(path_and_query.len() as u64).to_le_bytes());
    h.update(path_and_query.as_bytes());
    h.update(body);
    h.finalize().to_hex().to_string()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn a_create_queued_under_the_v1_key_is_not_queued_again() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let weir = Weir::start(&[&up.origin()], MEMORY_QUEUE).await;
    let send = |i: usize| {
        weir.client("alice")
            .post(format!("{}{JOBS}", up.origin()))
            .body(body(i))
            .send()
    };
    // Another create from the same caller, queued by this build: its row holds the caller's
    // identity, which the v1 key hashes.
    let r = send(0).await.unwrap();
    assert_eq!(r.headers()["weir-queued"], "1");
    let db = weir.dir.path().join("queue.sqlite3");
    let mut store = weir_store::Store::open(&db).unwrap();
    let identity = store.get(1).unwrap().unwrap().identity;
    // Create 1 as a build before the upgrade queued it (upstream up0 at position 0), written
    // through the queue's store while this build runs.
    let old = store
        .insert(
            &weir_store::NewItem {
                upstream: "up0".into(),
                method: http::Method::POST,
                path_and_query: JOBS.into(),
                headers: vec![("content-type".into(), "application/json".into())],
                body: body(1).into_bytes(),
                identity: identity.clone(),
                credential_ref: None,
                dedupe_key: v1_key(0, &identity, JOBS, body(1).as_bytes()),
                repo: Some("octo/repo".into()),
                problem_statement: Some("task 1".into()),
                in_doubt: false,
                provisional: None,
            },
            now_ms(),
        )
        .unwrap();
    assert_eq!(old.id, 2);
    // The client sends create 1 again: the waiting row is its first copy.
    let r = send(1).await.unwrap();
    assert_eq!(
        r.headers()["weir-queued"],
        "2",
        "answered with the item queued before the upgrade"
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["reason"], "an identical create is already queued");
    let items = store.list(&weir_store::ListFilter::default()).unwrap();
    assert_eq!(items.len(), 2, "no second row for create 1: {items:?}");
    // Both still wait (the upstream refuses every replay with 503).
    assert!(items.iter().all(|it| it.state.is_live()), "{items:?}");
    weir.handle.shutdown().await;
}
