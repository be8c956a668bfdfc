//! The hand-offs' background task: at start, the offers a previous run left pending (and
//! the runs it left unfinished, closed as unknown); then, once a second while any is
//! pending, the offers whose time ran out are answered as expired.

use super::mirror::{excerpt, Pending};
use super::{runner, Handoffs};
use crate::events::HandoffChange;
use crate::queue::now_ms;
use std::sync::Arc;
use std::time::Duration;
use weir_store::{Finish, State};

impl Handoffs {
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
}
