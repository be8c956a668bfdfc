//! Hand-off offers in their own table (`handoff_offers`, issue 21): an offered item is parked
//! in `offered` / `handed_off` and its record is its offer row, written in the transaction of
//! the item's own change; confirmation wins once, even between two connections.

mod common;

use common::{new_item, temp_db};
use serde_json::json;
use weir_store::{Confirmation, Finish, ListFilter, State, Store, StoreError, Transition};

fn confirmed(program: &str) -> Confirmation {
    Confirmation {
        program: Some(program.into()),
        confirmed_at: "2026-12-02T04:00:00Z".into(),
    }
}

fn offer_rows(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM handoff_offers", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn an_offer_is_never_due_and_is_handed_off_at_most_once() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let offer = json!({"rule": "r", "checkout": "/src/app"});
    let it = store
        .insert_offered(&new_item(1), 5_000, &offer, 1_000)
        .unwrap();
    assert_eq!(it.state, State::Offered);
    assert_eq!(it.result, None, "the offer is not in the item's result");
    let rec = store.hand_off_record(it.id).unwrap().unwrap();
    assert_eq!(
        (rec.item_id, &rec.offer, rec.expires_at, rec.running),
        (it.id, &offer, 5_000, false)
    );
    assert_eq!((rec.created_at, rec.updated_at), (1_000, 1_000));
    assert_eq!((rec.program, rec.outcome), (None, None));
    // Never replayed while offered, and it holds its dedupe key.
    assert_eq!(store.next_due("copilot", i64::MAX).unwrap(), None);
    assert!(matches!(
        store.insert(&new_item(1), 1_001),
        Err(StoreError::Duplicate { existing_id }) if existing_id == it.id
    ));
    assert_eq!(store.counts().unwrap().offered, 1);
    assert!(store.expired_offers(4_999).unwrap().is_empty());
    assert_eq!(store.expired_offers(5_000).unwrap().len(), 1);

    let done = store.hand_off(it.id, &confirmed("aider"), 2_000).unwrap();
    assert_eq!(done.state, State::HandedOff);
    assert!(done.state.is_end());
    let rec = store.hand_off_record(it.id).unwrap().unwrap();
    assert_eq!(
        (
            rec.running,
            rec.program.as_deref(),
            rec.confirmed_at.as_deref()
        ),
        (true, Some("aider"), Some("2026-12-02T04:00:00Z"))
    );
    assert_eq!(
        (rec.offer, rec.created_at, rec.updated_at),
        (offer, 1_000, 2_000)
    );
    let again = store
        .hand_off(it.id, &confirmed("other"), 2_001)
        .unwrap_err();
    assert!(matches!(
        again,
        StoreError::IllegalTransition {
            from: State::HandedOff,
            op: Transition::HandOff,
            ..
        }
    ));
    // The refused confirmation wrote nothing to the offer row.
    let rec = store.hand_off_record(it.id).unwrap().unwrap();
    assert_eq!(
        (rec.program.as_deref(), rec.updated_at),
        (Some("aider"), 2_000)
    );
    assert!(store.requeue(it.id, "late", 2_002).is_err());

    let finish = Finish {
        outcome: Some(json!({"exit_code": 0})),
        finished_at: Some("2026-12-02T04:01:00Z".into()),
    };
    let rec = store.record_hand_off_result(it.id, &finish, 3_000).unwrap();
    assert_eq!(
        (
            rec.running,
            rec.outcome,
            rec.finished_at.as_deref(),
            rec.updated_at
        ),
        (
            false,
            Some(json!({"exit_code": 0})),
            Some("2026-12-02T04:01:00Z"),
            3_000
        )
    );
    assert_eq!(
        rec.program.as_deref(),
        Some("aider"),
        "the confirmation stays"
    );
    let item = store.get(it.id).unwrap().unwrap();
    assert_eq!(
        (item.state, item.updated_at, item.result),
        (State::HandedOff, 3_000, None)
    );
    assert!(store.expired_offers(i64::MAX).unwrap().is_empty());
}

#[test]
fn an_outcome_is_recorded_only_on_a_handed_off_item() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let it = store
        .insert_offered(&new_item(1), 9_000, &json!({}), 1_000)
        .unwrap();
    let finish = Finish {
        outcome: None,
        finished_at: None,
    };
    assert!(matches!(
        store.record_hand_off_result(it.id, &finish, 2_000),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.record_hand_off_result(999, &finish, 2_000),
        Err(StoreError::NotFound { id: 999 })
    ));
    let rec = store.hand_off_record(it.id).unwrap().unwrap();
    assert_eq!(rec.updated_at, 1_000, "nothing written");
    assert_eq!(store.get(it.id).unwrap().unwrap().updated_at, 1_000);
}

#[test]
fn a_declined_offer_is_queued_again_or_withdrawn_and_its_row_stays() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let a = store
        .insert_offered(&new_item(1), 9_000, &json!({"requeue": true}), 1_000)
        .unwrap();
    let b = store
        .insert_offered(&new_item(2), 9_000, &json!({"requeue": false}), 1_000)
        .unwrap();
    let a = store.requeue(a.id, "declined", 2_000).unwrap();
    assert_eq!(
        (a.state, a.next_attempt_at, a.result),
        (State::Queued, 2_000, None)
    );
    assert_eq!(a.last_error.as_deref(), Some("declined"));
    assert_eq!(
        store.next_due("copilot", 2_000).unwrap().map(|i| i.id),
        Some(a.id)
    );
    let b = store.withdraw(b.id, "declined", 2_000).unwrap();
    assert_eq!(b.state, State::Cancelled);
    assert!(store.hand_off(b.id, &confirmed("x"), 2_001).is_err());
    // Both records stay (what was offered); neither is an expired offer any more.
    assert_eq!(
        store.hand_off_record(a.id).unwrap().unwrap().offer,
        json!({"requeue": true})
    );
    assert_eq!(
        store.hand_off_record(b.id).unwrap().unwrap().offer,
        json!({"requeue": false})
    );
    assert!(store.expired_offers(i64::MAX).unwrap().is_empty());
    // A plain create has no record.
    let plain = store.insert(&new_item(3), 1).unwrap();
    assert_eq!(store.hand_off_record(plain.id).unwrap(), None);
}

#[test]
fn offers_are_listed_with_their_records_and_purged_with_their_items() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let a = store
        .insert_offered(&new_item(1), 9_000, &json!({"rule": "a"}), 1_000)
        .unwrap();
    let b = store
        .insert_offered(&new_item(2), 9_000, &json!({"rule": "b"}), 1_000)
        .unwrap();
    store.insert(&new_item(3), 1_000).unwrap();
    store.hand_off(b.id, &confirmed("aider"), 2_000).unwrap();
    let filter = ListFilter {
        states: vec![State::Offered, State::HandedOff],
        limit: 10,
    };
    let listed = store.list_offers(&filter).unwrap();
    let got: Vec<_> = listed
        .iter()
        .map(|(i, r)| (i.id, i.state, r.item_id, r.offer["rule"].clone(), r.running))
        .collect();
    assert_eq!(
        got,
        [
            (b.id, State::HandedOff, b.id, json!("b"), true),
            (a.id, State::Offered, a.id, json!("a"), false)
        ],
        "newest first, each with its own record"
    );
    // The item's columns read as the item (the offer's times do not shadow its own).
    assert_eq!(listed[0].0, store.get(b.id).unwrap().unwrap());
    assert_eq!(listed[0].1.created_at, 1_000);
    assert_eq!(offer_rows(&path), 2);
    // A purged item takes its record with it (handed off is an end state).
    assert_eq!(store.purge_ended_before(2_001).unwrap().len(), 1);
    assert_eq!(offer_rows(&path), 1);
    assert_eq!(store.hand_off_record(b.id).unwrap(), None);
}

/// Two connections (two Weirs on one file, or a double click racing itself): exactly one
/// confirmation moves the item and writes its row; the other is refused and writes nothing.
#[test]
fn of_two_connections_confirming_one_offer_exactly_one_wins() {
    let (_dir, path) = temp_db();
    let mut first = Store::open(&path).unwrap();
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(
            first
                .insert_offered(&new_item(n), 9_000, &json!({}), 1_000)
                .unwrap()
                .id,
        );
    }
    let racers: Vec<_> = ["one", "two"]
        .into_iter()
        .map(|who| {
            let path = path.clone();
            let ids = ids.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                ids.iter()
                    .filter(|id| store.hand_off(**id, &confirmed(who), 2_000).is_ok())
                    .map(|id| (*id, who))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut wins: Vec<(i64, &str)> = racers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    wins.sort();
    assert_eq!(wins.len(), ids.len(), "every offer confirmed");
    assert!(
        wins.windows(2).all(|w| w[0].0 != w[1].0),
        "none confirmed twice: {wins:?}"
    );
    for (id, who) in wins {
        let rec = first.hand_off_record(id).unwrap().unwrap();
        assert_eq!(
            rec.program.as_deref(),
            Some(who),
            "the winner's confirmation is kept"
        );
        assert_eq!(first.get(id).unwrap().unwrap().state, State::HandedOff);
    }
}

/// An item parked without an offer row (written by hand, or a file the migration found
/// nothing to move for): confirming it makes the row rather than losing the confirmation.
#[test]
fn a_parked_item_without_a_row_gets_one_when_confirmed() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let it = store.insert(&new_item(1), 1_000).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE queue_items SET state = 'offered', next_attempt_at = 7000 WHERE id = ?1",
            [it.id],
        )
        .unwrap();
    store.hand_off(it.id, &confirmed("aider"), 2_000).unwrap();
    let rec = store.hand_off_record(it.id).unwrap().unwrap();
    assert_eq!(
        (rec.offer, rec.expires_at, rec.running, rec.created_at),
        (json!({}), 7_000, true, 2_000)
    );
}

/// A schema-3 file (the hand-off's record in the item's `result`), opened by this version:
/// its items read, their records are typed rows, and the offer still expires and confirms.
/// Schema 3 is made by undoing migration 4 by hand on a fresh file.
#[test]
fn a_schema_3_file_with_offers_is_migrated_and_reads() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let offered = store.insert(&new_item(1), 1_000).unwrap();
    let handed = store.insert(&new_item(2), 1_000).unwrap();
    drop(store);
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("DROP TABLE handoff_offers; PRAGMA user_version = 3;")
        .unwrap();
    // As a schema-3 Weir wrote them.
    raw.execute(
        "UPDATE queue_items SET state = 'offered', next_attempt_at = 6000,
             result = '{\"handoff\":{\"rule\":\"r1\",\"requeue\":true,\"expires_at\":6000}}'
         WHERE id = ?1",
        [offered.id],
    )
    .unwrap();
    raw.execute(
        "UPDATE queue_items SET state = 'handed_off', next_attempt_at = 6000,
             result = '{\"handoff\":{\"rule\":\"r2\"},\"running\":true,\"program\":\"aider\",
                        \"confirmed_at\":\"2026-01-01T00:00:00Z\"}'
         WHERE id = ?1",
        [handed.id],
    )
    .unwrap();
    drop(raw);

    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), weir_store::SCHEMA_VERSION);
    let item = store.get(offered.id).unwrap().unwrap();
    assert_eq!((item.state, item.result), (State::Offered, None));
    let rec = store.hand_off_record(offered.id).unwrap().unwrap();
    assert_eq!(
        (rec.offer["rule"].clone(), rec.expires_at, rec.running),
        (json!("r1"), 6_000, false)
    );
    let rec = store.hand_off_record(handed.id).unwrap().unwrap();
    assert_eq!(
        (
            rec.running,
            rec.program.as_deref(),
            rec.confirmed_at.as_deref()
        ),
        (true, Some("aider"), Some("2026-01-01T00:00:00Z"))
    );
    // The moved offer works as a new one does.
    assert_eq!(
        store
            .expired_offers(6_000)
            .unwrap()
            .iter()
            .map(|i| i.id)
            .collect::<Vec<_>>(),
        [offered.id]
    );
    store
        .hand_off(offered.id, &confirmed("aider"), 7_000)
        .unwrap();
    let finish = Finish {
        outcome: Some(json!({"error": "interrupted"})),
        finished_at: None,
    };
    let rec = store
        .record_hand_off_result(handed.id, &finish, 7_000)
        .unwrap();
    assert_eq!(
        (rec.running, rec.program.as_deref()),
        (false, Some("aider"))
    );
}

/// The item's write and its offer row's are one transaction: when the row cannot be written
/// (here a trigger refuses it), the item is not inserted, or not moved, either.
#[test]
fn an_offer_row_that_cannot_be_written_undoes_the_items_change() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let it = store
        .insert_offered(&new_item(1), 9_000, &json!({}), 1_000)
        .unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER refuse_insert BEFORE INSERT ON handoff_offers
           BEGIN SELECT RAISE(ABORT, 'refused'); END;
         CREATE TRIGGER refuse_update BEFORE UPDATE ON handoff_offers
           BEGIN SELECT RAISE(ABORT, 'refused'); END;",
    )
    .unwrap();
    assert!(store
        .insert_offered(&new_item(2), 9_000, &json!({}), 1_000)
        .is_err());
    assert_eq!(
        store.counts().unwrap().total(),
        1,
        "no item without its row"
    );
    assert!(store.hand_off(it.id, &confirmed("aider"), 2_000).is_err());
    let item = store.get(it.id).unwrap().unwrap();
    assert_eq!((item.state, item.updated_at), (State::Offered, 1_000));
    // Once the row can be written, the same confirmation goes through.
    raw.execute_batch("DROP TRIGGER refuse_insert; DROP TRIGGER refuse_update;")
        .unwrap();
    store.hand_off(it.id, &confirmed("aider"), 2_000).unwrap();
    assert!(store.hand_off_record(it.id).unwrap().unwrap().running);
}
