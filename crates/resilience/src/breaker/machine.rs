//! The breaker's state machine: outcomes in, transitions (and their events) out. Pure
//! decisions live in [`super::verdict`]; this file applies them to the shared state.

use tokio::time::Instant;

use super::baseline::Slowness;
use super::reason::Reason;
use super::state::BreakerEvent;
use super::verdict::{self, Calls, Probes, Verdict};
use super::{Inner, Phase, Shared};

impl Shared {
    /// Time-driven changes: the open wait ending, a degraded breaker whose window emptied, and
    /// growth forgotten after a long calm.
    pub(super) fn refresh(&self, inner: &mut Inner, now: Instant) {
        match inner.phase {
            Phase::Open { until } if now >= until => {
                let reason = Reason::Probing {
                    waited: now.saturating_duration_since(inner.since_instant),
                    probes: inner.config.half_open_probes,
                };
                inner.window.clear();
                self.transition(inner, Phase::HalfOpen(Probes::default()), reason, now);
            }
            Phase::Degraded if inner.window.sum(now).calls == 0 => {
                // Nothing recent to judge by: an old slowdown should not stay on the tray.
                let reason = Reason::Idle {
                    window: inner.config.window,
                };
                self.set_health(inner, Phase::Closed, reason);
            }
            _ => {}
        }
        if inner.phase.is_closed_side()
            && inner.open_count > 0
            && now.saturating_duration_since(inner.closed_since) >= inner.config.reset_growth_after
        {
            inner.open_count = 0;
        }
    }

    /// Records one call's outcome; `judge` says how slow it was, under the same lock.
    pub(super) fn record(
        &self,
        generation: u64,
        probe: bool,
        failure: bool,
        now: Instant,
        judge: impl FnOnce(&mut Inner) -> Slowness,
    ) -> Slowness {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.armed {
            inner.armed = false;
            self.activity.notify_one();
        }
        let judged = judge(inner);
        if inner.generation != generation {
            return judged; // issued before the last transition: stale
        }
        self.refresh(inner, now);
        match &mut inner.phase {
            Phase::Closed | Phase::Degraded => {
                inner.outstanding = inner.outstanding.saturating_sub(1);
                let epoch = inner.window.epoch(now);
                // Counted, and the window's sum after it (kept in step: not every bucket
                // added up again per call).
                let sum = inner.window.add_at(
                    epoch,
                    &Calls {
                        calls: 1,
                        failures: u64::from(failure),
                        slow: u64::from(judged.slow),
                        too_slow: u64::from(judged.too_slow),
                    },
                );
                inner.consecutive = if failure {
                    inner.consecutive.saturating_add(1)
                } else {
                    0
                };
                let counts = verdict::Closed {
                    sum,
                    consecutive: inner.consecutive,
                    cautious: inner.caution.is_some(),
                };
                if let Some(cause) = verdict::closed(&inner.config, counts) {
                    let cause = match &inner.caution {
                        Some(why) => format!("{cause} (cautious: {why})"),
                        None => cause,
                    };
                    self.open(inner, cause, now);
                    return judged;
                }
                match (inner.phase, verdict::degraded(&inner.config, sum)) {
                    (Phase::Closed, Some(h)) if h.is_degraded() => {
                        let why = h.reason(&inner.config);
                        self.set_health(inner, Phase::Degraded, Reason::Degraded(why));
                    }
                    (Phase::Degraded, Some(h)) if !h.is_degraded() => {
                        let why = h.reason(&inner.config);
                        self.set_health(inner, Phase::Closed, Reason::Recovered(why));
                    }
                    _ => {}
                }
            }
            Phase::HalfOpen(p) if probe => {
                p.done += 1;
                p.failures += u32::from(failure);
                // Probes decide open/close, so only the absolute cut-off counts here.
                p.slow += u32::from(judged.too_slow);
                if p.done >= inner.config.half_open_probes {
                    let p = *p;
                    self.half_open_verdict(inner, p, now);
                }
            }
            _ => {}
        }
        judged
    }

    fn half_open_verdict(&self, inner: &mut Inner, probes: Probes, now: Instant) {
        match verdict::half_open(&inner.config, probes) {
            Verdict::Open(reason) => self.open(inner, reason, now),
            Verdict::Close(reason) => {
                inner.window.clear();
                inner.consecutive = 0;
                inner.closed_since = now;
                self.transition(inner, Phase::Closed, Reason::ProbesPassed(reason), now);
            }
        }
    }

    pub(super) fn open(&self, inner: &mut Inner, cause: String, now: Instant) {
        inner.open_count = inner.open_count.saturating_add(1);
        inner.opens_total += 1;
        inner.consecutive = 0;
        let nominal = inner.config.open_wait(inner.open_count);
        let half = nominal / 2;
        let wait = half + inner.jitter.pick(nominal - half).min(nominal - half);
        let reason = Reason::Opened { cause, wait };
        self.transition(inner, Phase::Open { until: now + wait }, reason, now);
    }

    /// A change that moves permits' generation: in-flight outcomes of the old phase are
    /// ignored from now on.
    fn transition(&self, inner: &mut Inner, to: Phase, reason: Reason, now: Instant) {
        inner.generation += 1;
        // Permits of the old generation no longer count for anything.
        inner.outstanding = 0;
        inner.since_instant = now;
        self.announce(inner, to, reason);
    }

    /// `Closed ↔ Degraded`: calls keep flowing and keep counting, so the generation stays.
    fn set_health(&self, inner: &mut Inner, to: Phase, reason: Reason) {
        self.announce(inner, to, reason);
    }

    fn announce(&self, inner: &mut Inner, to: Phase, reason: Reason) {
        let from = inner.phase.state();
        inner.phase = to;
        inner.since = std::time::SystemTime::now();
        inner.reason.clone_from(&reason);
        tracing::info!(breaker = %self.name, %from, to = %to.state(), %reason, "circuit breaker transition");
        let event = BreakerEvent {
            breaker: self.name.clone(),
            from,
            to: to.state(),
            at: inner.since,
            reason,
        };
        // Sending fails only when nobody subscribed, which is a normal situation.
        if self.events.send(event).is_err() {
            tracing::trace!(breaker = %self.name, "no breaker event subscribers");
        }
    }
}
