//! Circuit breaker per upstream. It opens on a run of consecutive failures (linkerd2-proxy's
//! accrual: what one developer's traffic produces), or on failure rate *or* slow-call rate over
//! a time-based sliding window (resilience4j: what a busy upstream produces); it waits (growing
//! on repeated openings), then lets a fixed number of half-open probes decide.
//!
//! Between closed and open sits **degraded**: calls flow, but recent ones failed or were slower
//! than their class's own baseline (see the `baseline` module) more than usual. While **cautious** (an
//! outside signal such as a GitHub Status incident, [`Breaker::set_cautious`]) fewer calls are
//! needed to open; caution never opens the breaker by itself.
//!
//! Transitions are driven by calls rather than a timer task: `Open → HalfOpen` happens on the
//! first [`Breaker::try_acquire`] or [`Breaker::snapshot`] after the wait, so an idle breaker
//! costs nothing. Every transition is broadcast as a [`BreakerEvent`] with its typed [`Reason`] (which
//! `Display`s as words).
//!
//! Permits carry the generation they were issued in; an outcome reported after the breaker has
//! left the closed side (or a half-open round ended) is ignored, so a slow call that started
//! while closed cannot sway the verdict of a later half-open round. `Closed ↔ Degraded` keeps
//! the generation: calls in flight across it still count.

mod baseline;
mod config;
mod machine;
mod reason;
mod state;
#[cfg(test)]
mod tests;
mod verdict;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;
use tokio::time::Instant;

pub use baseline::{ClassLatency, Slowness, Timing};
pub use config::{BreakerConfig, ConfigError};
pub use reason::Reason;
pub use state::{BreakerEvent, BreakerSnapshot, Rejected, State};

use crate::backoff::Jitter;
use crate::kind::Kind;
use crate::window::TimeWindow;
use baseline::Baseline;
use verdict::{Calls, Probes};

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
    events: broadcast::Sender<BreakerEvent>,
    /// Fired by the first outcome recorded after [`Breaker::arm_activity`] (see there).
    activity: tokio::sync::Notify,
    inner: Mutex<Inner>,
}

struct Inner {
    /// Under the same lock as the state, so a [`Breaker::reconfigure`] never lands halfway
    /// through a verdict.
    config: BreakerConfig,
    phase: Phase,
    generation: u64,
    since: SystemTime,
    since_instant: Instant,
    /// When the breaker last came back to the closed side (creation, or a half-open round that
    /// closed); `Closed ↔ Degraded` does not move it, so growth still resets on time.
    closed_since: Instant,
    reason: Reason,
    open_count: u32,
    opens_total: u64,
    window: TimeWindow<Calls>,
    /// Failures in a row on the closed side.
    consecutive: u32,
    /// Closed-side permits of this generation not yet recorded or dropped.
    outstanding: u32,
    /// Why the thresholds are lowered, if they are.
    caution: Option<String>,
    /// Latency baselines by the caller's class key.
    baselines: BTreeMap<&'static str, Baseline>,
    jitter: Box<dyn Jitter>,
    /// The next recorded outcome fires `activity` (one bool test per outcome, under the lock
    /// it already holds; the notification itself only once per arming).
    armed: bool,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    Degraded,
    Open { until: Instant },
    HalfOpen(Probes),
}

impl Phase {
    fn state(&self) -> State {
        match self {
            Phase::Closed => State::Closed,
            Phase::Degraded => State::Degraded,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen(_) => State::HalfOpen,
        }
    }

    /// Calls flow and are counted in the window.
    fn is_closed_side(&self) -> bool {
        matches!(self, Phase::Closed | Phase::Degraded)
    }
}

/// Permission for one call. Report its outcome with [`Permit::record`] (or
/// [`Permit::record_latency`]); dropping it unrecorded (e.g. the client went away) releases a
/// half-open probe slot without counting anything.
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
            window: TimeWindow::new(config.window, config.window_buckets, now),
            config,
            phase: Phase::Closed,
            generation: 0,
            since: SystemTime::now(),
            since_instant: now,
            closed_since: now,
            reason: Reason::New,
            open_count: 0,
            opens_total: 0,
            consecutive: 0,
            outstanding: 0,
            caution: None,
            baselines: BTreeMap::new(),
            jitter: Box::new(jitter),
            armed: false,
        };
        Ok(Breaker {
            shared: Arc::new(Shared {
                name: name.into(),
                events,
                activity: tokio::sync::Notify::new(),
                inner: Mutex::new(inner),
            }),
        })
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The settings in use.
    pub fn config(&self) -> BreakerConfig {
        self.shared.lock().config.clone()
    }

    /// Applies new settings in place: the state (closed, open with its wait, half-open with
    /// its probes), the opening count and the event subscribers are kept, so a settings change
    /// never resets a breaker. The window keeps its counts unless its length or resolution
    /// changed (then it starts empty: old buckets do not fit the new shape).
    pub fn reconfigure(&self, config: BreakerConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let mut inner = self.shared.lock();
        if (config.window, config.window_buckets)
            != (inner.config.window, inner.config.window_buckets)
        {
            inner.window = TimeWindow::new(config.window, config.window_buckets, Instant::now());
        }
        inner.config = config;
        Ok(())
    }

    /// Receives every future transition.
    pub fn subscribe(&self) -> broadcast::Receiver<BreakerEvent> {
        self.shared.events.subscribe()
    }

    /// Asks for one wake-up at the next recorded outcome ([`Breaker::activity`]): a watcher
    /// that sleeps while the breaker is quiet learns that calls flow again (its window, and
    /// so its failure rate, changes with them) without polling and without a signal per call.
    pub fn arm_activity(&self) {
        self.shared.lock().armed = true;
    }

    /// Resolves once an outcome was recorded after [`Breaker::arm_activity`] (or at once if
    /// one was since the last wait: the wake-up is kept, never lost to a race).
    pub async fn activity(&self) {
        self.shared.activity.notified().await;
    }

    /// Makes the breaker cautious (or not): while cautious, `cautious_minimum_calls` and
    /// `cautious_consecutive_failures` replace the normal thresholds. The change itself never
    /// moves the breaker: only the next recorded outcome is judged with the new thresholds.
    pub fn set_cautious(&self, cautious: bool) {
        self.set_caution(cautious.then(|| "cautious".to_owned()));
    }

    /// [`Breaker::set_cautious`] with the reason in words (`None`: not cautious), shown in the
    /// snapshot and quoted when the breaker opens while cautious.
    pub fn set_caution(&self, reason: Option<String>) {
        let mut inner = self.shared.lock();
        if inner.caution != reason {
            tracing::info!(breaker = %self.shared.name, caution = ?reason, "breaker caution");
            inner.caution = reason;
        }
    }

    /// Whether the breaker is cautious now.
    pub fn is_cautious(&self) -> bool {
        self.shared.lock().caution.is_some()
    }

    /// Opens the breaker now for `cause` (evidence from outside this process, e.g. teammates'
    /// Weirs seeing the upstream fail): a closed or degraded breaker opens; an open one starts
    /// its next, longer wait now (their failures stand in for its probes). The usual open wait
    /// applies, then half-open probes decide as always. A half-open breaker is left alone (its
    /// probes are in flight). Returns whether it (re)opened.
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
        self.acquire(false)
    }

    /// Asks to *retry* a call that just failed. Refused, even while closed, when a run of
    /// failures is under way and the calls already in flight could finish it: a retry must
    /// not pile onto an upstream that is about to be declared down, so at most
    /// `consecutive_failures` calls reach a failing upstream before the breaker opens.
    pub fn try_acquire_retry(&self) -> Result<Permit, Rejected> {
        self.acquire(true)
    }

    fn acquire(&self, retry: bool) -> Result<Permit, Rejected> {
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
        let probes_allowed = inner.config.half_open_probes;
        let run = inner
            .config
            .consecutive_failures_for(inner.caution.is_some());
        match &mut inner.phase {
            Phase::Closed | Phase::Degraded
                if retry
                    && run > 0
                    && inner.consecutive > 0
                    && inner.consecutive + inner.outstanding >= run =>
            {
                Err(shared.rejected(inner, HALF_OPEN_RETRY_AFTER))
            }
            Phase::Closed | Phase::Degraded => {
                inner.outstanding += 1;
                Ok(permit(false))
            }
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

    /// Every class's remembered good latencies, oldest first: what a restart should not have
    /// to relearn (see [`Breaker::restore_baseline`]).
    pub fn baselines(&self) -> Vec<(&'static str, Vec<Duration>)> {
        let inner = self.shared.lock();
        inner
            .baselines
            .iter()
            .map(|(class, b)| (*class, b.samples()))
            .filter(|(_, v)| !v.is_empty())
            .collect()
    }

    /// Puts back `class`'s latencies kept from an earlier run, as older than any this run has
    /// learned (bounded by `baseline_samples`).
    pub fn restore_baseline(&self, class: &'static str, samples: &[Duration]) {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        inner
            .baselines
            .entry(class)
            .or_default()
            .restore(&inner.config, samples);
    }

    /// A point-in-time view (advancing `Open → HalfOpen` if the wait is over).
    pub fn snapshot(&self) -> BreakerSnapshot {
        let now = Instant::now();
        let mut inner = self.shared.lock();
        self.shared.refresh(&mut inner, now);
        let config = &inner.config.clone();
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
        let cautious = inner.caution.is_some();
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
            consecutive_failures: inner.consecutive,
            consecutive_threshold: config.consecutive_failures_for(cautious),
            minimum_calls: config.minimum_calls_for(cautious),
            caution: inner.caution.clone(),
            latency: inner
                .baselines
                .iter()
                .map(|(class, b)| b.view(class, config))
                .collect(),
        }
    }
}

impl Permit {
    /// Reports the call's outcome. `failure`: the upstream failed (see
    /// [`Kind::counts_as_breaker_failure`]); `slow`: it took longer than the caller's
    /// slow-call duration for this request class (counts toward opening and degraded).
    pub fn record(mut self, failure: bool, slow: bool) {
        self.recorded = true;
        let judged = Slowness {
            slow,
            too_slow: slow,
        };
        self.shared.record(
            self.generation,
            self.probe,
            failure,
            tokio::time::Instant::now(),
            |_| judged,
        );
    }

    /// Reports the call's outcome with its latency: `class` names the request class whose
    /// baseline judges it (see the `baseline` module), `timing` carries the class's normal
    /// latency (the baseline until enough good calls are seen) and absolute slow-call cut-off.
    /// Returns how the call was judged.
    pub fn record_latency(
        self,
        failure: bool,
        class: &'static str,
        elapsed: Duration,
        timing: Timing,
    ) -> Slowness {
        self.record_latency_at(failure, class, elapsed, timing, tokio::time::Instant::now())
    }

    /// [`Permit::record_latency`] for a call that ended at `now` (the caller read the clock
    /// for `elapsed`: one read, not two).
    pub fn record_latency_at(
        mut self,
        failure: bool,
        class: &'static str,
        elapsed: Duration,
        timing: Timing,
        now: tokio::time::Instant,
    ) -> Slowness {
        self.recorded = true;
        // Judged and counted under one lock (the baseline learns from a stale permit's call
        // too: its latency is as real as any other's).
        self.shared
            .record(self.generation, self.probe, failure, now, |inner| {
                inner.baselines.entry(class).or_default().judge(
                    &inner.config,
                    failure,
                    elapsed,
                    timing,
                )
            })
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
        if self.recorded {
            return;
        }
        let mut inner = self.shared.lock();
        if inner.generation == self.generation {
            match &mut inner.phase {
                Phase::HalfOpen(p) if self.probe => p.admitted = p.admitted.saturating_sub(1),
                Phase::Closed | Phase::Degraded if !self.probe => {
                    inner.outstanding = inner.outstanding.saturating_sub(1);
                }
                _ => {}
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
}
