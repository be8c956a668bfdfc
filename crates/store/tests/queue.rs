//! The queue's behaviour on real SQLite files: durability, ordering, the state machine,
//! crash recovery, expiry and dedupe.

mod common;

use common::{new_item, result, temp_db};
use serde_json::json;
use weir_store::{ListFilter, Oldest, State, Store, StoreError, Transition, SCHEMA_VERSION};

#[test]
fn items_survive_close_and_reopen_with_every_field() {
    let (_dir, path) = temp_db();
    let inserted = {
        let mut store = Store::open(&path).unwrap();
        store.insert(&new_item(1), 1_000).unwrap()
    }; // connection closed here
    assert_eq!(inserted.state, State::Queued);
    assert_eq!(
        (
            inserted.created_at,
            inserted.next_attempt_at,
            inserted.updated_at
        ),
        (1_000, 1_000, 1_000)
    );
    assert_eq!((inserted.attempts, inserted.needs_lookup), (0, false));

    let store = Store::open(&path).unwrap();
    let got = store.get(inserted.id).unwrap().expect("item persisted");
    assert_eq!(got, inserted);
    let n = new_item(1);
    assert_eq!(got.headers, n.headers);
    assert_eq!(got.body, n.body);
    assert_eq!(got.credential_ref.as_deref(), Some("cred-1"));
    assert_eq!(got.repo.as_deref(), Some("octo/repo-1"));
    assert_eq!(store.get(inserted.id + 1).unwrap(), None);
}

#[test]
fn reopening_runs_no_migration_again_and_keeps_the_version() {
    let (_dir, path) = temp_db();
    for round in 0..3 {
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.insert(&new_item(round), 10).unwrap();
        assert_eq!(store.counts().unwrap().queued, u64::from(round) + 1);
    }
}

#[test]
fn database_runs_in_wal_mode() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    store.insert(&new_item(1), 1).unwrap();
    // The journal mode is a property of the file: a second connection sees it.
    let raw = rusqlite::Connection::open(&path).unwrap();
    let mode: String = raw
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert!(path.with_extension("db-wal").exists());
}

#[test]
fn next_due_is_oldest_first_per_upstream_and_respects_the_due_time() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let a = store.insert(&new_item(1), 100).unwrap();
    let b = store.insert(&new_item(2), 200).unwrap();
    let mut other = new_item(3);
    other.upstream = "github".into();
    let c = store.insert(&other, 50).unwrap();

    assert_eq!(
        store.next_due("copilot", 99).unwrap(),
        None,
        "nothing due yet"
    );
    assert_eq!(store.next_due("copilot", 1_000).unwrap().unwrap().id, a.id);
    assert_eq!(store.next_due("github", 1_000).unwrap().unwrap().id, c.id);

    // The oldest is pushed into the future: the next one becomes due, then it comes back.
    store
        .reschedule(a.id, 5_000, "upstream 503", 1_000)
        .unwrap();
    assert_eq!(store.next_due("copilot", 1_000).unwrap().unwrap().id, b.id);
    assert_eq!(store.next_due("copilot", 5_000).unwrap().unwrap().id, a.id);

    // Replaying items are not handed out twice.
    store.mark_replaying(a.id, 5_000).unwrap();
    assert_eq!(store.next_due("copilot", 5_000).unwrap().unwrap().id, b.id);
}

/// What an idle worker and the housekeeping sleep until: the upstream's next due time, and
/// the first instant expiry or purge can act on (exactly: one millisecond earlier finds
/// nothing, that instant finds the row).
#[test]
fn the_next_due_time_and_the_next_expiry_come_from_the_oldest_rows() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.next_attempt_at("copilot").unwrap(), None);
    assert_eq!(store.oldest().unwrap(), Oldest::default());
    assert_eq!(store.oldest().unwrap().next_due(10, 100), None);

    let a = store.insert(&new_item(1), 100).unwrap();
    let b = store.insert(&new_item(2), 200).unwrap();
    store.reschedule(a.id, 5_000, "upstream 503", 300).unwrap();
    assert_eq!(store.next_attempt_at("copilot").unwrap(), Some(200));
    assert_eq!(store.next_attempt_at("github").unwrap(), None);
    // A replaying item is in flight, not due.
    store.mark_replaying(b.id, 400).unwrap();
    assert_eq!(store.next_attempt_at("copilot").unwrap(), Some(5_000));

    let o = store.oldest().unwrap();
    assert_eq!(o.waiting_created_at, Some(100));
    assert_eq!(o.ended_updated_at, None);
    let due = o.next_due(1_000, 50_000).unwrap();
    assert_eq!(due, 1_101);
    assert!(store.expire_older_than(1_000, due - 1).unwrap().is_empty());
    assert_eq!(store.expire_older_than(1_000, due).unwrap().len(), 1);

    // Now only ended rows: the next thing to do is their purge.
    store.mark_done(b.id, &result(json!({})), 600).unwrap();
    let o = store.oldest().unwrap();
    assert_eq!(o.waiting_created_at, None);
    assert_eq!(
        o.ended_updated_at,
        Some(600),
        "the expired item ended at 1,101"
    );
    let due = o.next_due(1_000, 50_000).unwrap();
    assert_eq!(due, 50_601);
    assert!(store
        .purge_ended_before(due - 1 - 50_000)
        .unwrap()
        .is_empty());
    assert_eq!(store.purge_ended_before(due - 50_000).unwrap().len(), 1);
    // A maximum age near the type's end saturates instead of wrapping.
    store.insert(&new_item(3), 700).unwrap();
    assert_eq!(
        store.oldest().unwrap().next_due(i64::MAX, i64::MAX),
        Some(i64::MAX)
    );
}

#[test]
fn happy_path_replay_records_the_result() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let item = store.insert(&new_item(1), 100).unwrap();
    let r = store.mark_replaying(item.id, 200).unwrap();
    assert_eq!(
        (r.state, r.attempts, r.last_attempt_at),
        (State::Replaying, 1, Some(200))
    );
    let done_with = result(json!({"job_id": "j-1", "session_id": "s-1", "pull_request": 42}));
    let done = store.mark_done(item.id, &done_with, 300).unwrap();
    assert_eq!(done.state, State::Done);
    assert!(done.state.is_end());
    assert_eq!(done.result, Some(done_with));
    assert_eq!(done.updated_at, 300);
    assert_eq!(store.get(item.id).unwrap().unwrap(), done);
}

#[test]
fn illegal_transitions_are_refused_with_a_typed_error_and_change_nothing() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let id = store.insert(&new_item(1), 100).unwrap().id;
    store.mark_replaying(id, 110).unwrap();
    store
        .mark_done(id, &result(json!({"job_id": "j"})), 120)
        .unwrap();
    let before = store.get(id).unwrap().unwrap();

    let attempts: Vec<(Transition, Result<_, StoreError>)> = vec![
        (Transition::Cancel, store.cancel(id, 130)),
        (Transition::Replay, store.mark_replaying(id, 130)),
        (Transition::Retry, store.retry(id, 130)),
        (Transition::Fail, store.mark_failed(id, "x", 130)),
        (Transition::Reschedule, store.reschedule(id, 1, "x", 130)),
        (Transition::InDoubt, store.mark_in_doubt(id, 1, "x", 130)),
        (
            Transition::Done,
            store.mark_done(id, &result(json!({})), 130),
        ),
    ];
    for (op, result) in attempts {
        match result {
            Err(StoreError::IllegalTransition {
                id: eid,
                from,
                op: eop,
            }) => {
                assert_eq!((eid, from, eop), (id, State::Done, op));
            }
            other => panic!("{op:?} on a done item: {other:?}"),
        }
    }
    assert_eq!(store.get(id).unwrap().unwrap(), before, "unchanged");

    // A queued item cannot be marked done or in doubt without being sent.
    let q = store.insert(&new_item(2), 200).unwrap().id;
    assert!(matches!(
        store.mark_done(q, &result(json!({})), 210),
        Err(StoreError::IllegalTransition {
            from: State::Queued,
            ..
        })
    ));
    assert!(matches!(
        store.mark_in_doubt(q, 0, "x", 210),
        Err(StoreError::IllegalTransition {
            from: State::Queued,
            ..
        })
    ));
    assert!(matches!(
        store.cancel(9_999, 1),
        Err(StoreError::NotFound { id: 9_999 })
    ));
}

#[test]
fn crash_recovery_turns_replaying_into_in_doubt_and_nothing_else() {
    let (_dir, path) = temp_db();
    let (sending, waiting) = {
        let mut store = Store::open(&path).unwrap();
        let sending = store.insert(&new_item(1), 100).unwrap().id;
        let waiting = store.insert(&new_item(2), 200).unwrap().id;
        store.mark_replaying(sending, 300).unwrap();
        (sending, waiting)
    }; // "crash": the process goes away with item 1 mid-send

    let mut store = Store::open(&path).unwrap();
    let recovered = store.recover_after_crash(10_000).unwrap();
    assert_eq!(recovered.len(), 1);
    let r = &recovered[0];
    assert_eq!(
        (r.id, r.state, r.needs_lookup),
        (sending, State::InDoubt, true)
    );
    assert_eq!(r.next_attempt_at, 10_000);
    assert!(r.last_error.as_deref().unwrap().contains("stopped"));
    assert_eq!(store.get(waiting).unwrap().unwrap().state, State::Queued);
    assert!(
        store.recover_after_crash(10_001).unwrap().is_empty(),
        "idempotent"
    );

    // The in-doubt item comes first (it is older) and is marked for lookup.
    let due = store.next_due("copilot", 10_000).unwrap().unwrap();
    assert_eq!((due.id, due.state), (sending, State::InDoubt));
    // Lookup found it upstream: done without a second send.
    let done = store
        .mark_done(sending, &result(json!({"job_id": "found"})), 10_100)
        .unwrap();
    assert_eq!((done.state, done.attempts), (State::Done, 1));
}

#[test]
fn doubt_survives_cancel_and_retry_until_a_lookup_clears_it() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let id = store.insert(&new_item(1), 0).unwrap().id;
    store.mark_replaying(id, 1).unwrap();
    // The answer was lost after sending.
    let d = store
        .mark_in_doubt(id, 50, "timeout after send", 2)
        .unwrap();
    assert_eq!(
        (d.state, d.needs_lookup, d.next_attempt_at),
        (State::InDoubt, true, 50)
    );
    // A failed lookup reschedules but stays in doubt.
    let d = store.reschedule(id, 90, "lookup failed", 60).unwrap();
    assert_eq!((d.state, d.next_attempt_at), (State::InDoubt, 90));
    // Cancel, then retry: back to in doubt, not queued (it might exist upstream).
    assert_eq!(store.cancel(id, 70).unwrap().state, State::Cancelled);
    let r = store.retry(id, 80).unwrap();
    assert_eq!(
        (r.state, r.needs_lookup, r.attempts),
        (State::InDoubt, true, 0)
    );
    // Lookup: not there. Replay clears the doubt; a definite failure then retries as queued.
    let s = store.mark_replaying(id, 90).unwrap();
    assert_eq!((s.state, s.needs_lookup), (State::Replaying, false));
    assert_eq!(
        store.mark_failed(id, "422", 95).unwrap().state,
        State::Failed
    );
    assert_eq!(store.retry(id, 99).unwrap().state, State::Queued);
}

#[test]
fn reschedule_from_replaying_requeues_and_keeps_the_error() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let id = store.insert(&new_item(1), 0).unwrap().id;
    store.mark_replaying(id, 10).unwrap();
    let r = store
        .reschedule(id, 1_010, "connection refused", 10)
        .unwrap();
    assert_eq!(r.state, State::Queued);
    assert_eq!(r.last_error.as_deref(), Some("connection refused"));
    assert_eq!((r.next_attempt_at, r.attempts), (1_010, 1));
    let r = store.mark_replaying(id, 1_010).unwrap();
    assert_eq!(r.attempts, 2);
}

#[test]
fn expiry_takes_only_old_waiting_items() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let old_queued = store.insert(&new_item(1), 100).unwrap().id;
    let old_doubt = store.insert(&new_item(2), 150).unwrap().id;
    store.mark_replaying(old_doubt, 160).unwrap();
    store.mark_in_doubt(old_doubt, 170, "timeout", 160).unwrap();
    let old_sending = store.insert(&new_item(3), 120).unwrap().id;
    store.mark_replaying(old_sending, 180).unwrap();
    let young = store.insert(&new_item(4), 900).unwrap().id;

    // max age 500 at t=1000: created before 500 expires.
    let expired = store.expire_older_than(500, 1_000).unwrap();
    let ids: Vec<i64> = expired.iter().map(|i| i.id).collect();
    assert_eq!(
        ids,
        [old_queued, old_doubt],
        "oldest first, replaying untouched"
    );
    assert!(expired
        .iter()
        .all(|i| i.state == State::Expired && i.updated_at == 1_000));
    assert_eq!(
        store.get(old_sending).unwrap().unwrap().state,
        State::Replaying
    );
    assert_eq!(store.get(young).unwrap().unwrap().state, State::Queued);
    assert!(store.expire_older_than(500, 1_000).unwrap().is_empty());
    // An expired item can be brought back by hand.
    assert_eq!(store.retry(old_queued, 1_100).unwrap().state, State::Queued);
}

#[test]
fn one_live_item_per_dedupe_key() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let first = store.insert(&new_item(1), 0).unwrap();
    match store.insert(&new_item(1), 5) {
        Err(StoreError::Duplicate { existing_id }) => assert_eq!(existing_id, first.id),
        other => panic!("second live insert: {other:?}"),
    }
    assert_eq!(store.counts().unwrap().total(), 1);
    assert_eq!(
        store.find_by_dedupe_key("key-1").unwrap().unwrap().id,
        first.id
    );
    assert_eq!(store.find_by_dedupe_key("nope").unwrap(), None);

    // Once the first has ended, the same create may be queued again; lookups prefer the live
    // one, and retrying the ended one would double it, so that is refused.
    store.cancel(first.id, 10).unwrap();
    let second = store.insert(&new_item(1), 20).unwrap();
    assert_eq!(
        store.find_by_dedupe_key("key-1").unwrap().unwrap().id,
        second.id
    );
    match store.retry(first.id, 30) {
        Err(StoreError::Duplicate { existing_id }) => assert_eq!(existing_id, second.id),
        other => panic!("retry while a twin is live: {other:?}"),
    }
    assert_eq!(
        store.get(first.id).unwrap().unwrap().state,
        State::Cancelled
    );
    store.mark_replaying(second.id, 40).unwrap();
    store
        .mark_done(second.id, &result(json!({"job_id": "j"})), 50)
        .unwrap();
    assert_eq!(
        store.find_by_dedupe_key("key-1").unwrap().unwrap().id,
        second.id
    );
}

#[test]
fn counts_list_and_purge() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let ids: Vec<i64> = (0..5)
        .map(|n| store.insert(&new_item(n), i64::from(n)).unwrap().id)
        .collect();
    store.mark_replaying(ids[0], 10).unwrap();
    store.mark_replaying(ids[1], 10).unwrap();
    store.mark_done(ids[1], &result(json!({})), 11).unwrap();
    store.cancel(ids[2], 12).unwrap();
    store.mark_failed(ids[3], "404 repo not found", 13).unwrap();

    let c = store.counts().unwrap();
    assert_eq!(
        (
            c.queued,
            c.replaying,
            c.done,
            c.cancelled,
            c.failed,
            c.in_doubt,
            c.expired
        ),
        (1, 1, 1, 1, 1, 0, 0)
    );
    assert_eq!((c.live(), c.total()), (2, 5));

    let all = store.list(&ListFilter::default()).unwrap();
    let listed: Vec<i64> = all.iter().map(|i| i.id).collect();
    assert_eq!(
        listed,
        ids.iter().rev().copied().collect::<Vec<_>>(),
        "newest first"
    );
    let ended = store
        .list(&ListFilter {
            states: vec![State::Done, State::Failed, State::Cancelled],
            limit: 2,
        })
        .unwrap();
    assert_eq!(
        ended.iter().map(|i| i.id).collect::<Vec<_>>(),
        [ids[3], ids[2]]
    );

    // Purge removes ended items last changed before the cutoff, never live ones.
    assert_eq!(store.purge_ended_before(13).unwrap().len(), 2);
    assert_eq!(store.counts().unwrap().total(), 3);
    assert_eq!(store.get(ids[3]).unwrap().unwrap().state, State::Failed);
    assert!(store.get(ids[1]).unwrap().is_none());
}

#[test]
fn ids_are_never_reused() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let a = store.insert(&new_item(1), 0).unwrap().id;
    store.cancel(a, 1).unwrap();
    assert_eq!(store.purge_ended_before(100).unwrap().len(), 1);
    let b = store.insert(&new_item(2), 2).unwrap().id;
    assert!(b > a, "{b} reused {a}");
}

#[test]
fn items_serialise_without_the_body_and_with_snake_case_states() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let id = store.insert(&new_item(1), 0).unwrap().id;
    store.mark_replaying(id, 1).unwrap();
    let item = store.mark_in_doubt(id, 2, "t", 1).unwrap();
    let v = serde_json::to_value(&item).unwrap();
    assert_eq!(v["state"], "in_doubt");
    assert!(v.get("body").is_none());
    assert_eq!(v["headers"][0], json!(["content-type", "application/json"]));
}
