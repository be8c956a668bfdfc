//! Answering an offer without running anything: declined by the developer, or expired
//! (`local_agent.offer_ttl`). A create goes back to the queue; an offer made by hand is
//! withdrawn.

use super::mirror::{excerpt, handoff_event, remember, Pending};
use super::offer::record_of;
use super::{HandoffError, HandoffView, Handoffs};
use crate::events::HandoffChange;
use crate::queue::now_ms;
use crate::status::HandoffOutcome;
use weir_store::{Change, Item, State};

impl Handoffs {
    /// Declines offer `id`: the create goes back to the queue (or, made by hand, is
    /// withdrawn). Nothing runs.
    pub async fn decline(&self, id: i64) -> Result<HandoffView, HandoffError> {
        self.offered_item(id).await?;
        self.answer(id, HandoffChange::Declined).await
    }

    /// The offered item `id`, or why it cannot be answered.
    pub(super) async fn offered_item(&self, id: i64) -> Result<Item, HandoffError> {
        let p = self.parts()?;
        let q = p.open_queue()?;
        let item = super::item_in(q, id).await?;
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
    pub(super) async fn answer(
        &self,
        id: i64,
        change: HandoffChange,
    ) -> Result<HandoffView, HandoffError> {
        let p = self.parts()?;
        let q = p.open_queue()?;
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
}
