//! The transition table (`weir_store::TRANSITIONS`) run against both queue backends, a real
//! SQLite file and a real PostgreSQL (`initdb` + `pg_ctl` in a temp dir): every event from
//! every state either lands where the table says or is refused with `IllegalTransition`,
//! leaving the item as it was; the bulk moves (expire, recover) touch exactly the table's
//! from-states.

// The PostgreSQL half needs the `gateway` feature (the suite builds with all features); the
// SQLite half runs in every build.
#[cfg(feature = "gateway")]
#[path = "common/pg.rs"]
mod pg;

#[cfg(feature = "gateway")]
use std::time::Duration;
#[cfg(feature = "gateway")]
use weir::queue_api::open_postgres;
use weir::queue_api::{open_sqlite, QueueBackend};
use weir_store::{Change, Item, ItemResult, NewItem, State, StoreError, Transition};

/// Raw access to the backend's table, to put an item into any state.
enum Raw {
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "gateway")]
    Postgres(tokio_postgres::Client),
}

impl Raw {
    async fn set_state(&self, id: i64, state: State, needs_lookup: bool) {
        match self {
            Raw::Sqlite(c) => {
                c.execute(
                    "UPDATE queue_items SET state = ?2, needs_lookup = ?3 WHERE id = ?1",
                    rusqlite::params![id, state.as_str(), needs_lookup],
                )
                .unwrap();
            }
            #[cfg(feature = "gateway")]
            Raw::Postgres(c) => {
                c.execute(
                    "UPDATE weir_queue_items SET state = $2, needs_lookup = $3 WHERE id = $1",
                    &[&id, &state.as_str(), &needs_lookup],
                )
                .await
                .unwrap();
            }
        }
    }
}

fn new_item(key: &str) -> NewItem {
    NewItem {
        // An upstream of its own: the claim below takes exactly this item.
        upstream: key.into(),
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

/// A change for each item-level event (the bulk ones, expire and recover, are run apart).
fn change_for(ev: Transition) -> Option<Change> {
    Some(match ev {
        Transition::Replay => Change::Replay,
        Transition::Done => Change::Done {
            result: ItemResult {
                job_id: Some("j".into()),
                ..ItemResult::default()
            },
        },
        Transition::Fail => Change::Fail {
            reason: "no".into(),
            result: Some(ItemResult {
                status: Some(422),
                ..ItemResult::default()
            }),
        },
        Transition::Reschedule => Change::Reschedule {
            at: 50_000,
            error: "503".into(),
        },
        Transition::InDoubt => Change::InDoubt {
            at: 50_000,
            error: "reset".into(),
        },
        Transition::Cancel => Change::Cancel,
        Transition::Retry => Change::Retry,
        Transition::HandOff => Change::HandOff {
            confirmation: weir_store::Confirmation {
                program: Some("agent".into()),
                confirmed_at: "2026-12-02T04:00:00Z".into(),
            },
        },
        Transition::Requeue => Change::Requeue {
            why: "declined".into(),
        },
        Transition::Withdraw => Change::Withdraw {
            why: "declined".into(),
        },
        Transition::Expire | Transition::Recover => return None,
    })
}

/// A fresh item of its own (own dedupe key), claimed by this worker, then put in `state`.
async fn item_in(
    q: &dyn QueueBackend,
    raw: &Raw,
    key: &str,
    state: State,
    needs_lookup: bool,
) -> Item {
    let it = q.insert(new_item(key), 1_000).await.unwrap();
    // Claimed while queued, so a PostgreSQL `Replay` meets its lease-holder guard.
    let claimed = q.claim_next(&key.into(), 1_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, it.id);
    raw.set_state(it.id, state, needs_lookup).await;
    q.get(it.id).await.unwrap().unwrap()
}

/// The states a backend's schema holds: all of them in both (the shared queue stores
/// hand-off offers too since its schema 6).
fn states_of(_q: &dyn QueueBackend) -> Vec<State> {
    State::ALL.to_vec()
}

/// Walks every (state, event) pair; returns how many were legal.
async fn walk_the_table(q: &dyn QueueBackend, raw: &Raw) -> usize {
    let mut legal = 0;
    for ev in Transition::ALL {
        let Some(change) = change_for(ev) else {
            continue;
        };
        for from in states_of(q) {
            for needs_lookup in [false, true] {
                let key = format!("{ev:?}-{from}-{needs_lookup}");
                let before = item_in(q, raw, &key, from, needs_lookup).await;
                let got = q.apply(before.id, change.clone(), 2_000).await;
                match ev.target(from, needs_lookup) {
                    Some(to) => {
                        let after = got.unwrap_or_else(|e| panic!("{key}: {e}"));
                        assert_eq!(after.state, to, "{key}");
                        assert_eq!(after.updated_at, 2_000, "{key}");
                        legal += 1;
                    }
                    None => {
                        match got {
                            Err(StoreError::IllegalTransition { id, from: f, op }) => {
                                assert_eq!((id, f, op), (before.id, from, ev), "{key}")
                            }
                            other => panic!("{key}: expected IllegalTransition, got {other:?}"),
                        }
                        let unchanged = q.get(before.id).await.unwrap().unwrap();
                        assert_eq!(unchanged, before, "{key}: a refused event changed the item");
                    }
                }
            }
        }
    }
    // No such item: `NotFound`, for every event.
    for ev in Transition::ALL {
        if let Some(change) = change_for(ev) {
            let got = q.apply(999_999, change, 2_000).await;
            assert!(
                matches!(got, Err(StoreError::NotFound { id: 999_999 })),
                "{ev:?}: {got:?}"
            );
        }
    }
    legal
}

/// Expire and recover: exactly the table's from-states move, to the table's target.
async fn bulk_moves(q: &dyn QueueBackend, raw: &Raw) {
    let mut ids = Vec::new();
    for from in states_of(q) {
        let it = q
            .insert(new_item(&format!("bulk-{from}")), 1_000)
            .await
            .unwrap();
        raw.set_state(it.id, from, false).await;
        ids.push((from, it.id));
    }
    // (The table walk's items may move too: only this run's are compared.)
    let mine = |items: Vec<Item>| -> Vec<Item> {
        items
            .into_iter()
            .filter(|i| ids.iter().any(|(_, id)| *id == i.id))
            .collect()
    };
    let recovered = mine(q.recover_after_crash(3_000).await.unwrap());
    let want: Vec<i64> = ids
        .iter()
        .filter(|(s, _)| Transition::Recover.allowed_from().contains(s))
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(recovered.iter().map(|i| i.id).collect::<Vec<_>>(), want);
    assert!(recovered
        .iter()
        .all(|i| i.state == State::InDoubt && i.needs_lookup));

    for (from, id) in &ids {
        raw.set_state(*id, *from, false).await;
    }
    let expired = mine(q.expire_older_than(1_000, 5_000).await.unwrap());
    let want: Vec<i64> = ids
        .iter()
        .filter(|(s, _)| Transition::Expire.allowed_from().contains(s))
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(expired.iter().map(|i| i.id).collect::<Vec<_>>(), want);
    assert!(expired.iter().all(|i| i.state == State::Expired));
    for (from, id) in &ids {
        let now = q.get(*id).await.unwrap().unwrap().state;
        let moved = want.contains(id);
        assert_eq!(now, if moved { State::Expired } else { *from }, "{from}");
    }
}

/// Every legal (state, event) pair, counted from the table: both backends must reach them all.
fn legal_pairs(states: &[State]) -> usize {
    let mut n = 0;
    for ev in Transition::ALL {
        if change_for(ev).is_some() {
            for &from in states {
                for needs_lookup in [false, true] {
                    n += usize::from(ev.target(from, needs_lookup).is_some());
                }
            }
        }
    }
    n
}

#[tokio::test]
async fn sqlite_follows_the_transition_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.sqlite3");
    let q = open_sqlite(&path).await.unwrap();
    let raw = Raw::Sqlite(rusqlite::Connection::open(&path).unwrap());
    assert_eq!(states_of(q.as_ref()), State::ALL);
    let legal = legal_pairs(&State::ALL);
    assert_eq!(walk_the_table(q.as_ref(), &raw).await, legal);
    bulk_moves(q.as_ref(), &raw).await;
}

#[cfg(feature = "gateway")]
#[tokio::test]
async fn postgres_follows_the_transition_table() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let q = open_postgres(&pg.url(), Duration::from_secs(60))
        .await
        .unwrap();
    let raw = Raw::Postgres(pg.client().await);
    let legal = legal_pairs(&states_of(q.as_ref()));
    assert_eq!(walk_the_table(q.as_ref(), &raw).await, legal);
    bulk_moves(q.as_ref(), &raw).await;
}
