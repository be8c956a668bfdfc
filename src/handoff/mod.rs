//! Local-agent hand-off (#14): a create that cannot reach the cloud, where policy says
//! `local`, is offered to the developer's configured local agent command (`[local_agent]`)
//! instead of being queued. Nothing runs until the developer confirms the offer (tray or
//! dashboard), and then it runs exactly once.
//!
//! An offer is a row of the durable create queue parked in the state `offered` (its
//! credential in the keychain, as for a queued create), so it survives restarts and is never
//! lost, and the hand-off's record (the offer, the confirmation, the command's outcome) is
//! its row in the queue's own offers table (`weir_store::offer`, [`HandOffRecord`]):
//! - **confirm** moves it to `handed_off` and records the confirmation in one transaction
//!   *before* the command starts, so a second confirmation (or a second Weir) cannot start it
//!   again (409); the command's outcome is then recorded on the offer row;
//! - **decline**, or no answer within `local_agent.offer_ttl`, puts the create back in the
//!   queue (`queued`, replayed when the upstream is healthy); an offer made by hand (no
//!   create request behind it) is withdrawn (`cancelled`) instead.
//!
//! - [`runner`]: starts the command (argv, no shell, no credential, bounded output).
//! - `view`: an offer as the control API shows it.

pub(crate) mod owner;
mod runner;
mod tool;
mod view;

pub use owner::NotOwn;
pub use tool::RequestingTool;
pub use view::HandoffView;

use crate::config::LiveSettings;
use crate::events::{Bus, Event, HandoffChange};
use crate::queue::{now_ms, QueueState};
use crate::status::{
    HandoffOutcome, HandoffResult, HandoffsStatus, PendingHandoff, EXCERPT_CHARS, RECENT_HANDOFFS,
};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_store::{
    Change, Confirmation, Finish, HandOffRecord, Item, ListFilter, NewItem, State, StoreError,
};

/// What the policy phase hands over when a create's action is `local`.
#[derive(Debug, Clone)]
pub struct HandoffRequest {
    /// The managed upstream's name the create was for.
    pub upstream: String,
    /// `owner/repo`.
    pub repo: String,
    pub problem_statement: String,
    pub base_branch: Option<String>,
    /// The policy rule that chose `local` (shown in the offer).
    pub rule: String,
    /// The create request itself, so a declined or expired offer goes back to the queue and
    /// is replayed like any queued create. `None` (an offer made by hand, from the tray or a
    /// test): a declined or expired offer is withdrawn.
    pub create: Option<CreateRequest>,
}

/// The create request behind an offer, as the request path has it.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub uri: http::Uri,
    /// All request headers; only the allow-listed ones are stored, the credential goes to the
    /// keychain (exactly as for a queued create).
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
    /// The create's dedupe key (identity + path + body, or its `Idempotency-Key`).
    pub dedupe_key: String,
    /// The keyed hash of the caller's credential.
    pub identity: String,
}

/// An offer waiting for the developer's confirmation.
#[derive(Debug, Clone)]
pub struct Offer {
    /// The offer's id: the create's queue item id, as text.
    pub id: String,
    /// Where the offer can be seen and confirmed (`/_weir/api/handoffs/{id}`).
    pub location: String,
    /// When it goes back to the queue unanswered.
    pub expires_at: SystemTime,
}

/// The first placeholder the command uses whose value begins with `-` (after spaces): filled
/// verbatim into an argument, it could be read as an option by the program.
fn option_like(command: &[String], values: &[(&'static str, &str)]) -> Option<&'static str> {
    values.iter().find_map(|(key, value)| {
        let used = command.iter().any(|a| a.contains(&format!("{{{key}}}")));
        (used && value.trim_start().starts_with('-')).then_some(*key)
    })
}

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("no local agent is configured: add a [local_agent] table with a command")]
    NotConfigured,
    #[error("no local checkout of {repo} was found: add it to local_agent.checkouts, or clone it under one of local_agent.roots")]
    NoCheckout { repo: String },
    #[error("the create queue is unavailable, so nothing can be offered: {0}")]
    QueueUnavailable(String),
    /// A team gateway's queue is shared by many developers: it runs no one's local agent.
    #[error("this Weir is a team gateway: it runs no developer's local agent")]
    Gateway,
    /// The same create is already in the queue (not as an offer): answer as for a queued one.
    #[error("this create is already queued as item {id}")]
    AlreadyQueued { id: i64 },
    #[error("there is no hand-off offer {id}")]
    NotFound { id: i64 },
    /// Confirmed, declined or expired already: the command never runs twice.
    #[error("offer {id} was already answered: the create is now {state}")]
    Answered { id: i64, state: State },
    /// A value the command would receive starts with `-`: a program would read it as an
    /// option (`--allow-all-tools` hidden in a base branch or a statement).
    #[error("the local agent was not started: {{{placeholder}}} begins with `-`, which the command would read as an option; use {{problem_statement_file}} for a statement, or decline")]
    OptionLike { placeholder: &'static str },
}

impl HandoffError {
    /// The HTTP status the control API answers with.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            HandoffError::NotConfigured
            | HandoffError::NoCheckout { .. }
            | HandoffError::OptionLike { .. }
            | HandoffError::Gateway => S::CONFLICT,
            HandoffError::QueueUnavailable(_) => S::SERVICE_UNAVAILABLE,
            HandoffError::AlreadyQueued { .. } | HandoffError::Answered { .. } => S::CONFLICT,
            HandoffError::NotFound { .. } => S::NOT_FOUND,
        }
    }

    fn from_store(id: i64, e: StoreError) -> HandoffError {
        match e {
            StoreError::IllegalTransition { from, .. } => {
                HandoffError::Answered { id, state: from }
            }
            StoreError::NotFound { .. } => HandoffError::NotFound { id },
            e => HandoffError::QueueUnavailable(format!("{}. {}", e.detail(), e.fix())),
        }
    }
}

/// The engine's hand-off offers: the offer store is the queue; this keeps the parts it needs
/// and an in-memory mirror of pending offers and recent results for the status (read
/// without a database call).
#[derive(Default)]
pub struct Handoffs {
    parts: Option<Parts>,
    mirror: Arc<Mutex<Mirror>>,
}

struct Parts {
    queue: Arc<QueueState>,
    bus: Bus,
    live: LiveSettings,
    /// `<data dir>/handoffs` (0700): problem-statement files while a command runs.
    dir: PathBuf,
}

#[derive(Default)]
struct Mirror {
    pending: BTreeMap<i64, Pending>,
    recent: VecDeque<HandoffResult>,
    counts: crate::status::HandoffCounts,
}

#[derive(Clone)]
struct Pending {
    rule: String,
    repo: String,
    excerpt: String,
    offered_at_ms: i64,
    expires_at_ms: i64,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoffs")
            .field("wired", &self.parts.is_some())
            .finish()
    }
}

/// The offer's details: the `offer` JSON of its row in the offers table (opaque to the
/// store), kept after the offer is answered.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct OfferRecord {
    rule: String,
    checkout: PathBuf,
    base_branch: Option<String>,
    /// A declined / expired offer goes back to the queue (it carries a real create).
    requeue: bool,
    expires_at: i64,
    /// The tool that sent the create (`None`: an offer made by hand). Shown before confirm.
    #[serde(default)]
    tool: Option<RequestingTool>,
}

fn record_of(rec: &HandOffRecord) -> Option<OfferRecord> {
    serde_json::from_value(rec.offer.clone()).ok()
}

fn excerpt(s: &str) -> String {
    let mut e: String = s.chars().take(EXCERPT_CHARS).collect();
    if s.chars().count() > EXCERPT_CHARS {
        e.push('…');
    }
    e
}

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl Handoffs {
    pub(crate) fn new(
        queue: Arc<QueueState>,
        bus: Bus,
        live: LiveSettings,
        data_dir: &std::path::Path,
    ) -> Handoffs {
        Handoffs {
            parts: Some(Parts {
                queue,
                bus,
                live,
                dir: data_dir.join("handoffs"),
            }),
            mirror: Arc::default(),
        }
    }

    /// The data dir this engine runs from (the handoffs dir's parent): the control API's Set
    /// up view finds the install's CA store and keychain namespace by it.
    pub(crate) fn data_dir(&self) -> Option<&std::path::Path> {
        self.parts.as_ref()?.dir.parent()
    }

    fn parts(&self) -> Result<&Parts, HandoffError> {
        self.parts.as_ref().ok_or(HandoffError::NotConfigured)
    }

    /// Offers a create to the local agent; it runs only after [`Handoffs::confirm`].
    /// `NotConfigured` / `NoCheckout`: the caller queues the create as before.
    pub async fn offer(&self, req: HandoffRequest) -> Result<Offer, HandoffError> {
        let p = self.parts()?;
        let settings = p.live.get();
        let agent = settings
            .local_agent
            .as_ref()
            .ok_or(HandoffError::NotConfigured)?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        if q.store.is_shared() {
            return Err(HandoffError::Gateway);
        }
        let checkout = agent
            .checkout_for(&req.repo)
            .ok_or_else(|| HandoffError::NoCheckout {
                repo: req.repo.clone(),
            })?;
        let now = now_ms();
        let expires_at = now.saturating_add(agent.offer_ttl.as_millis() as i64);
        let record = OfferRecord {
            rule: req.rule.clone(),
            checkout,
            base_branch: req.base_branch.clone(),
            requeue: req.create.is_some(),
            expires_at,
            tool: req.create.as_ref().map(|c| RequestingTool::of(&c.headers)),
        };
        // Not serialisable only for a checkout path that is not UTF-8: stored as `null`, read
        // back as no offer (as before the offers table).
        let offer = serde_json::to_value(&record).unwrap_or(serde_json::Value::Null);
        let stored = match &req.create {
            Some(c) => {
                let create = crate::queue::enqueue::Create {
                    upstream: &req.upstream,
                    key: &c.dedupe_key,
                    identity: c.identity.clone(),
                    uri: &c.uri,
                    headers: &c.headers,
                    body: &c.body,
                };
                crate::queue::enqueue::store_offered(q, create, expires_at, offer).await
            }
            None => {
                let item = NewItem {
                    upstream: req.upstream.as_str().into(),
                    method: http::Method::POST,
                    path_and_query: format!("/agents/swe/v1/jobs/{}", req.repo),
                    headers: Vec::new(),
                    body: serde_json::json!({
                        "problem_statement": req.problem_statement,
                        "base_ref": req.base_branch,
                    })
                    .to_string()
                    .into_bytes(),
                    identity: "local-agent-offer".into(),
                    credential_ref: None,
                    dedupe_key: format!("handoff:{}", offer_key(&req, now)),
                    repo: Some(req.repo.clone()),
                    problem_statement: Some(req.problem_statement.clone()),
                    in_doubt: false,
                    provisional: None,
                };
                q.store.insert_offered(item, expires_at, offer, now).await
            }
        };
        let item = match stored {
            Ok(item) => item,
            Err(StoreError::Duplicate { existing_id }) => {
                // The same create again: the offer already made stands; a queued one stays.
                return match q.store.get(existing_id).await {
                    Ok(Some(it)) if it.state == State::Offered => {
                        let rec = q.store.hand_off_record(existing_id).await;
                        let exp = rec.ok().flatten().map_or(expires_at, |r| r.expires_at);
                        Ok(offer_for(existing_id, exp))
                    }
                    _ => Err(HandoffError::AlreadyQueued { id: existing_id }),
                };
            }
            Err(e) => return Err(HandoffError::from_store(0, e)),
        };
        let pending = Pending {
            rule: req.rule.clone(),
            repo: req.repo.clone(),
            excerpt: excerpt(&req.problem_statement),
            offered_at_ms: now,
            expires_at_ms: expires_at,
        };
        if let Ok(mut m) = self.mirror.lock() {
            m.pending.insert(item.id, pending.clone());
            m.counts.offered += 1;
        }
        tracing::info!(id = item.id, rule = %req.rule, "a create was offered to the local agent");
        p.bus
            .emit(crate::queue::event(&item, "offered to the local agent"));
        p.bus.emit(handoff_event(
            HandoffChange::Offered,
            item.id,
            &pending,
            format!(
                "{} could not reach the cloud; rule {} allows the local agent. Confirm to start it.",
                req.repo, req.rule
            ),
        ));
        Ok(offer_for(item.id, expires_at))
    }

    /// Confirms offer `id`: marks it `handed_off` (only the first confirmation wins) and
    /// starts the local agent command once; its outcome is recorded when it ends.
    pub async fn confirm(&self, id: i64) -> Result<HandoffView, HandoffError> {
        let p = self.parts()?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        let item = self.offered_item(id).await?;
        let mut rec = q
            .store
            .hand_off_record(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?
            .ok_or(HandoffError::NotFound { id })?;
        let record = record_of(&rec).ok_or(HandoffError::NotFound { id })?;
        let settings = p.live.get();
        let agent = settings
            .local_agent
            .clone()
            .ok_or(HandoffError::NotConfigured)?;
        let repo = item.repo.clone().unwrap_or_default();
        if !record.checkout.is_dir() {
            return Err(HandoffError::NoCheckout { repo });
        }
        let statement = item.problem_statement.clone().unwrap_or_default();
        // Before anything changes: a refused offer stays offered (decline it, or fix the rule).
        let (owner, name) = repo.split_once('/').unwrap_or(("", &repo));
        let checkout = record.checkout.display().to_string();
        let base = record.base_branch.clone().unwrap_or_default();
        let filled = [
            ("repo", repo.as_str()),
            ("owner", owner),
            ("name", name),
            ("checkout", checkout.as_str()),
            ("problem_statement", statement.as_str()),
            ("base_branch", base.as_str()),
        ];
        if let Some(placeholder) = option_like(&agent.command, &filled) {
            return Err(HandoffError::OptionLike { placeholder });
        }
        let confirmation = Confirmation {
            program: agent.command.first().cloned(),
            confirmed_at: crate::time_fmt::rfc3339(SystemTime::now()),
        };
        let now = now_ms();
        let item = q
            .store
            .apply(
                id,
                Change::HandOff {
                    confirmation: confirmation.clone(),
                },
                now,
            )
            .await
            .map_err(|e| HandoffError::from_store(id, e))?;
        // What the same transaction wrote on the offer row.
        rec.running = true;
        rec.program = confirmation.program;
        rec.confirmed_at = Some(confirmation.confirmed_at);
        rec.updated_at = now;
        // Handed off is an end state: the replay credential is not needed any more, and the
        // local agent never gets it.
        if let Some(acct) = &item.credential_ref {
            q.delete_credential(acct).await;
        }
        let pending = self.take_pending(id).unwrap_or_else(|| Pending {
            rule: record.rule.clone(),
            repo: repo.clone(),
            excerpt: excerpt(&statement),
            offered_at_ms: item.created_at,
            expires_at_ms: record.expires_at,
        });
        self.remember(id, HandoffOutcome::Running, None, &repo);
        p.bus
            .emit(crate::queue::event(&item, "handed to the local agent"));
        p.bus.emit(handoff_event(
            HandoffChange::Started,
            id,
            &pending,
            format!("the local agent was started for {repo}"),
        ));
        let (spec, file) = self.spec(id, &item, &record, &agent, &statement);
        let task = RunTask {
            queue: p.queue.clone(),
            bus: p.bus.clone(),
            mirror: self.mirror.clone(),
            dir: p.dir.clone(),
        };
        p.bus.spawn(task.run(id, spec, file, statement, pending));
        Ok(HandoffView::of(&item, Some(&rec)))
    }

    /// Declines offer `id`: the create goes back to the queue (or, made by hand, is
    /// withdrawn). Nothing runs.
    pub async fn decline(&self, id: i64) -> Result<HandoffView, HandoffError> {
        self.offered_item(id).await?;
        self.answer(id, HandoffChange::Declined).await
    }

    /// The offered item `id`, or why it cannot be answered.
    async fn offered_item(&self, id: i64) -> Result<Item, HandoffError> {
        let p = self.parts()?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        let item = q
            .store
            .get(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?
            .ok_or(HandoffError::NotFound { id })?;
        match item.state {
            State::Offered => Ok(item),
            state if self.was_offer(id) || state == State::HandedOff => {
                Err(HandoffError::Answered { id, state })
            }
            _ => Err(HandoffError::NotFound { id }),
        }
    }

    /// Whether `id` was an offer this Weir answered (declined / expired items are plain
    /// queue items again).
    fn was_offer(&self, id: i64) -> bool {
        self.mirror
            .lock()
            .map(|m| m.recent.iter().any(|r| r.id == id))
            .unwrap_or(false)
    }

    /// Declined or expired: back to the queue (woken for replay), or withdrawn.
    async fn answer(&self, id: i64, change: HandoffChange) -> Result<HandoffView, HandoffError> {
        let p = self.parts()?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        // No such item: the transition below says `NotFound`.
        let rec = q
            .store
            .hand_off_record(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?;
        let record = rec.as_ref().and_then(record_of);
        let requeue = record.as_ref().is_some_and(|r| r.requeue);
        let why = match change {
            HandoffChange::Expired => "the local-agent offer was not answered in time",
            _ => "the local-agent offer was declined",
        };
        let now = now_ms();
        let item = if requeue {
            let why = format!("{why}: back in the queue");
            q.store.apply(id, Change::Requeue { why }, now).await
        } else {
            let why = format!("{why}: withdrawn");
            q.store.apply(id, Change::Withdraw { why }, now).await
        }
        .map_err(|e| HandoffError::from_store(id, e))?;
        if requeue {
            q.wake.notify_waiters();
        } else if let Some(acct) = &item.credential_ref {
            q.delete_credential(acct).await;
        }
        let repo = item.repo.clone().unwrap_or_default();
        let pending = self.take_pending(id).unwrap_or_else(|| Pending {
            rule: record.as_ref().map(|r| r.rule.clone()).unwrap_or_default(),
            repo: repo.clone(),
            excerpt: excerpt(item.problem_statement.as_deref().unwrap_or_default()),
            offered_at_ms: item.created_at,
            expires_at_ms: now,
        });
        let outcome = match change {
            HandoffChange::Expired => HandoffOutcome::Expired,
            _ => HandoffOutcome::Declined,
        };
        remember(&self.mirror, id, outcome, None, &repo);
        let where_to = if requeue {
            "the create is back in the queue"
        } else {
            "the offer was withdrawn"
        };
        tracing::info!(
            id,
            ?change,
            requeue,
            "a local-agent offer was answered without running"
        );
        p.bus
            .emit(crate::queue::event(&item, format!("{why}; {where_to}")));
        p.bus.emit(handoff_event(
            change,
            id,
            &pending,
            format!("{why}; {where_to}"),
        ));
        // The offer row is kept as it was (requeue and withdraw write only the item).
        Ok(HandoffView::of(&item, rec.as_ref()))
    }

    /// Offers (pending first, then those handed off), newest first, for the control API.
    pub async fn list(&self) -> Result<Vec<HandoffView>, HandoffError> {
        let p = self.parts()?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        let offers = q
            .store
            .list_offers(ListFilter {
                states: vec![State::Offered, State::HandedOff],
                limit: 100,
            })
            .await
            .map_err(|e| HandoffError::from_store(0, e))?;
        let mut views: Vec<HandoffView> = offers
            .iter()
            .map(|(item, rec)| HandoffView::of(item, Some(rec)))
            .collect();
        views.sort_by_key(|v| (v.state != State::Offered, std::cmp::Reverse(v.id)));
        Ok(views)
    }

    /// One offer (or what its create became), for the control API.
    pub async fn get(&self, id: i64) -> Result<HandoffView, HandoffError> {
        let p = self.parts()?;
        let q = p.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(p.queue.error().unwrap_or_default().into())
        })?;
        let item = q
            .store
            .get(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?
            .ok_or(HandoffError::NotFound { id })?;
        let rec = q
            .store
            .hand_off_record(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?;
        Ok(HandoffView::of(&item, rec.as_ref()))
    }

    /// `status.handoffs`: from memory, no database read.
    pub fn status(&self) -> HandoffsStatus {
        let configured = self
            .parts
            .as_ref()
            .is_some_and(|p| p.live.get().local_agent.is_some());
        let now = now_ms();
        let Ok(m) = self.mirror.lock() else {
            return HandoffsStatus {
                configured,
                ..Default::default()
            };
        };
        let mut pending: Vec<PendingHandoff> = m
            .pending
            .iter()
            .map(|(id, o)| PendingHandoff {
                id: *id,
                rule: o.rule.clone(),
                offered_at: crate::time_fmt::rfc3339(at(o.offered_at_ms)),
                age_secs: (now.saturating_sub(o.offered_at_ms).max(0) / 1000) as u64,
                expires_in_secs: (o.expires_at_ms.saturating_sub(now).max(0) / 1000) as u64,
                repo: o.repo.clone(),
                excerpt: o.excerpt.clone(),
            })
            .collect();
        pending.sort_by_key(|o| o.id);
        HandoffsStatus {
            configured,
            pending,
            recent: m.recent.iter().cloned().collect(),
            counts: m.counts,
        }
    }

    /// Loads the offers a previous run left pending, then answers every offer whose time ran
    /// out (back to the queue), checking once a second while any is pending.
    pub(crate) fn start(self: &Arc<Self>) {
        let Some(p) = self.parts.as_ref() else { return };
        let mut stop = p.bus.stopping();
        let me = self.clone();
        p.bus.spawn(async move {
            me.load_pending().await;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => me.expire_due().await,
                    _ = stop.changed() => return,
                }
            }
        });
    }

    async fn load_pending(&self) {
        let Ok(views) = self.list().await else { return };
        // A command that was running when Weir stopped: its outcome was never recorded (the
        // command got no way to report back), so say so instead of "running" forever.
        if let Some(q) = self.parts.as_ref().and_then(|p| p.queue.open()) {
            for v in views
                .iter()
                .filter(|v| v.state == State::HandedOff && v.running)
            {
                let finish = Finish {
                    outcome: serde_json::to_value(runner::Outcome {
                        error: Some(
                            "Weir stopped while the local agent ran; its outcome is unknown".into(),
                        ),
                        ..Default::default()
                    })
                    .ok(),
                    finished_at: None,
                };
                if let Err(e) = q.store.record_hand_off_result(v.id, finish, now_ms()).await {
                    tracing::warn!(id = v.id, error = %e, "could not close an interrupted hand-off");
                }
            }
        }
        let Ok(mut m) = self.mirror.lock() else {
            return;
        };
        for v in views.into_iter().filter(|v| v.state == State::Offered) {
            m.pending.insert(
                v.id,
                Pending {
                    rule: v.rule.clone().unwrap_or_default(),
                    repo: v.repo.clone().unwrap_or_default(),
                    excerpt: excerpt(v.problem_statement.as_deref().unwrap_or_default()),
                    offered_at_ms: v.offered_at_ms,
                    expires_at_ms: v.expires_at_ms.unwrap_or(0),
                },
            );
        }
    }

    async fn expire_due(&self) {
        let now = now_ms();
        let due = self
            .mirror
            .lock()
            .map(|m| m.pending.values().any(|o| o.expires_at_ms <= now))
            .unwrap_or(false);
        if !due {
            return;
        }
        let Some(q) = self.parts.as_ref().and_then(|p| p.queue.open()) else {
            return;
        };
        let Ok(items) = q.store.expired_offers(now).await else {
            return;
        };
        for it in items {
            if let Err(e) = self.answer(it.id, HandoffChange::Expired).await {
                // Confirmed meanwhile: that answer stands.
                tracing::debug!(id = it.id, error = %e, "an offer could not expire");
            }
        }
        // Ids confirmed elsewhere or gone: stop looking at them.
        if let Ok(mut m) = self.mirror.lock() {
            m.pending.retain(|_, o| o.expires_at_ms > now - 60_000);
        }
    }

    fn take_pending(&self, id: i64) -> Option<Pending> {
        self.mirror.lock().ok()?.pending.remove(&id)
    }

    fn remember(&self, id: i64, outcome: HandoffOutcome, exit_code: Option<i32>, repo: &str) {
        remember(&self.mirror, id, outcome, exit_code, repo);
    }

    fn spec(
        &self,
        id: i64,
        item: &Item,
        record: &OfferRecord,
        agent: &crate::config::LocalAgentSettings,
        statement: &str,
    ) -> (runner::Spec, PathBuf) {
        let repo = item.repo.clone().unwrap_or_default();
        let (owner, name) = repo.split_once('/').unwrap_or(("", &repo));
        let file = self
            .parts
            .as_ref()
            .map(|p| p.dir.join(format!("offer-{id}.md")))
            .unwrap_or_default();
        let checkout = record.checkout.display().to_string();
        let file_s = file.display().to_string();
        let id_s = id.to_string();
        let base = record.base_branch.clone().unwrap_or_default();
        let values = [
            ("repo", repo.as_str()),
            ("owner", owner),
            ("name", name),
            ("checkout", checkout.as_str()),
            ("problem_statement", statement),
            ("problem_statement_file", file_s.as_str()),
            ("base_branch", base.as_str()),
            ("offer_id", id_s.as_str()),
        ];
        let argv = agent
            .command
            .iter()
            .map(|a| crate::config::local_agent_fill(a, &values))
            .collect();
        let mut env: BTreeMap<String, String> = [
            ("WEIR_HANDOFF_ID", id_s.clone()),
            ("WEIR_REPO", repo.clone()),
            ("WEIR_CHECKOUT", checkout.clone()),
            ("WEIR_PROBLEM_STATEMENT_FILE", file_s.clone()),
            ("WEIR_BASE_BRANCH", base.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(agent.env.clone());
        (
            runner::Spec {
                argv,
                cwd: record.checkout.clone(),
                env,
                timeout: agent.timeout,
            },
            file,
        )
    }
}

/// Records an answered offer in the mirror's recent results (newest first, bounded).
fn remember(
    mirror: &Mutex<Mirror>,
    id: i64,
    outcome: HandoffOutcome,
    exit_code: Option<i32>,
    repo: &str,
) {
    let Ok(mut m) = mirror.lock() else { return };
    m.counts.count(outcome);
    m.pending.remove(&id);
    m.recent.retain(|r| r.id != id);
    m.recent.push_front(HandoffResult {
        id,
        outcome,
        exit_code,
        at: crate::time_fmt::rfc3339(SystemTime::now()),
        repo: repo.to_string(),
    });
    m.recent.truncate(RECENT_HANDOFFS);
}

fn offer_for(id: i64, expires_at_ms: i64) -> Offer {
    Offer {
        id: id.to_string(),
        location: format!("/_weir/api/handoffs/{id}"),
        expires_at: at(expires_at_ms),
    }
}

/// A unique dedupe key for an offer made by hand (no create request behind it).
fn offer_key(req: &HandoffRequest, now_ms: i64) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let h =
        blake3::hash(format!("{}\n{}\n{now_ms}\n{n}", req.repo, req.problem_statement).as_bytes());
    h.to_hex()[..32].to_string()
}

fn handoff_event(change: HandoffChange, id: i64, o: &Pending, detail: String) -> Event {
    Event::Handoff {
        change,
        id,
        repo: o.repo.clone(),
        rule: o.rule.clone(),
        excerpt: o.excerpt.clone(),
        detail,
        at: SystemTime::now(),
    }
}

/// A confirmed offer's command, run off the request: writes the problem statement file
/// (0600), runs, records the outcome on the item, announces it, removes the file.
struct RunTask {
    queue: Arc<QueueState>,
    bus: Bus,
    mirror: Arc<Mutex<Mirror>>,
    dir: PathBuf,
}

impl RunTask {
    async fn run(
        self,
        id: i64,
        spec: runner::Spec,
        file: PathBuf,
        statement: String,
        pending: Pending,
    ) {
        let outcome = match write_private(&self.dir, &file, &statement) {
            Ok(()) => runner::run(spec).await,
            Err(e) => runner::Outcome {
                error: Some(format!("cannot write the problem statement file: {e}")),
                ..Default::default()
            },
        };
        if let Err(e) = std::fs::remove_file(&file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %file.display(), error = %e, "could not remove a problem statement file");
            }
        }
        tracing::info!(id, exit_code = ?outcome.exit_code, timed_out = outcome.timed_out, error = ?outcome.error, "the local agent ended");
        let finish = Finish {
            outcome: serde_json::to_value(&outcome).ok(),
            finished_at: Some(crate::time_fmt::rfc3339(SystemTime::now())),
        };
        if let Some(q) = self.queue.open() {
            if let Err(e) = q.store.record_hand_off_result(id, finish, now_ms()).await {
                tracing::warn!(id, error = %e, "could not record the local agent's outcome");
            }
        }
        let kind = if outcome.succeeded() {
            HandoffOutcome::Succeeded
        } else {
            HandoffOutcome::Failed
        };
        remember(&self.mirror, id, kind, outcome.exit_code, &pending.repo);
        self.bus.emit(handoff_event(
            HandoffChange::Finished,
            id,
            &pending,
            outcome.summary(),
        ));
    }
}

/// Writes `text` to `file` readable by the user only, in the private `dir`.
fn write_private(dir: &std::path::Path, file: &std::path::Path, text: &str) -> std::io::Result<()> {
    crate::paths::create_private_dir(dir)?;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    use std::io::Write;
    let mut f = o.open(file)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod option_tests {
    /// Issue 22, item 3: placeholders were filled verbatim, `-` and all.
    #[test]
    fn a_value_that_reads_as_an_option_is_refused() {
        let cmd: Vec<String> = [
            "agent",
            "--base",
            "{base_branch}",
            "-p",
            "{problem_statement}",
        ]
        .map(String::from)
        .to_vec();
        let ok = [("base_branch", "main"), ("problem_statement", "fix it")];
        assert_eq!(super::option_like(&cmd, &ok), None);
        let bad = [
            ("base_branch", "--allow-all-tools"),
            ("problem_statement", "x"),
        ];
        assert_eq!(super::option_like(&cmd, &bad), Some("base_branch"));
        let list = [
            ("base_branch", "main"),
            ("problem_statement", " - a list item"),
        ];
        assert_eq!(super::option_like(&cmd, &list), Some("problem_statement"));
        // A value the command does not use is never passed.
        let unused = [("owner", "-o"), ("problem_statement", "fine")];
        assert_eq!(super::option_like(&cmd, &unused), None);
    }
}
