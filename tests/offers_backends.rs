//! Hand-off offers in their own table (issue 21, item 3) on both queue backends, a real SQLite
//! file and a real PostgreSQL (`initdb` + `pg_ctl`): an offer is a parked item plus its offer
//! row, written together; of many confirmations racing (two replicas, or two connections)
//! exactly one wins and only its confirmation is recorded; the outcome, requeue, withdraw,
//! expiry and purge behave the same in both.

#[cfg(feature = "gateway")]
#[path = "common/pg.rs"]
mod pg;

use serde_json::json;
use std::sync::Arc;
use weir::queue_api::{open_sqlite, QueueBackend};
use weir_store::{Change, Confirmation, Finish, ListFilter, NewItem, State, StoreError};

fn new_item(key: &str) -> NewItem {
    NewItem {
        upstream: "copilot-api".into(),
        method: http::Method::POST,
        path_and_query: "/agents/swe/v1/jobs/o/r".into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"problem_statement":"x"}"#.to_vec(),
        identity: "ab".into(),
        credential_ref: None,
        dedupe_key: key.into(),
        repo: Some("o/r".into()),
        problem_statement: Some("x".into()),
        in_doubt: false,
        provisional: None,
    }
}

fn confirm(who: &str) -> Change {
    Change::HandOff {
        confirmation: Confirmation {
            program: Some(who.into()),
            confirmed_at: "2026-12-02T04:00:00Z".into(),
        },
    }
}

/// The life of offers, the same on each backend.
async fn offers_live_in_their_own_table(q: &dyn QueueBackend) {
    let offer = json!({"rule": "octo-local", "requeue": true});
    let a = q
        .insert_offered(new_item("a"), 5_000, offer.clone(), 1_000)
        .await
        .unwrap();
    assert_eq!((a.state, a.result.clone()), (State::Offered, None));
    let rec = q.hand_off_record(a.id).await.unwrap().unwrap();
    assert_eq!(
        (rec.item_id, &rec.offer, rec.expires_at, rec.running),
        (a.id, &offer, 5_000, false)
    );
    // It holds its dedupe key, and is never due.
    assert!(matches!(
        q.insert(new_item("a"), 1_001).await,
        Err(StoreError::Duplicate { existing_id }) if existing_id == a.id
    ));
    assert_eq!(
        q.claim_next(&"copilot-api".into(), i64::MAX).await.unwrap(),
        None
    );
    assert_eq!(q.counts().await.unwrap().offered, 1);
    assert!(q.expired_offers(4_999).await.unwrap().is_empty());
    let expired: Vec<i64> = q
        .expired_offers(5_000)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(expired, [a.id]);

    // Confirmed once: the item moves and its row records the confirmation, together.
    let handed = q.apply(a.id, confirm("aider"), 2_000).await.unwrap();
    assert_eq!(
        (handed.state, handed.last_attempt_at),
        (State::HandedOff, Some(2_000))
    );
    let rec = q.hand_off_record(a.id).await.unwrap().unwrap();
    assert_eq!(
        (
            rec.running,
            rec.program.as_deref(),
            rec.updated_at,
            rec.created_at
        ),
        (true, Some("aider"), 2_000, 1_000)
    );
    assert!(matches!(
        q.apply(a.id, confirm("again"), 2_001).await,
        Err(StoreError::IllegalTransition {
            from: State::HandedOff,
            ..
        })
    ));
    let rec = q.hand_off_record(a.id).await.unwrap().unwrap();
    assert_eq!(
        rec.program.as_deref(),
        Some("aider"),
        "the refused one wrote nothing"
    );

    let finish = Finish {
        outcome: Some(json!({"exit_code": 0, "output_tail": "ok"})),
        finished_at: Some("2026-12-02T04:01:00Z".into()),
    };
    let rec = q
        .record_hand_off_result(a.id, finish.clone(), 3_000)
        .await
        .unwrap();
    assert_eq!(
        (rec.running, rec.outcome.clone(), rec.finished_at.as_deref()),
        (false, finish.outcome.clone(), Some("2026-12-02T04:01:00Z"))
    );
    assert_eq!(q.get(a.id).await.unwrap().unwrap().updated_at, 3_000);

    // Declined with a create behind it: queued again, due now; made by hand: withdrawn.
    let b = q
        .insert_offered(new_item("b"), 9_000, json!({"requeue": true}), 1_000)
        .await
        .unwrap();
    let c = q
        .insert_offered(new_item("c"), 9_000, json!({"requeue": false}), 1_000)
        .await
        .unwrap();
    assert!(matches!(
        q.record_hand_off_result(b.id, finish.clone(), 3_000).await,
        Err(StoreError::NotFound { .. })
    ));
    let why = "declined".to_string();
    let b2 = q
        .apply(b.id, Change::Requeue { why: why.clone() }, 4_000)
        .await
        .unwrap();
    assert_eq!((b2.state, b2.next_attempt_at), (State::Queued, 4_000));
    let c2 = q
        .apply(c.id, Change::Withdraw { why }, 4_000)
        .await
        .unwrap();
    assert_eq!(c2.state, State::Cancelled);
    assert_eq!(
        q.hand_off_record(b.id).await.unwrap().unwrap().offer,
        json!({"requeue": true}),
        "the record of what was offered stays"
    );
    assert!(q.expired_offers(i64::MAX).await.unwrap().is_empty());

    let listed = q
        .list_offers(ListFilter {
            states: vec![State::Offered, State::HandedOff, State::Cancelled],
            limit: 10,
        })
        .await
        .unwrap();
    let got: Vec<_> = listed
        .iter()
        .map(|(i, r)| (i.id, i.state, r.item_id))
        .collect();
    assert_eq!(
        got,
        [
            (c.id, State::Cancelled, c.id),
            (a.id, State::HandedOff, a.id)
        ]
    );
    assert_eq!(listed[1].0, q.get(a.id).await.unwrap().unwrap());

    // Purged with their items (handed off and cancelled are end states).
    let purged = q.purge_ended_before(5_000).await.unwrap();
    assert_eq!(purged.len(), 2);
    assert_eq!(q.hand_off_record(a.id).await.unwrap(), None);
    assert_eq!(q.hand_off_record(c.id).await.unwrap(), None);
    assert!(
        q.hand_off_record(b.id).await.unwrap().is_some(),
        "b is live"
    );
}

/// An offered and a queued insert write the same row (one insert in PostgreSQL, `NewRow`)
/// but for the state and when the item is first due: every field of the create, the
/// provisional ids, `needs_lookup` from `in_doubt`, created and updated now, no attempt.
async fn an_offered_and_a_queued_insert_write_the_same_row(q: &dyn QueueBackend) {
    let full = |key: &str| NewItem {
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-github-api-version".into(), "2026-01-01".into()),
        ],
        credential_ref: Some(format!("cred-{key}")),
        in_doubt: true,
        provisional: Some(weir_store::Provisional {
            job_id: format!("job-{key}"),
            session_id: format!("session-{key}"),
        }),
        ..new_item(key)
    };
    let offered = q
        .insert_offered(full("same-o"), 8_000, json!({}), 1_500)
        .await
        .unwrap();
    let queued = q.insert(full("same-q"), 1_500).await.unwrap();
    assert_eq!(
        (offered.state, offered.next_attempt_at),
        (State::Offered, 8_000)
    );
    assert_eq!(
        (queued.state, queued.next_attempt_at),
        (State::InDoubt, 1_500)
    );
    let rec = q.hand_off_record(offered.id).await.unwrap().unwrap();
    assert_eq!(
        (rec.expires_at, rec.created_at, rec.updated_at),
        (8_000, 1_500, 1_500)
    );
    for (it, key) in [(&offered, "same-o"), (&queued, "same-q")] {
        let want = full(key);
        assert_eq!(
            (
                &it.upstream,
                &it.method,
                &it.path_and_query,
                &it.headers,
                &it.body,
                &it.identity,
                &it.credential_ref,
                &it.dedupe_key,
                &it.repo,
                &it.problem_statement,
            ),
            (
                &want.upstream,
                &want.method,
                &want.path_and_query,
                &want.headers,
                &want.body,
                &want.identity,
                &want.credential_ref,
                &want.dedupe_key,
                &want.repo,
                &want.problem_statement,
            )
        );
        assert_eq!(it.provisional, want.provisional);
        assert_eq!(
            (it.created_at, it.updated_at, it.attempts, it.needs_lookup),
            (1_500, 1_500, 0, true),
            "{key}"
        );
        assert_eq!(
            (it.last_attempt_at, &it.last_error, &it.result),
            (None, &None, &None)
        );
        assert_eq!(q.get(it.id).await.unwrap().as_ref(), Some(it));
    }
}

/// Many confirmations of each offer at once, from `backends` (two replicas of one queue):
/// each offer is handed off exactly once and its row holds the winner's confirmation.
async fn exactly_one_confirmation_wins(backends: Vec<Arc<dyn QueueBackend>>) {
    let q = backends[0].clone();
    let mut ids = Vec::new();
    for n in 0..10 {
        let it = q
            .insert_offered(new_item(&format!("race-{n}")), 9_000, json!({}), 1_000)
            .await
            .unwrap();
        ids.push(it.id);
    }
    let mut racers = Vec::new();
    for (b, backend) in backends.iter().enumerate() {
        for r in 0..3 {
            let backend = backend.clone();
            let ids = ids.clone();
            let who = format!("racer-{b}-{r}");
            racers.push(tokio::spawn(async move {
                let mut won = Vec::new();
                for id in ids {
                    if backend.apply(id, confirm(&who), 2_000).await.is_ok() {
                        won.push((id, who.clone()));
                    }
                }
                won
            }));
        }
    }
    let mut wins = Vec::new();
    for r in racers {
        wins.extend(r.await.unwrap());
    }
    wins.sort();
    assert_eq!(
        wins.len(),
        ids.len(),
        "each offer confirmed exactly once: {wins:?}"
    );
    assert!(wins.windows(2).all(|w| w[0].0 != w[1].0), "{wins:?}");
    for (id, who) in wins {
        let rec = q.hand_off_record(id).await.unwrap().unwrap();
        assert_eq!(rec.program.as_deref(), Some(who.as_str()));
        assert_eq!(q.get(id).await.unwrap().unwrap().state, State::HandedOff);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_offers_in_their_own_table() {
    let dir = tempfile::tempdir().unwrap();
    let q = open_sqlite(&dir.path().join("queue.sqlite3"))
        .await
        .unwrap();
    offers_live_in_their_own_table(q.as_ref()).await;
    // Two connections to one file (two Weirs): the file's lock decides.
    let path = dir.path().join("race.sqlite3");
    let one: Arc<dyn QueueBackend> = Arc::from(open_sqlite(&path).await.unwrap());
    let two: Arc<dyn QueueBackend> = Arc::from(open_sqlite(&path).await.unwrap());
    exactly_one_confirmation_wins(vec![one, two]).await;
    let q = open_sqlite(&dir.path().join("rows.sqlite3")).await.unwrap();
    an_offered_and_a_queued_insert_write_the_same_row(q.as_ref()).await;
}

#[cfg(feature = "gateway")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_offers_in_their_own_table() {
    use std::time::Duration;
    use weir::queue_api::open_postgres;
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let q = open_postgres(&pg.url(), Duration::from_secs(60))
        .await
        .unwrap();
    offers_live_in_their_own_table(q.as_ref()).await;
    // Two replicas of one shared queue.
    let one: Arc<dyn QueueBackend> = Arc::from(q);
    let two: Arc<dyn QueueBackend> = Arc::from(
        open_postgres(&pg.url(), Duration::from_secs(60))
            .await
            .unwrap(),
    );
    exactly_one_confirmation_wins(vec![one, two]).await;
    // The offers table and the parked states are in the shared schema; an offer row can
    // never point at no item.
    let raw = pg.client().await;
    let orphan = raw
        .execute(
            "INSERT INTO weir_handoff_offers (item_id, offer, expires_at, created_at,
                 updated_at) VALUES (999999, '{}', 1, 1, 1)",
            &[],
        )
        .await;
    assert!(orphan.is_err());

    // The item's write and its offer row's are one statement: when the row cannot be
    // written (a trigger refuses it), the item is not inserted, or not moved, either.
    let q = open_postgres(&pg.url(), Duration::from_secs(60))
        .await
        .unwrap();
    let it = q
        .insert_offered(new_item("atomic-1"), 9_000, json!({}), 1_000)
        .await
        .unwrap();
    raw.batch_execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
         CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON weir_handoff_offers
           FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .await
    .unwrap();
    let before = q.counts().await.unwrap().total();
    assert!(q
        .insert_offered(new_item("atomic-2"), 9_000, json!({}), 1_000)
        .await
        .is_err());
    assert_eq!(
        q.counts().await.unwrap().total(),
        before,
        "no item without its row"
    );
    assert!(q.apply(it.id, confirm("aider"), 2_000).await.is_err());
    let item = q.get(it.id).await.unwrap().unwrap();
    assert_eq!((item.state, item.updated_at), (State::Offered, 1_000));
    raw.batch_execute("DROP TRIGGER refuse ON weir_handoff_offers;")
        .await
        .unwrap();
    q.apply(it.id, confirm("aider"), 2_000).await.unwrap();
    assert!(q.hand_off_record(it.id).await.unwrap().unwrap().running);
    an_offered_and_a_queued_insert_write_the_same_row(q.as_ref()).await;
}

/// A shared queue at schema 5 (before the offers table; it took no offers) with items in it
/// is migrated to 6 by the next replica to start: its items read as before, and it now holds
/// offers. Schema 5 is made by undoing migration 6 by hand on a fresh database.
#[cfg(feature = "gateway")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_5_shared_queue_is_migrated_and_its_items_still_read() {
    use std::time::Duration;
    use weir::queue_api::open_postgres;
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let q = open_postgres(&pg.url(), Duration::from_secs(60))
        .await
        .unwrap();
    let queued = q.insert(new_item("old-1"), 1_000).await.unwrap();
    let done = q.insert(new_item("old-2"), 1_000).await.unwrap();
    q.apply(done.id, Change::Cancel, 1_500).await.unwrap();
    drop(q);
    let raw = pg.client().await;
    raw.batch_execute(
        "DROP TABLE weir_handoff_offers;
         ALTER TABLE weir_queue_items DROP CONSTRAINT weir_queue_items_state_check;
         ALTER TABLE weir_queue_items ADD CONSTRAINT weir_queue_items_state_check
           CHECK (state IN ('queued', 'replaying', 'in_doubt', 'done', 'failed', 'cancelled',
             'expired'));
         DROP INDEX weir_queue_items_live_key;
         CREATE UNIQUE INDEX weir_queue_items_live_key ON weir_queue_items (dedupe_key)
           WHERE state IN ('queued', 'replaying', 'in_doubt');
         DELETE FROM weir_schema_migrations WHERE version = 6;",
    )
    .await
    .unwrap();
    // Schema 5 refuses a parked state, as it did.
    assert!(raw
        .execute(
            "UPDATE weir_queue_items SET state = 'offered' WHERE id = $1",
            &[&queued.id]
        )
        .await
        .is_err());

    let q = open_postgres(&pg.url(), Duration::from_secs(60))
        .await
        .unwrap();
    let version: i32 = raw
        .query_one("SELECT MAX(version) FROM weir_schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 6);
    assert_eq!(q.get(queued.id).await.unwrap().unwrap(), queued);
    assert_eq!(
        q.get(done.id).await.unwrap().unwrap().state,
        State::Cancelled
    );
    assert_eq!(q.hand_off_record(queued.id).await.unwrap(), None);
    let offered = q
        .insert_offered(new_item("new"), 9_000, json!({"rule": "r"}), 2_000)
        .await
        .unwrap();
    assert_eq!(offered.state, State::Offered);
    // The offered item holds its key under the rebuilt index.
    assert!(matches!(
        q.insert(new_item("new"), 2_001).await,
        Err(StoreError::Duplicate { existing_id }) if existing_id == offered.id
    ));
}
