//! The queue's state machine as data: one table of (from-state, event, to-state) rows, the
//! typed [`Change`] each event carries, and the SQL both backends run, rendered from them (the
//! `WHERE state IN (…)` guard, the new-state expression and the assignments). SQLite
//! ([`crate::Store`]) and PostgreSQL (the engine's gateway queue) differ only in
//! [`Dialect::param`], so a transition cannot mean one thing in one backend and another in
//! the other.
//!
//! ```text
//! insert ─► queued ──Replay──► replaying ──Done──► done
//!             ▲  ▲                │  │  │
//!             │  └──Reschedule────┘  │  └──Fail──► failed ──Retry──► queued / in_doubt
//!             │                      │
//!             │           Recover / InDoubt
//!             │                      ▼
//!             └─(Retry)──────────  in_doubt ──Done (found upstream)──► done
//!                                    └──Replay (not found upstream)──► replaying
//! Cancel: queued | in_doubt | failed ─► cancelled      Expire: queued | in_doubt ─► expired
//!
//! local-agent hand-off (#14): the item is parked in `offered` / `handed_off`; its record is
//! a `handoff_offers` row pointing at it (crate::offer), written in the same transaction:
//! insert_offered ─► offered ──HandOff (confirmed, once)──► handed_off
//!  (+ offer row)       │ └──Requeue (declined / offer expired)──► queued     (+ confirmation)
//!                      └──Withdraw (declined / expired, nothing to send)──► cancelled
//! record_hand_off_result: the local agent's outcome, on the offer row of a handed_off item.
//! ```

use std::fmt;

use crate::item::{ItemResult, State};
use crate::offer::Confirmation;

/// An event that moves an item, as named in [`crate::StoreError::IllegalTransition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    Replay,
    Done,
    Fail,
    Reschedule,
    InDoubt,
    Cancel,
    Retry,
    Expire,
    Recover,
    HandOff,
    Requeue,
    Withdraw,
}

/// Where a transition leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    To(State),
    /// `queued`, or `in_doubt` when an earlier send may have reached the upstream
    /// (`needs_lookup`): a retried create is looked up before it is sent again.
    QueuedOrLookup,
}

use State::*;
use Target::{QueuedOrLookup, To};

/// Every legal transition. Anything not here is refused with `IllegalTransition`.
pub const TRANSITIONS: &[(State, Transition, Target)] = &[
    (Queued, Transition::Replay, To(Replaying)),
    // Only after the caller looked the create up upstream and did not find it.
    (InDoubt, Transition::Replay, To(Replaying)),
    (Replaying, Transition::Done, To(Done)),
    (InDoubt, Transition::Done, To(Done)),
    (Queued, Transition::Fail, To(Failed)),
    (Replaying, Transition::Fail, To(Failed)),
    (InDoubt, Transition::Fail, To(Failed)),
    (Queued, Transition::Reschedule, To(Queued)),
    // Only when the attempt certainly did not reach the upstream.
    (Replaying, Transition::Reschedule, To(Queued)),
    // A failed lookup stays in doubt.
    (InDoubt, Transition::Reschedule, To(InDoubt)),
    (Replaying, Transition::InDoubt, To(InDoubt)),
    (Queued, Transition::Cancel, To(Cancelled)),
    (InDoubt, Transition::Cancel, To(Cancelled)),
    (Failed, Transition::Cancel, To(Cancelled)),
    (Failed, Transition::Retry, QueuedOrLookup),
    (Expired, Transition::Retry, QueuedOrLookup),
    (Cancelled, Transition::Retry, QueuedOrLookup),
    (Queued, Transition::Expire, To(Expired)),
    (InDoubt, Transition::Expire, To(Expired)),
    (Replaying, Transition::Recover, To(InDoubt)),
    (Offered, Transition::HandOff, To(HandedOff)),
    (Offered, Transition::Requeue, To(Queued)),
    (Offered, Transition::Withdraw, To(Cancelled)),
];

impl Transition {
    /// Every event, for tests that walk the whole table.
    pub const ALL: [Transition; 12] = [
        Transition::Replay,
        Transition::Done,
        Transition::Fail,
        Transition::Reschedule,
        Transition::InDoubt,
        Transition::Cancel,
        Transition::Retry,
        Transition::Expire,
        Transition::Recover,
        Transition::HandOff,
        Transition::Requeue,
        Transition::Withdraw,
    ];

    fn rows(self) -> impl Iterator<Item = (State, Target)> {
        TRANSITIONS
            .iter()
            .filter(move |(_, ev, _)| *ev == self)
            .map(|(from, _, to)| (*from, *to))
    }

    /// The states an item may be in for this event, in table order.
    pub fn allowed_from(self) -> Vec<State> {
        self.rows().map(|(from, _)| from).collect()
    }

    /// The state an item in `from` goes to, or `None` when the event is illegal there.
    pub fn target(self, from: State, needs_lookup: bool) -> Option<State> {
        self.rows()
            .find(|(f, _)| *f == from)
            .map(|(_, to)| match to {
                To(s) => s,
                QueuedOrLookup if needs_lookup => InDoubt,
                QueuedOrLookup => Queued,
            })
    }

    /// `state IN ('queued', 'in_doubt')`: the guard of this event's UPDATE. The names come
    /// from the enum, never from input.
    pub fn guard_sql(self) -> String {
        format!("state IN ({})", state_list(&self.allowed_from()))
    }

    /// The new state as an SQL expression over the old row (`state`, `needs_lookup`): a
    /// literal when every row leads to one state, else a `CASE` rendered from the table.
    pub fn state_sql(self) -> String {
        let rows: Vec<(State, Target)> = self.rows().collect();
        let target_sql = |t: Target| match t {
            To(s) => format!("'{}'", s.as_str()),
            QueuedOrLookup => "CASE WHEN needs_lookup THEN 'in_doubt' ELSE 'queued' END".into(),
        };
        match rows.first() {
            Some((_, first)) if rows.iter().all(|(_, t)| t == first) => target_sql(*first),
            _ => {
                let arms: String = rows
                    .iter()
                    .map(|(from, to)| format!(" WHEN '{}' THEN {}", from.as_str(), target_sql(*to)))
                    .collect();
                format!("CASE state{arms} END")
            }
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transition::Replay => "start a replay",
            Transition::Done => "mark it done",
            Transition::Fail => "mark it failed",
            Transition::Reschedule => "reschedule it",
            Transition::InDoubt => "mark it in doubt",
            Transition::Cancel => "cancel it",
            Transition::Retry => "retry it",
            Transition::Expire => "expire it",
            Transition::Recover => "recover it",
            Transition::HandOff => "hand it to the local agent",
            Transition::Requeue => "put it back in the queue",
            Transition::Withdraw => "withdraw the offer",
        })
    }
}

/// One item's state change with what it records. Times are the caller's unix ms.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// queued | in_doubt → replaying; counts an attempt, clears `needs_lookup`.
    Replay,
    /// → done, recording what was created (job id, session id, PR).
    Done {
        result: ItemResult,
    },
    /// → failed (a definite, permanent error); `result`, when given, keeps what the upstream
    /// answered so a provisional job can report it in the upstream's own shape.
    Fail {
        reason: String,
        result: Option<ItemResult>,
    },
    /// Try again at `at`; from `replaying` back to `queued` (the attempt certainly did not
    /// reach the upstream), otherwise the state is kept.
    Reschedule {
        at: i64,
        error: String,
    },
    /// replaying → in_doubt: the send may have reached the upstream; looked up before any
    /// new send.
    InDoubt {
        at: i64,
        error: String,
    },
    Cancel,
    /// → queued (or in_doubt), due now, with a fresh attempt count.
    Retry,
    /// offered → handed_off; the confirmation goes to the item's offer row
    /// ([`Change::offer_write`]), in the same transaction.
    HandOff {
        confirmation: Confirmation,
    },
    /// offered → queued, due now; `why` goes to `last_error`. The offer row stays (the record
    /// of what was offered); `result` is cleared, as it was when it held the offer.
    Requeue {
        why: String,
    },
    /// offered → cancelled; `why` goes to `last_error`.
    Withdraw {
        why: String,
    },
}

/// A value an assignment binds (or, [`Value::Sql`], writes as SQL).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Text(String),
    Bool(bool),
    /// Written as `NULL` (never bound).
    Null,
    /// An expression over the old row, e.g. `attempts + 1`. Never built from input.
    Sql(String),
}

/// How a backend writes bind parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The `n`th (1-based) bind parameter.
    pub fn param(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }
}

/// A rendered statement and its binds; `?1`/`$1` is always the item id.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    /// Binds `2..`, in order.
    pub binds: Vec<Value>,
}

impl Change {
    pub fn event(&self) -> Transition {
        match self {
            Change::Replay => Transition::Replay,
            Change::Done { .. } => Transition::Done,
            Change::Fail { .. } => Transition::Fail,
            Change::Reschedule { .. } => Transition::Reschedule,
            Change::InDoubt { .. } => Transition::InDoubt,
            Change::Cancel => Transition::Cancel,
            Change::Retry => Transition::Retry,
            Change::HandOff { .. } => Transition::HandOff,
            Change::Requeue { .. } => Transition::Requeue,
            Change::Withdraw { .. } => Transition::Withdraw,
        }
    }

    /// The columns this change writes besides `state`, in a fixed order.
    pub fn assignments(&self, now_ms: i64) -> Vec<(&'static str, Value)> {
        use Value::{Bool, Int, Null, Sql, Text};
        let json = |v: &ItemResult| Text(crate::item::result_json(v));
        let mut sets = match self {
            Change::Replay => vec![
                ("attempts", Sql("attempts + 1".into())),
                ("last_attempt_at", Int(now_ms)),
                ("needs_lookup", Bool(false)),
            ],
            Change::Done { result } => vec![("result", json(result))],
            Change::Fail { reason, result } => {
                let mut s = vec![("last_error", Text(reason.clone()))];
                if let Some(r) = result {
                    s.push(("result", json(r)));
                }
                s
            }
            Change::Reschedule { at, error } => vec![
                ("next_attempt_at", Int(*at)),
                ("last_error", Text(error.clone())),
            ],
            Change::InDoubt { at, error } => vec![
                ("needs_lookup", Bool(true)),
                ("next_attempt_at", Int(*at)),
                ("last_error", Text(error.clone())),
            ],
            Change::Cancel => vec![],
            // A constant, not a bind: `attempts` is INTEGER in PostgreSQL, binds are BIGINT.
            Change::Retry => vec![
                ("attempts", Sql("0".into())),
                ("next_attempt_at", Int(now_ms)),
            ],
            Change::HandOff { .. } => vec![("last_attempt_at", Int(now_ms))],
            Change::Requeue { why } => vec![
                ("result", Null),
                ("next_attempt_at", Int(now_ms)),
                ("last_error", Text(why.clone())),
            ],
            Change::Withdraw { why } => vec![("last_error", Text(why.clone()))],
        };
        sets.push(("updated_at", Int(now_ms)));
        sets
    }

    /// `UPDATE {table} SET state = …, … WHERE id = ?1 AND state IN (…) {extra_where}
    /// RETURNING {columns}`. `extra_sets` (e.g. a lease) are appended to the assignments;
    /// `extra_where` are `column = value` guards (e.g. the lease holder).
    pub fn update(
        &self,
        dialect: Dialect,
        table: &str,
        columns: &str,
        now_ms: i64,
        extra_sets: Vec<(&'static str, Value)>,
        extra_where: Vec<(&'static str, Value)>,
    ) -> Statement {
        let ev = self.event();
        let mut binds = Vec::new();
        let mut render = |col: &str, v: Value| match v {
            Value::Sql(expr) => format!("{col} = {expr}"),
            // Untyped NULL is written, not bound: PostgreSQL checks a bind's type.
            Value::Null => format!("{col} = NULL"),
            v => {
                binds.push(v);
                format!("{col} = {}", dialect.param(binds.len() + 1))
            }
        };
        let mut sets = vec![format!("state = {}", ev.state_sql())];
        let assignments = self.assignments(now_ms).into_iter().chain(extra_sets);
        sets.extend(assignments.map(|(c, v)| render(c, v)));
        let guards: String = extra_where
            .into_iter()
            .map(|(c, v)| format!(" AND {}", render(c, v)))
            .collect();
        let sql = format!(
            "UPDATE {table} SET {} WHERE id = {} AND {}{guards} RETURNING {columns}",
            sets.join(", "),
            dialect.param(1),
            ev.guard_sql(),
        );
        Statement { sql, binds }
    }
}

/// `'queued', 'in_doubt'` for an IN clause.
pub(crate) fn state_list(states: &[State]) -> String {
    states
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_has_one_row_per_from_state_and_ends_nowhere_illegal() {
        for ev in Transition::ALL {
            let from = ev.allowed_from();
            assert!(!from.is_empty(), "{ev:?} has no row");
            let mut dedup = from.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(dedup.len(), from.len(), "{ev:?} lists a from-state twice");
        }
        // Ended items only leave through a retry by hand.
        for (from, ev, _) in TRANSITIONS {
            if from.is_end() {
                assert!(
                    matches!(ev, Transition::Retry | Transition::Cancel),
                    "{from} --{ev:?}"
                );
            }
        }
    }

    #[test]
    fn targets_come_from_the_table() {
        assert_eq!(Transition::Replay.target(InDoubt, true), Some(Replaying));
        assert_eq!(
            Transition::Reschedule.target(Replaying, false),
            Some(Queued)
        );
        assert_eq!(Transition::Reschedule.target(InDoubt, true), Some(InDoubt));
        assert_eq!(Transition::Retry.target(Failed, true), Some(InDoubt));
        assert_eq!(Transition::Retry.target(Failed, false), Some(Queued));
        assert_eq!(Transition::Done.target(Queued, false), None);
        assert_eq!(Transition::HandOff.target(HandedOff, false), None);
    }

    #[test]
    fn the_rendered_update_differs_between_backends_only_in_parameters() {
        let change = Change::Reschedule {
            at: 5,
            error: "e".into(),
        };
        let lite = change.update(Dialect::Sqlite, "t", "id", 9, vec![], vec![]);
        let pg = change.update(Dialect::Postgres, "t", "id", 9, vec![], vec![]);
        assert_eq!(
            lite.sql,
            "UPDATE t SET state = CASE state WHEN 'queued' THEN 'queued' WHEN 'replaying' \
             THEN 'queued' WHEN 'in_doubt' THEN 'in_doubt' END, next_attempt_at = ?2, \
             last_error = ?3, updated_at = ?4 WHERE id = ?1 AND state IN ('queued', \
             'replaying', 'in_doubt') RETURNING id"
        );
        assert_eq!(lite.sql.replace('?', "$"), pg.sql);
        assert_eq!(
            lite.binds,
            [Value::Int(5), Value::Text("e".into()), Value::Int(9)]
        );
        let replay = Change::Replay.update(
            Dialect::Postgres,
            "t",
            "id",
            1,
            vec![("lease_until", Value::Sql("now() + 1".into()))],
            vec![("lease_owner", Value::Text("me".into()))],
        );
        assert!(
            replay.sql.contains(
                "attempts = attempts + 1, last_attempt_at = $2, needs_lookup = $3, \
                 updated_at = $4, lease_until = now() + 1 WHERE id = $1 AND state IN \
                 ('queued', 'in_doubt') AND lease_owner = $5"
            ),
            "{}",
            replay.sql
        );
    }
}
