//! Making an offer: the policy phase's [`HandoffRequest`] (or an offer made by hand) parked
//! in the queue as `offered` with its record ([`OfferRecord`], the `offer` JSON of its offer
//! row), announced, and answered with an [`Offer`].

use super::mirror::{excerpt, handoff_event, Pending};
use super::{at, HandoffError, Handoffs, RequestingTool};
use crate::config::Settings;
use crate::events::HandoffChange;
use crate::queue::now_ms;
use std::path::PathBuf;
use std::time::SystemTime;
use weir_store::{HandOffRecord, NewItem, State, StoreError};

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

/// The offer's details: the `offer` JSON of its row in the offers table (opaque to the
/// store), kept after the offer is answered.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct OfferRecord {
    pub(super) rule: String,
    pub(super) checkout: PathBuf,
    pub(super) base_branch: Option<String>,
    /// A declined / expired offer goes back to the queue (it carries a real create).
    pub(super) requeue: bool,
    pub(super) expires_at: i64,
    /// The tool that sent the create (`None`: an offer made by hand). Shown before confirm.
    #[serde(default)]
    pub(super) tool: Option<RequestingTool>,
}

pub(super) fn record_of(rec: &HandOffRecord) -> Option<OfferRecord> {
    serde_json::from_value(rec.offer.clone()).ok()
}

impl Handoffs {
    /// Offers a create to the local agent; it runs only after [`Handoffs::confirm`].
    /// `NotConfigured` / `NoCheckout`: the caller queues the create as before. A call of its
    /// own (the control API's offer by hand): the settings in force at its start.
    pub async fn offer(&self, req: HandoffRequest) -> Result<Offer, HandoffError> {
        let settings = self.parts()?.live.get();
        self.offer_with(&settings, req).await
    }

    /// [`Handoffs::offer`] with the caller's settings snapshot: a create's request's, never
    /// re-read here, so a reload in between cannot turn the policy's `local` decision (made
    /// with that snapshot's `[local_agent]`) into `NotConfigured`.
    pub async fn offer_with(
        &self,
        settings: &Settings,
        req: HandoffRequest,
    ) -> Result<Offer, HandoffError> {
        let p = self.parts()?;
        let agent = settings
            .local_agent
            .as_ref()
            .ok_or(HandoffError::NotConfigured)?;
        let q = p.open_queue()?;
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
        self.offered.notify_one();
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
}

pub(super) fn offer_for(id: i64, expires_at_ms: i64) -> Offer {
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
