//! What this Weir keeps in memory about its hand-offs: the pending offers and the recent
//! results, read by `status.handoffs` without a database call, and the events announcing
//! each step.

use super::{at, Handoffs};
use crate::events::{Event, HandoffChange};
use crate::queue::now_ms;
use crate::status::{
    HandoffOutcome, HandoffResult, HandoffsStatus, PendingHandoff, EXCERPT_CHARS, RECENT_HANDOFFS,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::SystemTime;

/// Pending offers by item id, recent results (newest first, bounded) and the counts.
#[derive(Default)]
pub(super) struct Mirror {
    pub(super) pending: BTreeMap<i64, Pending>,
    pub(super) recent: VecDeque<HandoffResult>,
    pub(super) counts: crate::status::HandoffCounts,
    /// How many times the expiry task looked for offers that ran out (its wake-ups).
    pub(super) expiry_passes: u64,
}

/// A pending offer as the status and the events show it.
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) rule: String,
    pub(super) repo: String,
    pub(super) excerpt: String,
    pub(super) offered_at_ms: i64,
    pub(super) expires_at_ms: i64,
}

/// The first `EXCERPT_CHARS` characters of a problem statement (`…` when cut).
pub(super) fn excerpt(s: &str) -> String {
    let mut e: String = s.chars().take(EXCERPT_CHARS).collect();
    if s.chars().count() > EXCERPT_CHARS {
        e.push('…');
    }
    e
}

impl Handoffs {
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

    pub(super) fn take_pending(&self, id: i64) -> Option<Pending> {
        self.mirror.lock().ok()?.pending.remove(&id)
    }

    pub(super) fn remember(
        &self,
        id: i64,
        outcome: HandoffOutcome,
        exit_code: Option<i32>,
        repo: &str,
    ) {
        remember(&self.mirror, id, outcome, exit_code, repo);
    }
}

/// Records an answered offer in the mirror's recent results (newest first, bounded).
pub(super) fn remember(
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

pub(super) fn handoff_event(change: HandoffChange, id: i64, o: &Pending, detail: String) -> Event {
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
