//! Circuit breaker per upstream with resilience4j semantics: opens on failure rate *or*
//! slow-call rate over a time-based sliding window, waits (growing on repeated openings),
//! then lets a fixed number of half-open probes decide.
//!
//! Transitions are driven by calls rather than a timer task: `Open → HalfOpen` happens on the
//! first [`Breaker::try_acquire`] or [`Breaker::snapshot`] after the wait, so an idle breaker
//! costs nothing. Every transition is broadcast as a [`BreakerEvent`] with a reason in words.
//!
//! Permits carry the generation (transition count) they were issued in; an outcome reported
//! after the breaker has moved on is ignored, so a slow call that started while closed cannot
//! sway the verdict of a later half-open round.

mod config;
mod state;
#[cfg(test)]
mod tests;
mod verdict;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;
use tokio::time::Instant;

pub use config::{BreakerConfig, ConfigError};
pub use state::{BreakerEvent, BreakerSnapshot, Rejected, State};

use crate::backoff::Jitter;
use crate::kind::Kind;
use crate::window::TimeWindow;
use state::short_duration;
use verdict::{Calls, Probes, Verdict};

/// Hint given to callers refused because every half-open probe slot is taken: probes are
/// ordinary calls, so they usually finish within about this long.
pub const HALF_OPEN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Events buffered per subscriber before a slow one starts missing them.
const EVENT_CAPACITY: usize = 64;

/// A circuit breaker. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Breaker {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    config: BreakerConfig,
    events: broadcast::Sender<BreakerEvent>,
    inner: Mutex<Inner>,
    /// Cautious: others (GitHub Status, teammates' Weirs) report this upstream failing, so a
    /// closed breaker opens on the first failure instead of waiting for `minimum_calls`.
    cautious: AtomicBool,
}

struct Inner {
    phase: Phase,
    generation: u64,
    since: SystemTime,
    since_instant: Instant,
    reason: String,
    open_count: u32,
    opens_total: u64,
    window: TimeWindow<Calls>,
    jitter: Box<dyn Jitter>,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen(Probes),
}

impl Phase {
    fn state(&self) -> State {
        match self {
            Phase::Closed => State::Closed,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen(_) => State::HalfOpen,
        }
    }
}

/// Permission for one call. Report its outcome with [`Permit::record`]; dropping it unrecorded
/// (e.g. the client went away) releases a half-open probe slot without counting anything.
#[must_use = "a permit should be recorded, or dropped deliberately"]
pub struct Permit {
    shared: Arc<Shared>,
    generation: u64,
    probe: bool,
    recorded: bool,
}

impl Breaker {
    /// A closed breaker named `name` (shown in events, snapshots and rejections).
    /// `jitter` spreads the open wait: the actual wait is `w/2 + jitter.pick(w/2)` for the
    /// nominal wait `w`, so [`crate::NoJitter`] gives exactly `w`.
    pub fn new(
        name: impl Into<String>,
        config: BreakerConfig,
        jitter: impl Jitter + 'static,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let now = Instant::now();
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let inner = Inner {
            phase: Phase::Closed,
            generation: 0,
            since: SystemTime::now(),
            since_instant: now,
            reason: "new".to_owned(),
            open_count: 0,
            opens_total: 0,
            window: TimeWindow::new(config.window, config.window_buckets, now),
            jitter: Box::new(jitter),
        };
        Ok(Breaker {
            shared: Arc::new(Shared {
                name: name.into(),
                config,
                events,
                inner: Mutex::new(inner),
                cautious: AtomicBool::new(false),
            }),
        })
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The settings in use.
    pub fn config(&self) -> &BreakerConfig {
        &self.shared.config
    }

    /// Receives every future transition.
    pub fn subscribe(&self) -> broadcast::Receiver<BreakerEvent> {
        self.shared.events.subscribe()
    }

    /// Makes the breaker cautious (or not): while cautious, a closed breaker opens as soon as
    /// the failure rate trips, from the first call on (`minimum_calls` is not waited for).
    pub fn set_cautious(&self, on: bool) {
        self.shared.cautious.store(on, Ordering::Relaxed);
    }

    /// Whether [`Breaker::set_cautious`] is on.
    pub fn is_cautious(&self) -> bool {
        self.shared.cautious.load(Ordering::Relaxed)
    }

    /// Opens the breaker now for `cause` (evidence from outside this process, e.g. teammates'
    /// Weirs seeing the upstream fail): a closed breaker opens; an open one starts its next,
    /// longer wait now (their failures stand in for its probes). The usual open wait applies,
    /// then half-open probes decide as always. A half-open breaker is left alone (its probes
    /// are in flight). Returns whether it (re)opened.
    pub fn trip(&self, cause: &str) -> bool {
        let now = Instant::now();
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        self.shared.refresh(inner, now);
        if matches!(inner.phase, Phase::HalfOpen(_)) {
            return false;
        }
        self.shared.open(inner, cause.to_owned(), now);
        true
    }

    /// Asks to make one call.
    pub fn try_acquire(&self) -> Result<Permit, Rejected> {
        let now = Instant::now();
        let shared = &self.shared;
        let mut guard = shared.lock();
        let inner = &mut *guard;
        shared.refresh(inner, now);
        let generation = inner.generation;
        let permit = |probe| Permit {
            shared: Arc::clone(&self.shared),
            generation,
            probe,
            recorded: false,
        };
        let probes_allowed = shared.config.half_open_probes;
        match &mut inner.phase {
            Phase::Closed => Ok(permit(false)),
            Phase::HalfOpen(p) if p.admitted < probes_allowed => {
                p.admitted += 1;
                Ok(permit(true))
            }
            Phase::HalfOpen(_) => Err(shared.rejected(inner, HALF_OPEN_RETRY_AFTER)),
            Phase::Open { until } => {
                let wait = until.saturating_duration_since(now);
                Err(shared.rejected(inner, wait))
            }
        }
    }

    /// The current state (advancing `Open → HalfOpen` if the wait is over).
    pub fn state(&self) -> State {
        let mut inner = self.shared.lock();
        self.shared.refresh(&mut inner, Instant::now());
        inner.phase.state()
    }

    /// A point-in-time view (advancing `Open → HalfOpen` if the wait is over).
    pub fn snapshot(&self) -> BreakerSnapshot {
        let now = Instant::now();
        let mut inner = self.shared.lock();
        self.shared.refresh(&mut inner, now);
        let (calls, failures, slow) = match inner.phase {
            Phase::HalfOpen(p) => (u64::from(p.done), u64::from(p.failures), u64::from(p.slow)),
            _ => {
                let c = inner.window.sum(now);
                (c.calls, c.failures, c.slow)
            }
        };
        let rate = |n: u64| {
            if calls == 0 {
                0.0
            } else {
                n as f64 / calls as f64
            }
        };
        BreakerSnapshot {
            name: self.shared.name.clone(),
            state: inner.phase.state(),
            since: inner.since,
            reason: inner.reason.clone(),
            open_count: inner.open_count,
            opens_total: inner.opens_total,
            failure_rate: rate(failures),
            slow_rate: rate(slow),
            calls_in_window: calls,
            retry_after: match inner.phase {
                Phase::Open { until } => Some(until.saturating_duration_since(now)),
                _ => None,
            },
        }
    }
}

impl Permit {
    /// Reports the call's outcome. `failure`: the upstream failed (see
    /// [`Kind::counts_as_breaker_failure`]); `slow`: it took longer than the caller's
    /// slow-call duration for this request class.
    pub fn record(mut self, failure: bool, slow: bool) {
        self.recorded = true;
        self.shared
            .record(self.generation, self.probe, failure, slow);
    }

    /// [`Permit::record`] from a classified outcome: kinds that do not count as breaker
    /// failures (including `Auth`, `RateLimited`, `Fatal`) count as successes, because the
    /// upstream did answer.
    pub fn record_kind(self, kind: Kind, slow: bool) {
        self.record(kind.counts_as_breaker_failure(), slow);
    }

    /// Whether this permit is one of the half-open probes.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.recorded || !self.probe {
            return;
        }
        let mut inner = self.shared.lock();
        if inner.generation == self.generation {
            if let Phase::HalfOpen(p) = &mut inner.phase {
                p.admitted = p.admitted.saturating_sub(1);
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Poisoning means a panic elsewhere mid-update; the state is still a valid state
        // machine value, and refusing all traffic forever would be worse.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rejected(&self, inner: &Inner, retry_after: Duration) -> Rejected {
        Rejected {
            breaker: self.name.clone(),
            state: inner.phase.state(),
            retry_after,
            reason: inner.reason.clone(),
        }
    }

    /// Time-driven changes: the open wait ending, and growth forgotten after a long calm.
    fn refresh(&self, inner: &mut Inner, now: Instant) {
        match inner.phase {
            Phase::Open { until } if now >= until => {
                let waited = now.saturating_duration_since(inner.since_instant);
                let reason = format!(
                    "waited {}; letting {} probe call{} through",
                    short_duration(waited),
                    self.config.half_open_probes,
                    if self.config.half_open_probes == 1 {
                        ""
                    } else {
                        "s"
                    },
                );
                inner.window.clear();
                self.transition(inner, Phase::HalfOpen(Probes::default()), reason, now);
            }
            Phase::Closed
                if inner.open_count > 0
                    && now.saturating_duration_since(inner.since_instant)
                        >= self.config.reset_growth_after =>
            {
                inner.open_count = 0;
            }
            _ => {}
        }
    }

    fn record(&self, generation: u64, probe: bool, failure: bool, slow: bool) {
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.generation != generation {
            return; // issued before the last transition: stale
        }
        self.refresh(inner, now);
        match &mut inner.phase {
            Phase::Closed => {
                let slot = inner.window.current(now);
                slot.calls += 1;
                slot.failures += u64::from(failure);
                slot.slow += u64::from(slow);
                let sum = inner.window.sum(now);
                let verdict = if self.cautious.load(Ordering::Relaxed) {
                    let cautious = BreakerConfig {
                        minimum_calls: 1,
                        ..self.config.clone()
                    };
                    verdict::closed(&cautious, sum).map(|r| format!("{r} (cautious)"))
                } else {
                    verdict::closed(&self.config, sum)
                };
                if let Some(reason) = verdict {
                    self.open(inner, reason, now);
                }
            }
            Phase::HalfOpen(p) if probe => {
                p.done += 1;
                p.failures += u32::from(failure);
                p.slow += u32::from(slow);
                if p.done >= self.config.half_open_probes {
                    let p = *p;
                    self.half_open_verdict(inner, p, now);
                }
            }
            _ => {}
        }
    }

    fn half_open_verdict(&self, inner: &mut Inner, probes: Probes, now: Instant) {
        match verdict::half_open(&self.config, probes) {
            Verdict::Open(reason) => self.open(inner, reason, now),
            Verdict::Close(reason) => {
                inner.window.clear();
                self.transition(inner, Phase::Closed, reason, now);
            }
        }
    }

    fn open(&self, inner: &mut Inner, cause: String, now: Instant) {
        inner.open_count = inner.open_count.saturating_add(1);
        inner.opens_total += 1;
        let nominal = self.config.open_wait(inner.open_count);
        let half = nominal / 2;
        let wait = half + inner.jitter.pick(nominal - half).min(nominal - half);
        let reason = format!("{cause}; rejecting calls for {}", short_duration(wait));
        self.transition(inner, Phase::Open { until: now + wait }, reason, now);
    }

    fn transition(&self, inner: &mut Inner, to: Phase, reason: String, now: Instant) {
        let from = inner.phase.state();
        inner.phase = to;
        inner.generation += 1;
        inner.since = SystemTime::now();
        inner.since_instant = now;
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
