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
//! and when a failed or expired item is purged (after [`KEEP_ENDED`], by
//! `super::housekeeping`); until then `weir queue retry` can still send it.

use super::credential::Credential;
use super::decide::{decide, needs_lookup, Fact, Outcome, Step, PACE, RETRY};
use super::{event, now_ms, Queue, QueueState};
use crate::config::{RouteClass, UpstreamIndex};
use crate::events::Bus;
use crate::mode::{Behaviour, Modes};
use crate::secrets::SecretError;
use crate::upstream::{Admitted, AttemptPolicy, Replayable, Upstreams};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Uri};
use std::sync::Arc;
use std::time::Duration;
use weir_resilience::{classify_response, FullJitter, Jitter, Kind};
use weir_store::{Change, Item, State, UpstreamId};

pub use super::decide::KEEP_ENDED;

/// How long a worker waits after the store failed to record a step (the item is still due, so
/// going on at [`PACE`] would spin on it).
const STORE_TROUBLE: Duration = Duration::from_secs(5);

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
    /// The in-doubt lookups' reads per upstream and identity per window, and the reads made
    /// in the window (see [`super::lookup_budget`]).
    pub lookups: Arc<super::lookup_budget::LookupBudget>,
}

impl Replayer {
    /// A queued create's route: class `create`, and the breaker family its path has in the
    /// route table in force (the Task API's creates count against the Task API's breaker).
    fn create_route(&self, item: &Item) -> crate::config::Route {
        let path = item.path_and_query.split('?').next().unwrap_or("");
        crate::config::Route {
            class: RouteClass::Create,
            family: self.upstreams.route_of(&item.method, path).family,
        }
    }

    /// One worker per upstream and the queue's housekeeping (none when the queue is
    /// unavailable). Items that grew too old while Weir was stopped expire before any
    /// worker starts, so none of them is replayed.
    pub fn spawn_workers(&self) {
        if self.queue.open().is_none() {
            return;
        }
        let me = self.clone();
        self.bus.spawn(async move {
            let Some(q) = me.queue.open() else { return };
            super::housekeeping::pass(&me.bus, q).await;
            me.start_workers();
            super::housekeeping::keep(&me.bus, q).await;
        });
    }

    fn start_workers(&self) {
        for up in self.upstreams.configured() {
            self.bus.spawn(self.clone().worker(up));
        }
        // A Copilot API host learned at run time gets its worker when it is learned (its
        // queued creates, kept under its name, are replayed from then on, also after a restart
        // once the host is announced again). One waiting task per slot (`learned::ARENA`), most
        // of which never start a worker: the worker's future is boxed when the host is learned,
        // so a waiting task holds a few hundred bytes, not a whole worker's state.
        for up in self.upstreams.learned.indices() {
            let me = self.clone();
            let mut stop = me.bus.stopping();
            self.bus.spawn(async move {
                tokio::select! {
                    _ = me.upstreams.learned.wait_for(up) => Box::pin(me.worker(up)).await,
                    _ = stop.changed() => {}
                }
            });
        }
    }

    /// Claims and replays this upstream's due items, one at a time; idle, it sleeps until the
    /// next one is due (`QueueBackend::idle_wait`) or the queue changes (`Queue::wake`),
    /// never on a short tick.
    async fn worker(self, up: UpstreamIndex) {
        let Some(q) = self.queue.open() else { return };
        let name = UpstreamId::new(self.upstreams.get(up).settings.name.clone());
        let mut stop = self.bus.stopping();
        // Made before the first claim and again each time it fires, never dropped in between:
        // a recovery while the worker claims, replays (its own replay going through after
        // failures) or sleeps is seen at the next wait, and brings the waiting items forward.
        let recovery = &self.upstreams.get(up).recovery;
        let recovered = recovery.recovered.notified();
        tokio::pin!(recovered);
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
            recover(&self.bus, q).await;
            // Enabled before the claim reads the store: an item inserted after that read
            // wakes this sleep instead of waiting for the next due time.
            let woken = q.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let wait = match q.store.claim_next(&name, now_ms()).await {
                Ok(Some(item)) => {
                    // Renewed while this replica works on it, however slow the upstream.
                    let _claim = q.store.keep_claim(item.id);
                    let wait = self.replay_one(q, up, item).await;
                    // Between items the pace holds: only a change during the wait wakes it
                    // early, as before (not one made while this item was replayed).
                    woken.set(q.wake.notified());
                    Some(wait)
                }
                // `None`: nothing of this upstream waits; asleep until a change wakes it.
                Ok(None) => q.store.idle_wait(&name, now_ms()).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the create queue");
                    Some(Duration::from_secs(5))
                }
            };
            let waited_from = tokio::time::Instant::now();
            tokio::select! {
                _ = woken => {}
                _ = super::backend::sleep_or_never(wait) => {}
                _ = recovered.as_mut() => {
                    recovered.set(recovery.recovered.notified());
                    self.bring_forward(q, up).await;
                    // Its items are due now; the pace between two replays still holds.
                    tokio::select! {
                        _ = tokio::time::sleep_until(waited_from + wait.map_or(PACE, |w| w.min(PACE))) => {}
                        _ = stop.changed() => return,
                    }
                }
                _ = stop.changed() => return,
            }
        }
    }

    /// Cache only or offline: nothing goes upstream, replays included.
    fn held(&self) -> bool {
        matches!(self.modes.behaviour(), Behaviour::Hold(_))
    }

    /// Tries one item; returns how long to wait before the next. Each stage learns a
    /// [`Fact`]; [`decide`] makes it the next step and [`Replayer::apply`] carries it out.
    async fn replay_one(&self, q: &Queue, up: UpstreamIndex, item: Item) -> Duration {
        // 1. The credential, or what its absence comes to.
        let credential = match self.credential(q, up, &item).await {
            Ok(c) => c,
            Err(fact) => return self.apply(q, &item, self.decide(&item, fact)).await,
        };
        // 2. A create that may exist upstream is looked up before anything is sent.
        if needs_lookup(&item) {
            let found = self.lookup(up, &item, &credential, scope_of(&item)).await;
            let fact = Fact::Lookup {
                found,
                stored_token: false,
            };
            match self.decide(&item, fact) {
                Step::Send => {}
                step => return self.apply(q, &item, step).await,
            }
        }
        // 3. Admission and the URL, before the item is marked (a closed gate leaves it as
        //    it was), then marked replaying.
        let (admitted, uri) = match self.admit(up, &item).await {
            Ok(ready) => ready,
            Err(fact) => return self.apply(q, &item, self.decide(&item, fact)).await,
        };
        let tried_before = item.attempts;
        let marked = self
            .record(q, &item, Change::Replay, "replaying".into())
            .await;
        let Some(item) = marked else {
            return STORE_TROUBLE;
        };
        // 4. The send, and what its answer comes to. One that goes through after failures the
        //    breaker counts is the upstream's recovery (`Upstream::recovery` wakes the worker);
        //    after failures it does not count (a rate limit, a secondary limit's 403) only this
        //    item's own success says the upstream takes creates again.
        let sent = self.send(up, &item, &credential, admitted, &uri).await;
        let through_after_failing = went_through_after_failing(tried_before, &sent);
        let wait = self
            .apply(q, &item, self.decide(&item, Fact::Sent(sent)))
            .await;
        if through_after_failing {
            self.bring_forward(q, up).await;
        }
        wait
    }

    /// The upstream answers well again after failing (`Upstream::recovery`: the first exchange
    /// that goes well after one the breaker counts as failed, a client's list or this worker's
    /// own replay; or a replayed create that had failed before goes through), so it
    /// takes creates again: this upstream's waiting items are due now instead of at the end of
    /// a backoff they earned while it failed. That backoff doubles with each failed replay (up
    /// to a minute), so without this the queue sat idle after a long outage for about as long
    /// again (a storm stretched by a loaded machine left `fault_matrix::five_xx_storm`'s last
    /// create unsent past the test's 15 s; #31). Items whose upstream or identity is cooling
    /// down (a rate limit's wait) keep their time. Only for the laptop's queue: on a shared
    /// queue another replica may claim an item between this read and the change, and the
    /// change does not check the state first. The one place that moves due times forward.
    async fn bring_forward(&self, q: &Queue, up: UpstreamIndex) {
        if q.store.is_shared() {
            return;
        }
        let name = UpstreamId::new(self.upstreams.get(up).settings.name.clone());
        let now = now_ms();
        let filter = weir_store::ListFilter {
            states: vec![State::Queued, State::InDoubt],
            limit: 1000,
        };
        let Ok(items) = q.store.list(filter).await else {
            return;
        };
        let gate = &self.upstreams.get(up).gate;
        for it in items {
            let waiting = it.upstream == name && it.next_attempt_at > now;
            if !waiting || gate.cooling(scope_of(&it).as_ref()) {
                continue;
            }
            let error = it.last_error.clone().unwrap_or_default();
            let _ = q
                .store
                .apply(it.id, Change::Reschedule { at: now, error }, now)
                .await;
        }
    }

    /// [`decide`] now, with freshly drawn jitter.
    fn decide(&self, item: &Item, fact: Fact) -> Step {
        decide(item, fact, now_ms(), FullJitter.pick(RETRY.base))
    }

    /// Carries a step out: records and announces a change (paced by whether the store
    /// recorded it), or waits, giving the claim back when the step says so.
    async fn apply(&self, q: &Queue, item: &Item, step: Step) -> Duration {
        match step {
            Step::Record { change, detail } => match self.record(q, item, *change, detail).await {
                Some(_) => PACE,
                None => STORE_TROUBLE,
            },
            Step::Wait { wait, release } => {
                if release {
                    q.store.release(item.id).await;
                }
                wait
            }
            // Only a lookup's answer says "send", and `replay_one` acts on it there.
            Step::Send => Duration::ZERO,
        }
    }

    /// Records `change` and announces the item's new state; `None` when the store did not.
    async fn record(&self, q: &Queue, item: &Item, change: Change, detail: String) -> Option<Item> {
        match q.store.apply(item.id, change, now_ms()).await {
            Ok(it) => {
                end(&self.bus, q, &it, &detail).await;
                Some(it)
            }
            Err(e) => {
                tracing::warn!(id = item.id, error = %e, "the create queue did not record a replay step");
                None
            }
        }
    }

    /// The item's credential (an empty one for an item queued without). When it is gone, an
    /// item that may already exist upstream can still be settled by a lookup with the stored
    /// GitHub token of the same account (never replayed with it).
    async fn credential(
        &self,
        q: &Queue,
        up: UpstreamIndex,
        item: &Item,
    ) -> Result<Credential, Fact> {
        if self.held() {
            return Err(Fact::Held);
        }
        let Some(acct) = &item.credential_ref else {
            return Ok(Credential::default());
        };
        match credential_step(q.get_credential(acct).await) {
            CredentialStep::Use(c) => Ok(c),
            CredentialStep::Wait(e) => Err(Fact::CredentialWait(e.to_string())),
            CredentialStep::Gone if needs_lookup(item) => {
                match self.lookup_with_stored_token(q, up, item).await {
                    Some(found) => Err(Fact::Lookup {
                        found,
                        stored_token: true,
                    }),
                    None => Err(Fact::CredentialGone),
                }
            }
            CredentialStep::Gone => Err(Fact::CredentialGone),
        }
    }

    /// The gate's admission and the replay URL; the mode may have changed during a lookup,
    /// so it is checked again before anything is sent.
    async fn admit(&self, up: UpstreamIndex, item: &Item) -> Result<(Admitted, Uri), Fact> {
        if self.held() {
            return Err(Fact::Held);
        }
        let scope = scope_of(item);
        // The same breaker as its attempt: the create's route family (the Task API's own).
        let family = self.create_route(item).family;
        let gate = &self.upstreams.get(up).gate;
        let Ok(admitted) = gate.admit_attempt(scope.as_ref(), false, family).await else {
            return Err(Fact::GateClosed);
        };
        match item.path_and_query.parse() {
            Ok(uri) => Ok((admitted, uri)),
            Err(e) => Err(Fact::BadUrl(format!("{e}"))),
        }
    }

    /// Sends the create as it was queued, with its credential, through the attempt phase.
    async fn send(
        &self,
        up: UpstreamIndex,
        item: &Item,
        credential: &Credential,
        admitted: Admitted,
        uri: &Uri,
    ) -> Outcome {
        let mut headers = HeaderMap::new();
        for (k, v) in &item.headers {
            if let (Ok(k), Ok(v)) = (
                header::HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                headers.append(k, v);
            }
        }
        credential.apply_to(&mut headers);
        let req = Replayable {
            method: &item.method,
            uri,
            headers: &headers,
            body: Bytes::from(item.body.clone()),
            identity: scope_of(item),
        };
        let res = self
            .upstreams
            .call_buffered(
                &self.upstreams.settings_now(),
                up,
                self.create_route(item),
                req,
                AttemptPolicy::replay(),
                Some(admitted),
            )
            .await;
        match res {
            Ok(a) => {
                let resp = a.response;
                let status = resp.status();
                let kind = classify_response(status, resp.headers(), resp.body());
                if kind.is_ok() {
                    Outcome::Created {
                        status,
                        body: resp.into_body(),
                    }
                } else if kind.is_retryable() || kind == Kind::RateLimited {
                    // The attempt phase already set the upstream's cooldown from its hint.
                    let hint =
                        weir_resilience::wait_hint(resp.headers(), std::time::SystemTime::now());
                    Outcome::Retryable { status, hint }
                } else {
                    Outcome::Refused {
                        status,
                        body: resp.into_body(),
                    }
                }
            }
            Err(p) if !p.maybe_sent => Outcome::NotSent(p.detail),
            Err(p) => Outcome::MaybeSent(p.detail),
        }
    }
}

/// The identity an item's rate limits are scoped to: none for an item queued without a
/// credential (a throttle then concerns everyone).
pub(super) fn scope_of(item: &Item) -> Option<crate::identity::Identity> {
    item.credential_ref
        .as_ref()
        .and_then(|_| crate::identity::Identity::from_hex(&item.identity))
}

/// A shared queue: items another replica was sending when it died (its lease ran out);
/// nothing for SQLite (recovered at start).
async fn recover(bus: &Bus, q: &Queue) {
    if let Ok(items) = q.store.recover_while_running(now_ms()).await {
        for it in items {
            bus.emit(event(
                &it,
                "in doubt: the replica sending it stopped; it is looked up before any replay",
            ));
        }
    }
}

/// What to do with an item, by what the secret store said about its credential.
#[derive(Debug)]
enum CredentialStep {
    Use(Credential),
    /// The store says there is no entry: the credential is gone for good.
    Gone,
    /// The store could not answer (locked, timed out, unavailable): wait, never fail.
    Wait(SecretError),
}

fn credential_step(got: Result<Option<String>, SecretError>) -> CredentialStep {
    match got {
        Ok(Some(c)) => CredentialStep::Use(Credential::from_secret(&c)),
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

/// Whether a replay that had been tried before (`attempts_before`, counted by each send) went
/// through now. A rate limit's 429, a secondary limit's 403 or an answer the breaker does not
/// count never make `Upstream::recovery` fire, yet the other items' backoff grew under them:
/// this success is what says they may go now. A first try that goes through says nothing new,
/// so a healthy upstream never has the queue listed.
fn went_through_after_failing(attempts_before: u32, sent: &Outcome) -> bool {
    attempts_before > 0 && matches!(sent, Outcome::Created { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_create_that_failed_before_and_goes_through_brings_the_rest_forward() {
        let created = || Outcome::Created {
            status: http::StatusCode::CREATED,
            body: Bytes::new(),
        };
        assert!(went_through_after_failing(1, &created()));
        assert!(went_through_after_failing(6, &created()));
        assert!(!went_through_after_failing(0, &created()));
        let limited = Outcome::Retryable {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            hint: Some(Duration::from_secs(1)),
        };
        assert!(!went_through_after_failing(3, &limited));
        assert!(!went_through_after_failing(
            3,
            &Outcome::NotSent("refused".into())
        ));
    }

    #[test]
    fn a_locked_or_slow_keychain_waits_and_only_a_missing_entry_fails() {
        assert!(matches!(
            credential_step(Ok(Some(r#"{"authorization":"token a"}"#.into()))),
            CredentialStep::Use(c) if c.authorization.as_ref().is_some_and(|v| v == "token a")
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
        assert!(STORE_TROUBLE >= Duration::from_secs(1));
        assert!(STORE_TROUBLE > PACE);
    }
}
