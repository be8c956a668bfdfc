//! Local-agent hand-off (#14): a create that cannot reach the cloud, where policy says
//! `local`, is offered to the developer's configured local agent command instead of being
//! queued. Nothing runs until the developer confirms the offer (tray or dashboard).
//!
//! SKELETON: the types the policy phase calls; the offer store, confirmation and runner are
//! being built (see issue #14). `offer` refuses until then.

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
}

/// An offer waiting for the developer's confirmation.
#[derive(Debug, Clone)]
pub struct Offer {
    pub id: String,
    /// Where the offer can be seen and confirmed (`/_weir/api/handoffs/{id}`).
    pub location: String,
}

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("no local agent is configured: add a [local_agent] table with a command")]
    NotConfigured,
}

/// The engine's hand-off offers.
#[derive(Debug, Default)]
pub struct Handoffs {}

impl Handoffs {
    /// Offers a create to the local agent; it runs only after confirmation.
    pub async fn offer(&self, _req: HandoffRequest) -> Result<Offer, HandoffError> {
        Err(HandoffError::NotConfigured)
    }
}
