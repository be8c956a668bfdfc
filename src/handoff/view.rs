//! An offer as `GET /_weir/api/handoffs` shows it (behind the control secret: it names the
//! repository and carries the problem statement), read from its queue item and its row in the
//! offers table (`weir_store::HandOffRecord`): listed ([`Handoffs::list`], one join) or one by
//! one ([`Handoffs::get`]).

use super::offer::record_of;
use super::{HandoffError, Handoffs};
use serde::Serialize;
use weir_store::{HandOffRecord, Item, ListFilter, State};

/// One offer, or what its create became.
#[derive(Debug, Clone, Serialize)]
pub struct HandoffView {
    /// The offer's id (the create's queue item id).
    pub id: i64,
    /// `offered` (waiting), `handed_off` (confirmed), or, once declined or expired, the
    /// create's queue state (`queued`, `cancelled`, …).
    pub state: State,
    pub upstream: String,
    pub repo: Option<String>,
    pub problem_statement: Option<String>,
    /// The policy rule that chose `local`.
    pub rule: Option<String>,
    /// The checkout the command runs in.
    pub checkout: Option<String>,
    pub base_branch: Option<String>,
    pub offered_at: String,
    #[serde(skip)]
    pub offered_at_ms: i64,
    /// The tool whose create this is (`User-Agent`, surface); `None` for an offer made by
    /// hand. Shown with the full statement before the developer confirms.
    pub requested_by: Option<super::RequestingTool>,
    /// When an unanswered offer goes back to the queue (offered only).
    pub expires_at: Option<String>,
    #[serde(skip)]
    pub expires_at_ms: Option<i64>,
    /// Declined or expired, the create goes back to the queue (`false`: an offer made by
    /// hand, withdrawn instead).
    pub back_to_queue: bool,
    /// Confirmed and the command has not ended yet.
    pub running: bool,
    /// How the command ended: `exit_code`, `timed_out`, `error`, `output_tail` (bounded,
    /// tokens blanked).
    pub outcome: Option<serde_json::Value>,
    /// Why the create left the offer (declined, expired) when it did.
    pub note: Option<String>,
    /// `/_weir/api/handoffs/{id}`.
    pub location: String,
}

impl HandoffView {
    /// `rec`: the item's offer row (`None`: it was never offered, or not in this queue).
    pub(crate) fn of(item: &Item, rec: Option<&HandOffRecord>) -> HandoffView {
        let record = rec.and_then(record_of);
        let offered = item.state == State::Offered;
        HandoffView {
            id: item.id,
            state: item.state,
            upstream: item.upstream.to_string(),
            repo: item.repo.clone(),
            problem_statement: item.problem_statement.clone(),
            rule: record.as_ref().map(|r| r.rule.clone()),
            checkout: record.as_ref().map(|r| r.checkout.display().to_string()),
            base_branch: record.as_ref().and_then(|r| r.base_branch.clone()),
            requested_by: record.as_ref().and_then(|r| r.tool.clone()),
            offered_at: crate::time_fmt::rfc3339(super::at(item.created_at)),
            offered_at_ms: item.created_at,
            expires_at: record
                .as_ref()
                .filter(|_| offered)
                .map(|r| crate::time_fmt::rfc3339(super::at(r.expires_at))),
            expires_at_ms: record.as_ref().filter(|_| offered).map(|r| r.expires_at),
            back_to_queue: record.as_ref().is_some_and(|r| r.requeue),
            running: rec.is_some_and(|r| r.running),
            outcome: rec.and_then(|r| r.outcome.clone()),
            note: (!offered && item.state != State::HandedOff)
                .then(|| item.last_error.clone())
                .flatten(),
            location: format!("/_weir/api/handoffs/{}", item.id),
        }
    }
}

impl Handoffs {
    /// Offers (pending first, then those handed off), newest first, for the control API.
    pub async fn list(&self) -> Result<Vec<HandoffView>, HandoffError> {
        let p = self.parts()?;
        let q = p.open_queue()?;
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
        let q = p.open_queue()?;
        let item = super::item_in(q, id).await?;
        let rec = q
            .store
            .hand_off_record(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?;
        Ok(HandoffView::of(&item, rec.as_ref()))
    }
}
