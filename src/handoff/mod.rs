//! Local-agent hand-off (#14): a create that cannot reach the cloud, where policy says
//! `local`, is offered to the developer's configured local agent command (`[local_agent]`)
//! instead of being queued. Nothing runs until the developer confirms the offer (tray or
//! dashboard), and then it runs exactly once.
//!
//! An offer is a row of the durable create queue parked in the state `offered` (its
//! credential in the keychain, as for a queued create), so it survives restarts and is never
//! lost, and the hand-off's record (the offer, the confirmation, the command's outcome) is
//! its row in the queue's own offers table (`weir_store::offer`,
//! [`HandOffRecord`](weir_store::HandOffRecord)):
//! - **confirm** moves it to `handed_off` and records the confirmation in one transaction
//!   *before* the command starts, so a second confirmation (or a second Weir) cannot start it
//!   again (409); the command's outcome is then recorded on the offer row;
//! - **decline**, or no answer within `local_agent.offer_ttl`, puts the create back in the
//!   queue (`queued`, replayed when the upstream is healthy); an offer made by hand (no
//!   create request behind it) is withdrawn (`cancelled`) instead.
//!
//! This file holds [`Handoffs`] and the parts it keeps; each step is its own module:
//! - `offer`: making an offer ([`HandoffRequest`] → [`Offer`]) and the record stored with it;
//! - `confirm`: the confirmation (the command's argv and environment filled from the offer,
//!   a value that reads as an option refused);
//! - `run_task`: the confirmed command's run off the request (the problem statement file,
//!   the outcome recorded on the offer row);
//! - `answer`: decline and expiry (back to the queue, or withdrawn);
//! - `expiry`: the background task (offers left by a previous run, offers that ran out);
//! - `mirror`: pending offers and recent results in memory, for `status.handoffs`;
//! - `view`: an offer as the control API shows it, listed or one by one;
//! - `error`: [`HandoffError`] and its HTTP status;
//! - `runner`: starts the command (argv, no shell, no credential, bounded output);
//! - `owner`: whether the requesting credential owns the repository; `tool`: which tool sent
//!   the create.

mod answer;
mod confirm;
mod error;
mod expiry;
mod mirror;
mod offer;
pub(crate) mod owner;
mod run_task;
mod runner;
mod tool;
mod view;

pub use error::HandoffError;
pub use offer::{CreateRequest, HandoffRequest, Offer};
pub use owner::NotOwn;
pub use tool::RequestingTool;
pub use view::HandoffView;

use crate::config::LiveSettings;
use crate::events::Bus;
use crate::queue::QueueState;
use mirror::Mirror;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The engine's hand-off offers: the offer store is the queue; this keeps the parts it needs
/// and an in-memory mirror of pending offers and recent results for the status (read
/// without a database call).
#[derive(Default)]
pub struct Handoffs {
    parts: Option<Parts>,
    mirror: Arc<Mutex<Mirror>>,
    /// An offer was made: the expiry task, asleep while none was pending, looks again.
    offered: tokio::sync::Notify,
}

struct Parts {
    queue: Arc<QueueState>,
    bus: Bus,
    live: LiveSettings,
    /// `<data dir>/handoffs` (0700): problem-statement files while a command runs.
    dir: PathBuf,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoffs")
            .field("wired", &self.parts.is_some())
            .finish()
    }
}

/// Unix ms as a time (a negative one reads as 1970).
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
            offered: tokio::sync::Notify::new(),
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
}

impl Parts {
    /// The queue that stores the offers, or why it could not be opened (503).
    fn open_queue(&self) -> Result<&crate::queue::Queue, HandoffError> {
        self.queue.open().ok_or_else(|| {
            HandoffError::QueueUnavailable(self.queue.error().unwrap_or_default().into())
        })
    }
}

/// Item `id` of queue `q`, or why not (a store error, or no such item).
async fn item_in(q: &crate::queue::Queue, id: i64) -> Result<weir_store::Item, HandoffError> {
    q.store
        .get(id)
        .await
        .map_err(|e| HandoffError::from_store(id, e))?
        .ok_or(HandoffError::NotFound { id })
}
