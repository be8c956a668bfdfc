//! The hand-offs' background task: at start, the offers a previous run left pending (and
//! the runs it left unfinished, closed as unknown); then, while any offer is pending, it
//! sleeps until the first one runs out and answers it as expired. With none pending it
//! sleeps until an offer is made: a Weir without `[local_agent]` (no offer can be made)
//! never wakes for it.

use super::mirror::{excerpt, Pending};
use super::{runner, Handoffs};
use crate::events::HandoffChange;
use crate::queue::now_ms;
use std::sync::Arc;
use std::time::Duration;
use weir_store::{Finish, State};

/// An offer still pending after its expiry (its answer failed, or it was confirmed
/// elsewhere and is not answered here) is looked at again this often, for a minute.
const OVERDUE_AGAIN: Duration = Duration::from_secs(1);
/// The longest sleep before a pending offer's expiry: tokio's clock stops while the machine
/// sleeps and expiry times are wall clock, so a far expiry is looked at again within this.
const LONGEST_SLEEP: Duration = Duration::from_secs(300);

impl Handoffs {
    /// Loads the offers a previous run left pending, then answers every offer whose time ran
    /// out (back to the queue), waking when the first pending one runs out or an offer is
    /// made, and not at all while none is pending.
    pub(crate) fn start(self: &Arc<Self>) {
        let Some(p) = self.parts.as_ref() else { return };
        let mut stop = p.bus.stopping();
        let me = self.clone();
        p.bus.spawn(async move {
            me.load_pending().await;
            loop {
                let wait = me.next_expiry(now_ms());
                tokio::select! {
                    // A new offer (one stored permit: none is lost): look again.
                    _ = me.offered.notified() => continue,
                    _ = sleep_or_never(wait) => me.expire_due().await,
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// How long until the first pending offer runs out; `None` with none pending.
    fn next_expiry(&self, now: i64) -> Option<Duration> {
        let first = self
            .mirror
            .lock()
            .ok()?
            .pending
            .values()
            .map(|o| o.expires_at_ms)
            .min()?;
        Some(if first <= now {
            OVERDUE_AGAIN
        } else {
            Duration::from_millis((first - now) as u64).min(LONGEST_SLEEP)
        })
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
        if let Ok(mut m) = self.mirror.lock() {
            m.expiry_passes += 1;
        }
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
}

/// `wait`, or never (`None`: nothing to wait for).
async fn sleep_or_never(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LiveSettings, Settings};
    use crate::queue::{Queue, QueueState};

    /// A default Weir (no `[local_agent]`, so no offer can be made) with a queue: the expiry
    /// task loads what a previous run left (nothing) and then sleeps, waking not once in ten
    /// idle minutes (it used to look every second).
    #[tokio::test(start_paused = true)]
    async fn with_no_offer_pending_the_expiry_task_never_wakes() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = crate::secrets::SecretStore::Memory(Default::default());
        let queue = Queue::open(dir.path(), secrets).await.unwrap();
        let bus = crate::events::Bus::new();
        let settings = Settings::default();
        assert!(settings.local_agent.is_none());
        let h = Arc::new(Handoffs::new(
            Arc::new(QueueState::Open(queue)),
            bus.clone(),
            LiveSettings::new(settings),
            dir.path(),
        ));
        h.start();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(h.mirror.lock().unwrap().expiry_passes, 0);
        assert_eq!(h.next_expiry(now_ms()), None);
        assert_eq!(bus.tasks().len(), 1, "the task is there, asleep");
    }
}
