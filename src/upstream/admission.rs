//! Admission: may an attempt go to this upstream now? Cooldown (the upstream asked for a
//! pause: for everyone, or for the one identity whose quota ran out) → breaker (recent calls
//! failed or were slow) → bulkhead (too many in flight). Every surface on the laptop, and every
//! replay, passes the same gate.

use super::caution::{Caution, CautionSource, Cautions};
use super::identity_cooldown::IdentityCooldowns;
use crate::config::{Family, ResilienceSettings, UpstreamSettings};
use crate::identity::Identity;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use weir_resilience::{
    Backoff, Breaker, BreakerSnapshot, Bulkhead, BulkheadPermit, Cooldown, FullJitter, Jitter,
    Kind, NoJitter, Permit, RetryBudget,
};

/// The longest pause Weir honours (a hint beyond it is clamped, so `Instant + wait` cannot
/// overflow and a bogus header cannot lock an identity out for days).
const MAX_COOLDOWN: Duration = Duration::from_secs(24 * 3600);

/// The shared failure state of one upstream.
pub(crate) struct Gate {
    pub name: String,
    /// The upstream's own breaker ([`Family::Upstream`]).
    pub breaker: Breaker,
    /// The other route families' breakers, made at their first call (a handful at most: the
    /// families are a fixed enum), so that one failing family holds back only itself.
    families: Mutex<Vec<(Family, Breaker)>>,
    /// How a family breaker is made: the settings and jitter of the upstream's own.
    breaker_config: Mutex<(weir_resilience::BreakerConfig, bool)>,
    pub budget: RetryBudget,
    cooldown: Cooldown,
    bulkhead: Bulkhead,
    /// Backoff and whether it is jittered (`[retry]`), replaced whole by [`Gate::apply`].
    retry: Mutex<(Backoff, bool)>,
    /// What set the current cooldown (rate limited → 429, overloaded → 503).
    cooldown_kind: Mutex<Option<Kind>>,
    /// Per-identity holds: GitHub's rate limits are per user.
    identity_cooldowns: IdentityCooldowns,
    /// Outside signals that lower the breaker's thresholds while they last.
    cautions: Mutex<Cautions>,
    /// When the upstream-wide pause this Weir was asked for itself ends (wall clock, for team
    /// signals: a pause learned from a teammate is not re-published as this Weir's own).
    local_cooldown_until: Mutex<Option<SystemTime>>,
    /// Attempts the upstream answered without a breaker failure: local evidence that it works
    /// (team signals yield to it).
    successes: Arc<AtomicU64>,
    /// Gateway replicas: where this gate's upstream-wide holds are announced to the others
    /// (`gateway::signals`); unset on a laptop.
    pub shared: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<SharedHold>>,
}

/// An upstream-wide hold to share with the other gateway replicas.
#[cfg_attr(not(feature = "gateway"), allow(dead_code))]
#[derive(Debug, Clone)]
pub(crate) struct SharedHold {
    pub upstream: String,
    pub wait: Duration,
    /// `true`: this replica's breaker opened; `false`: the upstream asked for a pause.
    pub breaker: bool,
}

/// An attempt that passed the gate: its breaker permit (to record the outcome) and its
/// bulkhead slot (released when dropped).
pub(crate) struct Admitted {
    permit: Permit,
    _slot: BulkheadPermit,
    successes: Arc<AtomicU64>,
}

impl Admitted {
    /// Records the attempt's outcome and latency with the breaker (judged against `class`'s
    /// baseline or its prior, with the class's absolute `slow_call`) and frees the bulkhead slot.
    /// `ended`: when the attempt ended (the clock read that gave `elapsed`).
    pub fn record(
        self,
        failure: bool,
        class: &'static str,
        elapsed: Duration,
        timing: weir_resilience::Timing,
        ended: tokio::time::Instant,
    ) -> weir_resilience::Slowness {
        if !failure {
            self.successes.fetch_add(1, Ordering::Relaxed);
        }
        self.permit
            .record_latency_at(failure, class, elapsed, timing, ended)
    }
}

/// Why an attempt was not sent (its words and its problem: [`super::attempt_error`]).
#[derive(Debug)]
pub(crate) enum Closed {
    Cooldown(Duration, Kind),
    /// This caller's identity is rate limited (others may still pass).
    IdentityCooldown(Duration),
    Breaker(weir_resilience::Rejected),
    Shed(weir_resilience::Shed),
}

impl Gate {
    pub fn new(u: &UpstreamSettings, r: &ResilienceSettings) -> Result<Gate, String> {
        let breaker = if r.breaker_jitter {
            Breaker::new(&u.name, r.breaker.clone(), FullJitter)
        } else {
            Breaker::new(&u.name, r.breaker.clone(), NoJitter)
        }
        .map_err(|e| e.to_string())?;
        Ok(Gate {
            name: u.name.clone(),
            breaker,
            families: Mutex::new(Vec::new()),
            breaker_config: Mutex::new((r.breaker.clone(), r.breaker_jitter)),
            budget: RetryBudget::new(r.budget),
            cooldown: Cooldown::new(),
            bulkhead: Bulkhead::new(r.bulkhead),
            retry: Mutex::new(retry_of(r)),
            cooldown_kind: Mutex::new(None),
            identity_cooldowns: IdentityCooldowns::default(),
            cautions: Mutex::new(Cautions::default()),
            local_cooldown_until: Mutex::new(None),
            successes: Arc::new(AtomicU64::new(0)),
            shared: std::sync::OnceLock::new(),
        })
    }

    /// Reconfigures breaker, retry budget, backoff and bulkhead in place from new settings:
    /// the breaker keeps its state (an open breaker stays open), calls in flight keep their
    /// bulkhead slots, cooldowns stand. Settings were validated, so a refusal here is a bug
    /// and is logged, keeping the old breaker settings.
    pub fn apply(&self, r: &ResilienceSettings) {
        if let Err(e) = self.breaker.reconfigure(r.breaker.clone()) {
            tracing::error!(upstream = %self.name, error = %e, "breaker settings refused; keeping the old ones");
        }
        if let Ok(mut c) = self.breaker_config.lock() {
            *c = (r.breaker.clone(), r.breaker_jitter);
        }
        if let Ok(families) = self.families.lock() {
            for (_, b) in families.iter() {
                // Validated with the upstream's own just above: a refusal was logged there.
                let _ = b.reconfigure(r.breaker.clone());
            }
        }
        self.budget.reconfigure(r.budget);
        self.bulkhead.reconfigure(r.bulkhead);
        if let Ok(mut retry) = self.retry.lock() {
            *retry = retry_of(r);
        }
    }

    /// The backoff between retries now.
    pub fn backoff(&self) -> Backoff {
        self.retry.lock().map_or_else(|e| e.into_inner().0, |r| r.0)
    }

    /// A pause the upstream asked for still runs: everyone's, or `who`'s own (the policy
    /// graph's `cooldown` situation).
    pub fn cooling(&self, who: Option<&Identity>) -> bool {
        self.cooldown.remaining().is_some()
            || who.is_some_and(|w| self.identity_cooldowns.remaining(w).is_some())
    }

    // Read by team signals only (`team::link` publishes it).
    #[cfg(feature = "team")]
    /// Attempts the upstream answered without a breaker failure, since start.
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Relaxed)
    }

    #[cfg(feature = "team")]
    /// The end of the upstream-wide pause this Weir's own upstream answers asked for, with its
    /// kind, while it lasts (what team signals publish).
    pub fn local_cooldown(&self) -> Option<(SystemTime, Kind)> {
        let until = self.local_cooldown_until.lock().ok().and_then(|u| *u)?;
        if until <= SystemTime::now() || self.cooldown.remaining().is_none() {
            return None;
        }
        let kind = self
            .cooldown_kind
            .lock()
            .ok()
            .and_then(|k| *k)
            .unwrap_or(Kind::RateLimited);
        Some((until, kind))
    }

    // Team signals and, through `hold_from_peer`, the gateway's replicas.
    #[cfg(any(feature = "team", feature = "gateway"))]
    /// Honours a pause a teammate's Weir was asked for (upstream-wide), through the same
    /// cooldown as a local one; not re-published as this Weir's own.
    pub fn honour_peer_cooldown(&self, wait: Duration, kind: Kind) {
        if let Ok(mut k) = self.cooldown_kind.lock() {
            *k = Some(kind);
        }
        self.cooldown.hold_for(wait.min(MAX_COOLDOWN));
    }

    pub fn jitter(&self) -> Box<dyn Jitter> {
        let jittered = self.retry.lock().map_or(true, |r| r.1);
        if jittered {
            Box::new(FullJitter)
        } else {
            Box::new(NoJitter)
        }
    }

    /// The breaker `family`'s calls count against: the upstream's own, or the family's
    /// (made now, at its first call, with the upstream's breaker settings).
    pub fn breaker_of(&self, family: Family) -> Breaker {
        if family == Family::Upstream {
            return self.breaker.clone();
        }
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = families.iter().find(|(f, _)| *f == family) {
            return b.clone();
        }
        let (config, jitter) = self
            .breaker_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        let name = format!("{}/{}", self.name, family.as_str());
        let made = if jitter {
            Breaker::new(&name, config, FullJitter)
        } else {
            Breaker::new(&name, config, NoJitter)
        };
        // Validated settings (the upstream's own breaker was built from them).
        let b = match made {
            Ok(b) => b,
            Err(_) => return self.breaker.clone(),
        };
        families.push((family, b.clone()));
        b
    }

    /// Cooldown (upstream-wide, then `who`'s own) → `family`'s breaker → bulkhead. `who` is
    /// `None` for a request without a credential. Waits for a bulkhead slot (bounded queue);
    /// never waits on the breaker or a cooldown. A `retry` may be held back by the breaker
    /// during a failing run (see [`Breaker::try_acquire_retry`]).
    pub async fn admit_attempt(
        &self,
        who: Option<&Identity>,
        retry: bool,
        family: Family,
    ) -> Result<Admitted, Closed> {
        if let Some(rem) = self.cooldown.remaining() {
            let kind = self
                .cooldown_kind
                .lock()
                .ok()
                .and_then(|k| *k)
                .unwrap_or(Kind::RateLimited);
            return Err(Closed::Cooldown(rem, kind));
        }
        if let Some(rem) = who.and_then(|w| self.identity_cooldowns.remaining(w)) {
            return Err(Closed::IdentityCooldown(rem));
        }
        // The upstream's own breaker borrowed, not cloned (a count taken and given back per
        // attempt); a family's made or found.
        let family_breaker;
        let breaker = match family {
            Family::Upstream => &self.breaker,
            _ => {
                family_breaker = self.breaker_of(family);
                &family_breaker
            }
        };
        let permit = if retry {
            breaker.try_acquire_retry()
        } else {
            breaker.try_acquire()
        }
        .map_err(Closed::Breaker)?;
        let slot = self.bulkhead.acquire().await.map_err(Closed::Shed)?;
        Ok(Admitted {
            permit,
            _slot: slot,
            successes: self.successes.clone(),
        })
    }

    /// Honours the upstream's wait (from `Retry-After` & co). A rate limit earned by an
    /// identity holds back that identity only; an overload, or a rate limit on a request
    /// without a credential, holds back every request to this upstream.
    pub fn cool_down(&self, wait: Duration, kind: Kind, who: Option<&Identity>) {
        let wait = wait.min(MAX_COOLDOWN);
        match who {
            Some(w) if kind == Kind::RateLimited => self.identity_cooldowns.hold_for(*w, wait),
            _ => {
                if let Ok(mut k) = self.cooldown_kind.lock() {
                    *k = Some(kind);
                }
                if let Ok(mut u) = self.local_cooldown_until.lock() {
                    let end = SystemTime::now() + wait;
                    *u = Some(u.map_or(end, |old| old.max(end)));
                }
                self.cooldown.hold_for(wait);
                self.share(wait, false);
            }
        }
    }

    // Team signals (peers' caution); GitHub Status gives a detail (`set_caution_detail`).
    #[cfg(any(feature = "team", test))]
    /// Turns one source of caution on or off (keeping the detail it gave before, if any).
    /// While any source is on, the breaker needs fewer calls to open; caution alone never
    /// opens it.
    pub(crate) fn set_caution(&self, source: CautionSource, on: bool) {
        self.set_caution_detail(source, on, None);
    }

    /// [`Gate::set_caution`] with what the source said (e.g. the incident's name), shown in
    /// the status and quoted if the breaker opens while cautious.
    pub(crate) fn set_caution_detail(
        &self,
        source: CautionSource,
        on: bool,
        detail: Option<String>,
    ) {
        let mut c = self.cautions.lock().unwrap_or_else(|e| e.into_inner());
        if c.set(source, on, detail) {
            self.breaker.set_caution(c.reason());
        }
    }

    /// The active cautions.
    pub(crate) fn cautions(&self) -> Vec<Caution> {
        self.cautions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list()
    }

    /// Announces an upstream-wide hold to the other replicas (gateway mode only).
    pub fn share(&self, wait: Duration, breaker: bool) {
        if let Some(tx) = self.shared.get() {
            let _ = tx.send(SharedHold {
                upstream: self.name.clone(),
                wait,
                breaker,
            });
        }
    }

    #[cfg(feature = "gateway")]
    /// Another replica's breaker opened or the upstream told it to pause: hold every request
    /// to this upstream until then, without this replica spending failing calls of its own.
    /// Not announced again (no echo between replicas).
    pub fn hold_from_peer(&self, wait: Duration) {
        if self
            .cooldown
            .remaining()
            .is_some_and(|r| r >= wait.min(MAX_COOLDOWN))
        {
            return;
        }
        self.honour_peer_cooldown(wait, Kind::Overloaded);
    }

    pub fn status(&self) -> GateStatus {
        let b = self.breaker.snapshot();
        let mut breaker = BreakerView::from(&b);
        breaker.caution = self.cautions();
        let families = self
            .families
            .lock()
            .map(|f| {
                f.iter()
                    .map(|(family, b)| FamilyBreakerView {
                        family: family.as_str(),
                        breaker: BreakerView::from(&b.snapshot()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        GateStatus {
            breaker,
            families,
            cooldown_remaining_s: self.cooldown.remaining().map(|d| d.as_secs_f64()),
            identities_cooling_down: self.identity_cooldowns.len(),
            retry_budget: self.budget.stats(),
            bulkhead: self.bulkhead.stats(),
        }
    }
}

fn retry_of(r: &ResilienceSettings) -> (Backoff, bool) {
    let backoff = Backoff {
        base: r.retry_base,
        cap: r.retry_cap,
    };
    (backoff, r.retry_jitter)
}

/// The gate's state in the status document (flattened into `upstreams[]`).
#[derive(Debug, Clone, Serialize)]
pub struct GateStatus {
    pub breaker: BreakerView,
    /// The route families' own breakers, once each has seen a call (Mission Control's events
    /// and commands, the Task API): a family that fails opens only its own.
    pub families: Vec<FamilyBreakerView>,
    pub cooldown_remaining_s: Option<f64>,
    /// How many identities are held back by their own rate limit.
    pub identities_cooling_down: usize,
    pub retry_budget: weir_resilience::BudgetStats,
    pub bulkhead: weir_resilience::BulkheadStats,
}

/// `upstreams[].families[]`: one route family's breaker.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyBreakerView {
    pub family: &'static str,
    pub breaker: BreakerView,
}

/// `upstreams[].breaker` in the status document.
#[derive(Debug, Clone, Serialize)]
pub struct BreakerView {
    /// `closed`, `degraded` (calls flow, but recent ones failed or were slow more than
    /// usual), `open` or `half_open`.
    pub state: weir_resilience::State,
    pub since: String,
    /// Why it is in this state, in words.
    pub reason: String,
    pub open_count: u32,
    pub opens_total: u64,
    pub failure_rate: f64,
    /// Share of calls slower than usual for their class (relative baseline or absolute cut-off).
    pub slow_rate: f64,
    pub calls_in_window: u64,
    pub retry_after_s: Option<f64>,
    /// Failures in a row right now.
    pub consecutive_failures: u32,
    /// Failures in a row that open it now (0: off); lower while cautious.
    pub consecutive_threshold: u32,
    /// Calls the window needs before its rates can open it now; lower while cautious.
    pub minimum_calls: u32,
    /// Why the breaker is cautious (empty: it is not).
    pub caution: Vec<Caution>,
    /// Per request class: the usual latency and the "slow" cut-off it gives.
    pub latency: Vec<ClassLatencyView>,
}

/// `upstreams[].breaker.latency[]`: one class's latency baseline.
#[derive(Debug, Clone, Serialize)]
pub struct ClassLatencyView {
    pub class: &'static str,
    /// Good calls the median is taken over.
    pub samples: u32,
    /// Median of recent good calls, ms; while still learning, the class's normal latency
    /// (`prior` is then true), or `null` without one.
    pub p50_ms: Option<f64>,
    /// `p50_ms` is the documented normal latency, not a learned median.
    pub prior: bool,
    /// Calls at least this slow count as slow, ms; `null` while learning without a prior
    /// (then only the class's absolute `slow_call` applies).
    pub slow_after_ms: Option<f64>,
}

impl From<&BreakerSnapshot> for BreakerView {
    fn from(b: &BreakerSnapshot) -> Self {
        BreakerView {
            state: b.state,
            since: crate::time_fmt::rfc3339(b.since),
            reason: b.reason.to_string(),
            open_count: b.open_count,
            opens_total: b.opens_total,
            failure_rate: b.failure_rate,
            slow_rate: b.slow_rate,
            calls_in_window: b.calls_in_window,
            retry_after_s: b.retry_after.map(|d| d.as_secs_f64()),
            consecutive_failures: b.consecutive_failures,
            consecutive_threshold: b.consecutive_threshold,
            minimum_calls: b.minimum_calls,
            caution: Vec::new(),
            latency: b
                .latency
                .iter()
                .map(|l| ClassLatencyView {
                    class: l.class,
                    samples: l.samples,
                    p50_ms: l.p50.map(|d| d.as_secs_f64() * 1000.0),
                    prior: l.prior,
                    slow_after_ms: l.slow_after.map(|d| d.as_secs_f64() * 1000.0),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use weir_resilience::State;

    fn gate() -> Gate {
        let s = Settings::default();
        Gate::new(&s.upstreams[0], &s.resilience).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn caution_lowers_the_breakers_bar_and_shows_why() {
        let g = gate();
        assert!(g.status().breaker.caution.is_empty());
        assert_eq!(g.status().breaker.consecutive_threshold, 5);
        g.set_caution_detail(
            CautionSource::GithubStatus,
            true,
            Some("incident: Disruption with Copilot".into()),
        );
        g.set_caution(CautionSource::Peers, true);
        let st = g.status().breaker;
        assert_eq!((st.minimum_calls, st.consecutive_threshold), (5, 3));
        assert_eq!(st.caution.len(), 2);
        assert_eq!(st.caution[0].source, CautionSource::GithubStatus);
        assert_eq!(st.state, State::Closed, "caution alone never moves it");
        // One source clearing leaves the other in force.
        g.set_caution(CautionSource::GithubStatus, false);
        assert_eq!(g.status().breaker.consecutive_threshold, 3);
        // Three failures in a row now open it, and the reason names the caution.
        for _ in 0..3 {
            let a = g
                .admit_attempt(None, false, Family::Upstream)
                .await
                .ok()
                .unwrap();
            a.record(
                true,
                "list",
                Duration::from_millis(5),
                weir_resilience::Timing {
                    normal: None,
                    ceiling: Duration::from_secs(5),
                },
                tokio::time::Instant::now(),
            );
        }
        let st = g.status().breaker;
        assert_eq!(st.state, State::Open);
        assert!(st.reason.contains("(cautious: team)"), "{}", st.reason);
        g.set_caution(CautionSource::Peers, false);
        let st = g.status().breaker;
        assert!(st.caution.is_empty());
        assert_eq!((st.minimum_calls, st.consecutive_threshold), (20, 5));
    }
}
