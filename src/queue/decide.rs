//! The replay's decisions, pure: what the worker learned about an item ([`Fact`]) becomes the
//! next [`Step`] (record a [`Change`] and announce it, wait, or go on). No clock, no I/O and
//! no randomness here (the caller passes `now` and the jitter it drew), so every rule of
//! [`super::replay`] is unit-tested below; `Replayer::apply` carries a step out the one way.

use super::lookup::Lookup;
use bytes::Bytes;
use http::StatusCode;
use std::time::Duration;
use weir_resilience::Backoff;
use weir_store::{Change, Item, ItemResult, State};

/// The pause after a step the store recorded.
pub(super) const PACE: Duration = Duration::from_millis(200);
/// How long a queued create waits after a retryable failure: doubling from 1 s to about a
/// minute, plus up to 1 s of jitter so replays from many items do not line up.
pub(super) const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(64));
/// Failed and expired items (and their credentials) are kept this long for `retry`.
pub const KEEP_ENDED: Duration = Duration::from_secs(7 * 24 * 3600);
/// A lookup that could not be read is tried again after this long.
const LOOKUP_AGAIN_MS: i64 = 5_000;
/// A closed gate (breaker open, rate limited) is asked again after this long.
const GATE_AGAIN: Duration = Duration::from_secs(1);

/// What the worker learned about an item, in the order it learns it.
#[derive(Debug)]
pub(super) enum Fact {
    /// Cache only or offline: nothing goes upstream, replays included.
    Held,
    /// The secret store has no entry for the item's credential, and no stored token of the
    /// same account stood in.
    CredentialGone,
    /// The secret store could not answer (locked, slow, unreachable): the credential may well
    /// be there.
    CredentialWait(String),
    /// The in-doubt lookup's answer, made with the item's own credential or, `stored_token`,
    /// with the stored GitHub token of the same account (which only ever looks, never sends).
    Lookup { found: Lookup, stored_token: bool },
    /// The upstream's gate did not admit the send.
    GateClosed,
    /// The stored path does not make a URL.
    BadUrl(String),
    /// The item was marked replaying and sent; what came back.
    Sent(Outcome),
}

/// The answer to a replayed create.
#[derive(Debug)]
pub(super) enum Outcome {
    /// 2xx: created.
    Created { status: StatusCode, body: Bytes },
    /// 5xx, 429 and the like: try again, not before the upstream's own wait (`hint`).
    Retryable {
        status: StatusCode,
        hint: Option<Duration>,
    },
    /// A definite refusal (4xx): the upstream will not take it.
    Refused { status: StatusCode, body: Bytes },
    /// Never reached the upstream (not connected): it certainly did not arrive.
    NotSent(String),
    /// Failed after it may have reached the upstream.
    MaybeSent(String),
}

/// What to do next.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Record `change` and announce the item's new state with `detail`, then pace.
    /// (Boxed: a change with a result is a few hundred bytes, the other steps a few words.)
    Record { change: Box<Change>, detail: String },
    /// Record nothing and look again after `wait`; `release` gives a claim back (a shared
    /// queue's other replicas may take the item meanwhile).
    Wait { wait: Duration, release: bool },
    /// Nothing stops it: go on to the send.
    Send,
}

fn record(change: Change, detail: impl Into<String>) -> Step {
    Step::Record {
        change: Box::new(change),
        detail: detail.into(),
    }
}

fn fail(reason: impl Into<String>, detail: &str) -> Step {
    let reason = reason.into();
    record(
        Change::Fail {
            reason,
            result: None,
        },
        detail,
    )
}

/// Whether an item may already exist upstream and must be looked up before any send.
pub(super) fn needs_lookup(item: &Item) -> bool {
    item.state == State::InDoubt || item.needs_lookup
}

/// When an item that could not go now is due again: the one backoff ([`RETRY`], by its
/// attempts, plus `jitter`), or the upstream's own wait when longer.
pub(super) fn retry_at(item: &Item, now: i64, hint: Option<Duration>, jitter: Duration) -> i64 {
    let wait = RETRY.ceiling(item.attempts) + jitter;
    let wait = hint.map_or(wait, |h| h.max(wait)).min(KEEP_ENDED);
    now.saturating_add(wait.as_millis() as i64)
}

/// The next step for `item` after `fact`, at `now` (unix ms), with `jitter` added to a
/// backoff.
pub(super) fn decide(item: &Item, fact: Fact, now: i64, jitter: Duration) -> Step {
    let again = |error: String, hint| Change::Reschedule {
        at: retry_at(item, now, hint, jitter),
        error,
    };
    match fact {
        Fact::Held => Step::Wait {
            wait: Duration::ZERO,
            release: false,
        },
        Fact::CredentialGone
        | Fact::Lookup {
            found: Lookup::Unverifiable,
            stored_token: true,
        } => fail(
            "the replay credential is gone (keychain entry missing or Weir restarted with \
             in-memory credentials)",
            "failed: credential missing",
        ),
        Fact::CredentialWait(e) => {
            let detail = format!("waiting for keychain: {e}");
            record(again(detail.clone(), None), detail)
        }
        Fact::Lookup {
            found,
            stored_token,
        } => decide_lookup(found, stored_token, now),
        Fact::GateClosed => Step::Wait {
            wait: GATE_AGAIN,
            release: true,
        },
        Fact::BadUrl(e) => fail(
            format!("cannot build the replay URL: {e}"),
            "failed: bad URL",
        ),
        Fact::Sent(Outcome::Created { status, body }) => record(
            Change::Done {
                result: summarise(status.as_u16(), &body),
            },
            "done: replayed",
        ),
        Fact::Sent(Outcome::Retryable { status, hint }) => {
            let detail = format!("upstream answered {status}");
            record(again(detail.clone(), hint), format!("queued: {detail}"))
        }
        Fact::Sent(Outcome::Refused { status, body }) => {
            let snippet = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            let reason = format!("upstream refused it: {status} {snippet}");
            // Kept so the provisional job reports it in the upstream's error shape.
            let result = Some(refusal(status.as_u16(), &body, &reason));
            record(Change::Fail { reason, result }, "failed: refused upstream")
        }
        Fact::Sent(Outcome::NotSent(e)) => {
            record(again(e.clone(), None), format!("queued: not sent ({e})"))
        }
        Fact::Sent(Outcome::MaybeSent(e)) => record(
            Change::InDoubt {
                at: retry_at(item, now, None, jitter),
                error: e,
            },
            "in doubt: the attempt may have reached the upstream",
        ),
    }
}

fn decide_lookup(found: Lookup, stored_token: bool, now: i64) -> Step {
    match (found, stored_token) {
        (Lookup::Found(result), false) => record(
            Change::Done { result: *result },
            "done: found upstream, not sent again",
        ),
        (Lookup::Found(result), true) => record(
            Change::Done { result: *result },
            "done: found upstream with the stored token of the same account, not sent again",
        ),
        (Lookup::NotFound, false) => Step::Send,
        // The stored token only ever looks: a create it cannot find is not sent with it.
        (Lookup::NotFound, true) => fail(
            "the replay credential is gone and the stored token of the same account found no \
             such session; not replayed (the stored token is only used to look)",
            "failed: credential missing, not found upstream",
        ),
        (Lookup::Unverifiable, _) => fail(
            "in doubt and cannot be verified upstream (no repository or problem statement); \
             not replayed to avoid a double create — retry it by hand if it did not happen",
            "failed: in doubt",
        ),
        // The lookups' budget for this credential is spent: the item waits, still in doubt,
        // for the next window (rescheduled, so other items are not held behind it).
        (Lookup::Deferred(wait), _) => record(
            Change::Reschedule {
                at: now + wait.as_millis() as i64,
                error: "lookup deferred: this credential's in-doubt lookups used the window's reads ([queue] lookup_reads)".into(),
            },
            "in doubt: lookup deferred to the next window",
        ),
        // The gate is closed: nothing was asked.
        (Lookup::NotNow, _) => Step::Wait {
            wait: GATE_AGAIN,
            release: true,
        },
        (Lookup::Unknown(e), stored_token) => {
            let with = if stored_token {
                " with the stored token"
            } else {
                ""
            };
            let error = format!("lookup{with} failed: {e}");
            let change = Change::Reschedule {
                at: now + LOOKUP_AGAIN_MS,
                error: error.clone(),
            };
            record(change, format!("in doubt: {error}"))
        }
    }
}

/// What the upstream said when it refused a replay: its status and message (the jobs API's
/// error, `{"message"}` or `{"error": {"message"}}`, else Weir's description).
pub(super) fn refusal(status: u16, body: &[u8], detail: &str) -> ItemResult {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = v
        .get("message")
        .or_else(|| v.get("error").and_then(|e| e.get("message")))
        .and_then(|m| m.as_str())
        .map_or_else(|| detail.to_string(), str::to_string);
    ItemResult {
        status: Some(status),
        message: Some(message),
        ..ItemResult::default()
    }
}

/// What the upstream said it created: job id, session id, PR when present.
pub(super) fn summarise(status: u16, body: &[u8]) -> ItemResult {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let pick = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k).filter(|x| !x.is_null()));
    ItemResult {
        status: Some(status),
        job_id: pick(&["job_id", "id"]).and_then(ItemResult::id_text),
        session_id: pick(&["session_id"]).and_then(ItemResult::id_text),
        pull_request: pick(&["pull_request", "pr", "pull_request_url"]).cloned(),
        ..ItemResult::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(state: State, attempts: u32) -> Item {
        Item {
            id: 7,
            upstream: "copilot".into(),
            method: http::Method::POST,
            path_and_query: "/agents/swe/v1/jobs/o/r".into(),
            headers: vec![],
            body: b"{}".to_vec(),
            identity: "ab".into(),
            credential_ref: Some("acct".into()),
            dedupe_key: "k".into(),
            repo: Some("o/r".into()),
            problem_statement: Some("fix it".into()),
            state,
            created_at: 0,
            attempts,
            next_attempt_at: 0,
            last_attempt_at: None,
            last_error: None,
            result: None,
            updated_at: 0,
            needs_lookup: state == State::InDoubt,
            provisional: None,
        }
    }

    const NOW: i64 = 1_000_000;
    const NO_JITTER: Duration = Duration::ZERO;

    fn change_of(step: Step) -> Change {
        match step {
            Step::Record { change, .. } => *change,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    #[test]
    fn answers_become_done_requeued_failed_or_in_doubt() {
        let it = item(State::Replaying, 1);
        let sent = |s| decide(&it, Fact::Sent(s), NOW, NO_JITTER);
        let body = Bytes::from_static(br#"{"job_id":"j1","session_id":"s1"}"#);
        let done = change_of(sent(Outcome::Created {
            status: StatusCode::CREATED,
            body,
        }));
        assert_eq!(
            done,
            Change::Done {
                result: ItemResult {
                    status: Some(201),
                    job_id: Some("j1".into()),
                    session_id: Some("s1".into()),
                    ..ItemResult::default()
                }
            }
        );
        // One attempt so far: the backoff's ceiling for it, no jitter.
        let first_wait = NOW + RETRY.ceiling(1).as_millis() as i64;
        assert_eq!(
            change_of(sent(Outcome::NotSent("refused".into()))),
            Change::Reschedule {
                at: first_wait,
                error: "refused".into()
            }
        );
        assert_eq!(
            change_of(sent(Outcome::MaybeSent("reset".into()))),
            Change::InDoubt {
                at: first_wait,
                error: "reset".into()
            }
        );
        // The upstream's own wait wins when longer; never beyond the keep time.
        let hinted = |h| {
            change_of(sent(Outcome::Retryable {
                status: StatusCode::TOO_MANY_REQUESTS,
                hint: Some(h),
            }))
        };
        assert!(matches!(hinted(Duration::from_secs(600)),
            Change::Reschedule { at, .. } if at == NOW + 600_000));
        assert!(matches!(hinted(Duration::from_secs(1)),
            Change::Reschedule { at, .. } if at == first_wait));
        assert!(matches!(hinted(KEEP_ENDED * 2),
            Change::Reschedule { at, .. } if at == NOW + KEEP_ENDED.as_millis() as i64));
        let refused = change_of(sent(Outcome::Refused {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body: Bytes::from_static(br#"{"message":"no such repo"}"#),
        }));
        let Change::Fail {
            reason,
            result: Some(result),
        } = refused
        else {
            panic!("{refused:?}")
        };
        assert!(reason.starts_with("upstream refused it: 422"), "{reason}");
        assert_eq!(
            (result.status, result.message.as_deref()),
            (Some(422), Some("no such repo"))
        );
    }

    #[test]
    fn the_jitter_and_the_attempts_move_the_retry_time() {
        let later = item(State::Replaying, 4);
        let step = decide(
            &later,
            Fact::Sent(Outcome::NotSent("x".into())),
            NOW,
            Duration::from_millis(300),
        );
        assert!(matches!(change_of(step), Change::Reschedule { at, .. }
            if at == NOW + (RETRY.ceiling(4) + Duration::from_millis(300)).as_millis() as i64));
        assert!(RETRY.ceiling(4) > RETRY.ceiling(1));
    }

    #[test]
    fn an_in_doubt_item_is_sent_only_when_its_own_credential_found_nothing() {
        let it = item(State::InDoubt, 1);
        let look = |found, stored_token| {
            decide(
                &it,
                Fact::Lookup {
                    found,
                    stored_token,
                },
                NOW,
                NO_JITTER,
            )
        };
        assert_eq!(look(Lookup::NotFound, false), Step::Send);
        assert!(matches!(
            change_of(look(Lookup::NotFound, true)),
            Change::Fail { .. }
        ));
        let found = ItemResult {
            found_by_lookup: true,
            ..ItemResult::default()
        };
        for stored in [false, true] {
            assert_eq!(
                change_of(look(Lookup::Found(Box::new(found.clone())), stored)),
                Change::Done {
                    result: found.clone()
                }
            );
            assert!(matches!(
                change_of(look(Lookup::Unverifiable, stored)),
                Change::Fail { result: None, .. }
            ));
            assert_eq!(
                look(Lookup::NotNow, stored),
                Step::Wait {
                    wait: GATE_AGAIN,
                    release: true
                }
            );
            assert!(matches!(
                change_of(look(Lookup::Unknown("503".into()), stored)),
                Change::Reschedule { at, .. } if at == NOW + LOOKUP_AGAIN_MS
            ));
        }
        assert!(needs_lookup(&it));
        let mut queued = item(State::Queued, 0);
        assert!(!needs_lookup(&queued));
        queued.needs_lookup = true;
        assert!(needs_lookup(&queued), "a retried in-doubt item");
    }

    #[test]
    fn nothing_is_recorded_while_held_or_gated_and_a_keychain_wait_never_fails() {
        let it = item(State::Queued, 0);
        assert_eq!(
            decide(&it, Fact::Held, NOW, NO_JITTER),
            Step::Wait {
                wait: Duration::ZERO,
                release: false
            }
        );
        assert!(matches!(
            decide(&it, Fact::GateClosed, NOW, NO_JITTER),
            Step::Wait { release: true, .. }
        ));
        let wait = decide(&it, Fact::CredentialWait("locked".into()), NOW, NO_JITTER);
        assert!(matches!(&wait, Step::Record { change, detail }
            if matches!(change.as_ref(), Change::Reschedule { error, .. } if error == "waiting for keychain: locked" && detail == error)));
        assert!(matches!(
            change_of(decide(&it, Fact::CredentialGone, NOW, NO_JITTER)),
            Change::Fail { result: None, .. }
        ));
        assert!(matches!(
            change_of(decide(&it, Fact::BadUrl("bad".into()), NOW, NO_JITTER)),
            Change::Fail { reason, .. } if reason == "cannot build the replay URL: bad"
        ));
    }
}
