//! The store thread ([`AsyncStore::call`]): many tasks sharing one store thread, errors passed through, and a
//! panicking job not taking the store down.

mod common;

use std::collections::HashSet;

use common::{new_item, result, temp_db};
use serde_json::json;
use weir_store::{AsyncStore, ListFilter, State, Store, StoreError, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_from_many_tasks_are_all_stored_once() {
    let (_dir, path) = temp_db();
    let store = AsyncStore::open(&path, StoreOptions::default())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .call(move |s| s.insert(&new_item(n), i64::from(n)))
                    .await
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap().unwrap().id);
    }
    assert_eq!(ids.len(), 64);
    assert_eq!(store.call(|s| s.counts()).await.unwrap().queued, 64);

    // Creates racing with the same dedupe key: exactly one wins.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.call(|s| s.insert(&new_item(1_000), 0)).await })
        })
        .collect();
    let mut won = 0;
    for r in racers {
        match r.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::Duplicate { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(won, 1);

    drop(store);
    // Everything is on disk for a fresh, synchronous open.
    assert_eq!(Store::open(&path).unwrap().counts().unwrap().queued, 65);
}

#[tokio::test]
async fn the_replay_cycle_through_the_async_api() {
    let (_dir, path) = temp_db();
    let store = AsyncStore::open(&path, StoreOptions::default())
        .await
        .unwrap();
    let id = store
        .call(|s| s.insert(&new_item(1), 100))
        .await
        .unwrap()
        .id;
    assert_eq!(
        store
            .call(|s| s.next_due("copilot", 100))
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
    store
        .call(move |s| s.mark_replaying(id, 110))
        .await
        .unwrap();
    let rescheduled = store
        .call(move |s| s.reschedule(id, 500, "503", 120))
        .await
        .unwrap();
    assert_eq!(rescheduled.state, State::Queued);
    assert_eq!(
        store.call(|s| s.next_due("copilot", 499)).await.unwrap(),
        None
    );
    store
        .call(move |s| s.mark_replaying(id, 500))
        .await
        .unwrap();
    store
        .call(move |s| s.mark_in_doubt(id, 600, "timeout", 510))
        .await
        .unwrap();
    let recovered = store.call(|s| s.recover_after_crash(700)).await.unwrap();
    assert!(recovered.is_empty(), "in_doubt is not replaying");
    let done = store
        .call(move |s| s.mark_done(id, &result(json!({"job_id": "j"})), 700))
        .await
        .unwrap();
    assert_eq!((done.state, done.attempts), (State::Done, 2));
    assert_eq!(
        store
            .call(|s| s.find_by_dedupe_key("key-1"))
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
    let listed = store
        .call(|s| {
            s.list(&ListFilter {
                states: vec![State::Done],
                limit: 10,
            })
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);

    match store.call(move |s| s.cancel(id, 800)).await {
        Err(StoreError::IllegalTransition {
            from: State::Done, ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn open_errors_come_back_typed() {
    let (dir, _) = temp_db();
    let path = dir.path().join("junk.db");
    std::fs::write(&path, b"definitely not SQLite".repeat(100)).unwrap();
    let err = AsyncStore::open(&path, StoreOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn a_panicking_job_does_not_take_the_store_down() {
    let (_dir, path) = temp_db();
    let store = AsyncStore::open(&path, StoreOptions::default())
        .await
        .unwrap();
    let result: Result<(), StoreError> = store
        .call(|_| -> Result<(), StoreError> { panic!("bug in a job") })
        .await;
    assert!(matches!(result, Err(StoreError::Closed)), "{result:?}");
    // The thread and its connection still serve everyone else.
    store.call(|s| s.insert(&new_item(1), 0)).await.unwrap();
    assert_eq!(store.call(|s| s.counts()).await.unwrap().queued, 1);
}
