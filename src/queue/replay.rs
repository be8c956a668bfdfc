//! The replay worker: one per upstream, oldest first, one at a time, paced. It sends a queued
//! create only when the upstream's gate admits it (breaker closed, or a half-open probe), and
//! never while the mode holds upstream calls (cache only, offline): it waits for the mode to
//! end, then replays what was queued meanwhile, each item once.
//!
//! **The in-doubt rule.** An item whose replay was in flight when Weir died (or whose attempt
//! timed out after it was sent) is `in_doubt`. Before sending it again Weir lists the
//! repository's sessions upstream with the item's credential, as the real clients list them
//! (`GET /agents/sessions?page_number=N&page_size=50&repo_nwo=OWNER%2FREPO&sort=last_updated_at%2Cdesc`),
//! through the window that can hold the create (sessions created no earlier than 60 s before
//! the item's last attempt), and confirms each candidate by the job behind it
//! (`GET /agents/swe/v1/jobs/OWNER/REPO/session/ID`), whose `problem_statement` must equal
//! the item's. Found: the item is marked `done` with that job and session; not found: it is
//! replayed; the list cannot be read (or the window is larger than the lookup's bound): it
//! stays `in_doubt` and is tried later. See [`super::lookup`]. An in-doubt item without a
//! repository or problem statement cannot be verified, so it is marked `failed` (never
//! replayed blind) and the user can `weir queue retry` it.
//!
//! **Credentials.** When an in-doubt item's own credential is gone, the lookup uses the stored
//! GitHub token of the same account instead (see [`super::lookup`]); without one the item is
//! failed. An item's keychain entry is deleted when the item is `done` or cancelled,
//! and when a failed or expired item is purged (after [`KEEP_ENDED`]); until then `weir queue
//! retry` can still send it.

use super::lookup::Lookup;
use super::{event, now_ms, Queue, QueueState};
use crate::config::RouteClass;
use crate::events::Bus;
use crate::mode::{Behaviour, Modes};
use crate::secrets::SecretError;
use crate::upstream::{AttemptPolicy, Replayable, Upstreams};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Uri};
use std::sync::Arc;
use std::time::Duration;
use weir_resilience::{classify_response, Backoff, FullJitter, Jitter, Kind};
use weir_store::{Item, State};

const PACE: Duration = Duration::from_millis(200);
/// How long a worker waits after the store failed to record a step (the item is still due, so
/// going on at [`PACE`] would spin on it).
const STORE_TROUBLE: Duration = Duration::from_secs(5);
/// How long a queued create waits after a retryable failure: doubling from 1 s to about a
/// minute, plus up to 1 s of jitter so replays from many items do not line up.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(64));
/// Failed and expired items (and their credentials) are kept this long for `retry`.
pub const KEEP_ENDED: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a replay worker works with: the queue, the upstreams' shared admission and attempt
/// machinery, and the event bus.
#[derive(Clone)]
pub(crate) struct Replayer {
    pub queue: Arc<QueueState>,
    /// Whose account an item's credential was, for the stored-token stand-in (see
    /// [`super::lookup`]).
    pub accounts: Arc<crate::accounts::Accounts>,
    pub upstreams: Arc<Upstreams>,
    pub bus: Bus,
    pub modes: Arc<Modes>,
}

impl Replayer {
    /// One worker per upstream (none when the queue is unavailable).
    pub fn spawn_workers(&self) {
        if self.queue.open().is_none() {
            return;
        }
        for up in 0..self.upstreams.list.len() {
            self.bus.spawn(self.clone().worker(up));
        }
        // A Copilot API host learned at run time gets its worker when it is learned (its
        // queued creates, kept under its name, are replayed from then on, also after a restart
        // once the host is announced again).
        for up in self.upstreams.learned.indices() {
            let me = self.clone();
            let mut stop = me.bus.stopping();
            self.bus.spawn(async move {
                tokio::select! {
                    _ = me.upstreams.learned.wait_for(up) => me.worker(up).await,
                    _ = stop.changed() => {}
                }
            });
        }
    }

    async fn worker(self, up: usize) {
        let Some(q) = self.queue.open() else { return };
        let name = self.upstreams.get(up).settings.name.clone();
        let mut stop = self.bus.stopping();
        loop {
            if *stop.borrow() {
                return;
            }
            if self.held() {
                let mut mode = self.modes.watch();
                tokio::select! {
                    _ = mode.wait_for(|b| !matches!(b, Behaviour::Hold(_))) => {}
                    _ = stop.changed() => return,
                }
                continue;
            }
            expire(&self.bus, q).await;
            let wait = match q.store.claim_next(&name, now_ms()).await {
                Ok(Some(item)) => {
                    // Renewed while this replica works on it, however slow the upstream.
                    let _claim = q.store.keep_claim(item.id);
                    self.replay_one(q, up, item).await
                }
                Ok(None) => q.store.idle_wait(&name, now_ms()).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the create queue");
                    Duration::from_secs(5)
                }
            };
            tokio::select! {
                _ = q.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Cache only or offline: nothing goes upstream, replays included.
    fn held(&self) -> bool {
        matches!(self.modes.behaviour(), Behaviour::Hold(_))
    }

    /// Tries one item; returns how long to wait before the next.
    async fn replay_one(&self, q: &Queue, up: usize, item: Item) -> Duration {
        let bus = &self.bus;
        if self.held() {
            return Duration::ZERO;
        }
        let credential = match &item.credential_ref {
            Some(acct) => match credential_step(q.get_credential(acct).await) {
                CredentialStep::Use(c) => c,
                CredentialStep::Gone => {
                    // An item that may already exist upstream can still be settled: looked up
                    // with the stored GitHub token of the same account (never replayed with it).
                    if item.state == State::InDoubt || item.needs_lookup {
                        if let Some(wait) = self.settle_with_stored_token(q, up, &item).await {
                            return wait;
                        }
                    }
                    let detail = "the replay credential is gone (keychain entry missing or Weir restarted with in-memory credentials)";
                    return match q.store.mark_failed(item.id, detail, now_ms()).await {
                        Ok(it) => {
                            end(bus, q, &it, "failed: credential missing").await;
                            PACE
                        }
                        Err(_) => STORE_TROUBLE,
                    };
                }
                CredentialStep::Wait(e) => {
                    // Locked, slow or unreachable: the credential may well be there. Try later.
                    let now = now_ms();
                    let detail = format!("waiting for keychain: {e}");
                    return match q
                        .store
                        .reschedule(item.id, retry_at(&item, now, None), &detail, now)
                        .await
                    {
                        Ok(it) => {
                            bus.emit(event(&it, detail));
                            PACE
                        }
                        Err(_) => STORE_TROUBLE,
                    };
                }
            },
            None => serde_json::Value::Null,
        };
        if item.state == State::InDoubt || item.needs_lookup {
            match self.lookup(up, &item, &credential, scope_of(&item)).await {
                Lookup::Found(result) => {
                    let r = q.store.mark_done(item.id, result, now_ms()).await;
                    if let Ok(it) = &r {
                        end(bus, q, it, "done: found upstream, not sent again").await;
                    }
                    return paced(&r);
                }
                Lookup::Unverifiable => {
                    let r = q.store.mark_failed(item.id, "in doubt and cannot be verified upstream (no repository or problem statement); not replayed to avoid a double create — retry it by hand if it did not happen", now_ms()).await;
                    if let Ok(it) = &r {
                        end(bus, q, it, "failed: in doubt").await;
                    }
                    return paced(&r);
                }
                // The gate is closed: nothing was asked; try again shortly.
                Lookup::NotNow => {
                    q.store.release(item.id).await;
                    return Duration::from_secs(1);
                }
                Lookup::Unknown(e) => {
                    let now = now_ms();
                    let detail = format!("lookup failed: {e}");
                    let r = q.store.reschedule(item.id, now + 5_000, &detail, now).await;
                    return paced(&r);
                }
                Lookup::NotFound => {}
            }
        }
        // The mode may have changed during the lookup: check again before anything is sent.
        if self.held() {
            return Duration::ZERO;
        }
        // Admission before the item is marked: a closed gate leaves it queued as it was.
        let scope = scope_of(&item);
        let admitted = match self.upstreams.get(up).gate.admit(scope.as_ref()).await {
            Ok(a) => a,
            Err(_) => {
                q.store.release(item.id).await;
                return Duration::from_secs(1);
            }
        };
        let uri: Uri = match item.path_and_query.parse() {
            Ok(u) => u,
            Err(e) => {
                let detail = format!("cannot build the replay URL: {e}");
                let r = q.store.mark_failed(item.id, &detail, now_ms()).await;
                if let Ok(it) = &r {
                    end(bus, q, it, "failed: bad URL").await;
                }
                return paced(&r);
            }
        };
        let Ok(item) = q.store.mark_replaying(item.id, now_ms()).await else {
            return STORE_TROUBLE;
        };
        bus.emit(event(&item, "replaying"));
        let mut headers = HeaderMap::new();
        for (k, v) in &item.headers {
            if let (Ok(k), Ok(v)) = (
                header::HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                headers.append(k, v);
            }
        }
        set_credential(&mut headers, &credential);
        let req = Replayable {
            method: &Method::POST,
            uri: &uri,
            headers: &headers,
            body: Bytes::from(item.body.clone()),
            identity: scope,
        };
        let res = self
            .upstreams
            .call_buffered(
                up,
                RouteClass::Create,
                req,
                AttemptPolicy::replay(),
                Some(admitted),
            )
            .await;
        let now = now_ms();
        let retry_at = |hint: Option<Duration>| retry_at(&item, now, hint);
        match res {
            Ok(a) => {
                let resp = a.response;
                let kind = classify_response(resp.status(), resp.headers(), resp.body());
                if kind.is_ok() {
                    let result = summarise(resp.status().as_u16(), resp.body());
                    if let Ok(it) = q.store.mark_done(item.id, result, now).await {
                        end(bus, q, &it, "done: replayed").await;
                    }
                } else if kind.is_retryable() || kind == Kind::RateLimited {
                    // The attempt phase already set the upstream's cooldown from its hint.
                    let hint =
                        weir_resilience::wait_hint(resp.headers(), std::time::SystemTime::now());
                    let detail = format!("upstream answered {}", resp.status());
                    let _ = q
                        .store
                        .reschedule(item.id, retry_at(hint), &detail, now)
                        .await;
                } else {
                    let body = resp.body();
                    let snippet =
                        String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                    let detail = format!("upstream refused it: {} {snippet}", resp.status());
                    // Kept so the provisional job reports it in the upstream's error shape.
                    let result = refusal(resp.status().as_u16(), body, &detail);
                    if let Ok(it) = q
                        .store
                        .mark_failed_with(item.id, &detail, result, now)
                        .await
                    {
                        end(bus, q, &it, "failed: refused upstream").await;
                    }
                }
            }
            // Not sent (never connected): it certainly did not arrive. Anything later may have.
            Err(p) if !p.maybe_sent => {
                let _ = q
                    .store
                    .reschedule(item.id, retry_at(None), &p.detail, now)
                    .await;
            }
            Err(p) => {
                if let Ok(it) = q
                    .store
                    .mark_in_doubt(item.id, retry_at(None), &p.detail, now)
                    .await
                {
                    bus.emit(event(
                        &it,
                        "in doubt: the attempt may have reached the upstream",
                    ));
                }
            }
        }
        PACE
    }
}

/// The identity an item's rate limits are scoped to: none for an item queued without a
/// credential (a throttle then concerns everyone).
pub(super) fn scope_of(item: &Item) -> Option<crate::identity::Identity> {
    item.credential_ref
        .as_ref()
        .and_then(|_| crate::identity::Identity::from_hex(&item.identity))
}

async fn expire(bus: &Bus, q: &Queue) {
    // A shared queue: items another replica was sending when it died (its lease ran out).
    if let Ok(items) = q.store.recover_while_running(now_ms()).await {
        for it in items {
            bus.emit(event(
                &it,
                "in doubt: the replica sending it stopped; it is looked up before any replay",
            ));
        }
    }
    let max_age = q.max_age.as_millis() as i64;
    if let Ok(items) = q.store.expire_older_than(max_age, now_ms()).await {
        for it in items {
            end(bus, q, &it, "expired: not replayed within the maximum age").await;
        }
    }
    // Purge long-ended items, deleting the credentials of exactly the rows deleted (the
    // store returns them from the DELETE itself).
    let cutoff = now_ms() - KEEP_ENDED.as_millis() as i64;
    if let Ok(purged) = q.store.purge_ended_before(cutoff).await {
        for it in &purged {
            if let Some(acct) = &it.credential_ref {
                q.delete_credential(acct).await;
            }
        }
    }
}

/// [`PACE`] after a step the store recorded, [`STORE_TROUBLE`] after one it did not (the item
/// is then still due: going on at once would spin on it).
pub(super) fn paced<T, E>(recorded: &Result<T, E>) -> Duration {
    if recorded.is_ok() {
        PACE
    } else {
        STORE_TROUBLE
    }
}

/// When an item that could not go now is due again: the one backoff ([`RETRY`], by its
/// attempts, plus jitter), or the upstream's own wait when longer.
fn retry_at(item: &Item, now: i64, hint: Option<Duration>) -> i64 {
    let wait = RETRY.ceiling(item.attempts) + FullJitter.pick(RETRY.base);
    let wait = hint.map_or(wait, |h| h.max(wait)).min(KEEP_ENDED);
    now.saturating_add(wait.as_millis() as i64)
}

/// What to do with an item, by what the secret store said about its credential.
#[derive(Debug)]
enum CredentialStep {
    Use(serde_json::Value),
    /// The store says there is no entry: the credential is gone for good.
    Gone,
    /// The store could not answer (locked, timed out, unavailable): wait, never fail.
    Wait(SecretError),
}

fn credential_step(got: Result<Option<String>, SecretError>) -> CredentialStep {
    match got {
        Ok(Some(c)) => CredentialStep::Use(serde_json::from_str(&c).unwrap_or_default()),
        Ok(None) => CredentialStep::Gone,
        Err(e) => CredentialStep::Wait(e),
    }
}

/// Announces an item's end state; a `done` item's credential is deleted at once.
pub(super) async fn end(bus: &Bus, q: &Queue, item: &Item, detail: &str) {
    if item.state == State::Done {
        if let Some(acct) = &item.credential_ref {
            q.delete_credential(acct).await;
        }
    }
    bus.emit(event(item, detail));
}

pub(super) fn set_credential(h: &mut http::HeaderMap, c: &serde_json::Value) {
    for (field, name) in [
        ("authorization", header::AUTHORIZATION),
        ("cookie", header::COOKIE),
    ] {
        if let Some(v) = c
            .get(field)
            .and_then(|v| v.as_str())
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            h.insert(name, v);
        }
    }
}

/// What the upstream said when it refused a replay: its status and message (the jobs API's
/// error, `{"message"}` or `{"error": {"message"}}`, else Weir's description).
fn refusal(status: u16, body: &[u8], detail: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = v
        .get("message")
        .or_else(|| v.get("error").and_then(|e| e.get("message")))
        .and_then(|m| m.as_str())
        .map_or_else(|| detail.to_string(), str::to_string);
    serde_json::json!({"status": status, "message": message})
}

/// What the upstream said it created: job id, session id, PR when present.
fn summarise(status: u16, body: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let pick = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| v.get(*k).cloned())
            .unwrap_or(serde_json::Value::Null)
    };
    serde_json::json!({
        "status": status,
        "job_id": pick(&["job_id", "id"]),
        "session_id": pick(&["session_id"]),
        "pull_request": pick(&["pull_request", "pr", "pull_request_url"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_or_slow_keychain_waits_and_only_a_missing_entry_fails() {
        assert!(matches!(
            credential_step(Ok(Some(r#"{"authorization":"token a"}"#.into()))),
            CredentialStep::Use(c) if c["authorization"] == "token a"
        ));
        assert!(matches!(credential_step(Ok(None)), CredentialStep::Gone));
        for e in [
            SecretError::Timeout,
            SecretError::Crashed("boom".into()),
            SecretError::Unavailable {
                reason: "locked".into(),
                fix: "unlock it".into(),
            },
        ] {
            assert!(matches!(credential_step(Err(e)), CredentialStep::Wait(_)));
        }
    }

    #[test]
    fn a_store_that_cannot_record_a_step_slows_the_worker_down() {
        assert_eq!(paced(&Ok::<(), ()>(())), PACE);
        assert_eq!(paced(&Err::<(), ()>(())), STORE_TROUBLE);
        assert!(STORE_TROUBLE >= Duration::from_secs(1));
    }
}
