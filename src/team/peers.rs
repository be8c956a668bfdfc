//! What teammates said, and what it makes this Weir do: the pure decision logic (no network,
//! no clock but tokio's, so tests run with paused time).
//!
//! Per upstream: K distinct teammates (never this Weir) whose latest fact, received within the
//! window T, says the upstream is failing on their own evidence start an *episode*: the Weir
//! acts (cautious breaker, or an opened one). Local evidence wins: a call of this Weir's that
//! succeeds during the episode ends it (*overruled*) until fewer than K teammates report
//! failing again. The episode also ends when fewer than K do.
//!
//! Teammates are counted by the identity the caller gives with each fact (the sender's NATS
//! user, from the subject the server let it publish on), never by the fact's own `peer` field,
//! which the sender writes itself. An upstream-wide pause is honoured only when K teammates
//! report one ([`Peers::pause`]), and [`Holds`] caps how long teammates' reports may hold an
//! upstream while this Weir has no evidence of its own.

use super::fact::{Fact, Pause};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// The prefix of identities the server did not vouch for (`_unverified/<peer field>`): all of
/// them together count as one teammate, however many `peer` fields they carry. Sender names
/// cannot contain `/`, so no vouched-for name has it.
pub const UNVERIFIED: &str = "_unverified/";

fn unverified(id: &str) -> bool {
    id.starts_with(UNVERIFIED)
}

/// Distinct teammates among `ids`: each vouched-for name once, the unverified ones as one.
fn distinct<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    let mut names = std::collections::HashSet::new();
    let mut any_unverified = false;
    for id in ids {
        if unverified(id) {
            any_unverified = true;
        } else {
            names.insert(id);
        }
    }
    names.len() + usize::from(any_unverified)
}

/// What the caller should do with an upstream's gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start acting on the teammates' reports (make cautious / open).
    Act,
    /// Stop acting (clear caution); `overruled`: because local calls succeed.
    Release {
        overruled: bool,
    },
    Nothing,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    received: Instant,
    at_ms: u64,
    failing: bool,
    confirmed_ms: Option<u64>,
    pause: Option<Pause>,
}

/// One upstream's episode.
#[derive(Debug, Clone, Copy, Default)]
pub struct Episode {
    pub acting: bool,
    pub overruled: bool,
    /// The gate's success count when the episode started: any more is local evidence.
    successes_at_start: u64,
}

/// Every teammate's latest fact per upstream, and each upstream's episode.
#[derive(Debug)]
pub struct Peers {
    me: String,
    peers_needed: usize,
    window: Duration,
    latest: HashMap<(String, String), Seen>,
    heard: HashMap<String, Instant>,
    episodes: HashMap<String, Episode>,
}

impl Peers {
    pub fn new(me: &str, peers_needed: usize, window: Duration) -> Peers {
        Peers {
            me: me.to_string(),
            peers_needed: peers_needed.max(1),
            window,
            latest: HashMap::new(),
            heard: HashMap::new(),
            episodes: HashMap::new(),
        }
    }

    /// Takes in a (verified, checked) fact from teammate `from`, received now. `false` when
    /// it is this Weir's own or older than one already seen from that teammate for that
    /// upstream (a replay).
    pub fn observe(&mut self, fact: &Fact, from: &str, now: Instant) -> bool {
        if from == self.me {
            return false;
        }
        let key = (from.to_owned(), fact.upstream.clone());
        if let Some(prev) = self.latest.get(&key) {
            if fact.at_ms < prev.at_ms {
                return false;
            }
        }
        self.latest.insert(
            key,
            Seen {
                received: now,
                at_ms: fact.at_ms,
                failing: fact.failing_locally(),
                confirmed_ms: fact.confirmed_ms(),
                pause: fact.pause,
            },
        );
        self.heard.insert(from.to_owned(), now);
        true
    }

    /// The upstream-wide pause K distinct teammates agree on, if they do: of the pauses still
    /// running in their latest fresh facts, the K-th longest (each of K teammates asked for at
    /// least that long). One teammate alone never pauses this Weir (unless K is 1).
    pub fn pause(&self, upstream: &str, now_ms: u64, now: Instant) -> Option<Pause> {
        let mut running: Vec<Pause> = Vec::new();
        let mut unverified_pause: Option<Pause> = None;
        for ((from, u), s) in &self.latest {
            let Some(p) = s.pause.filter(|p| p.until_ms > now_ms) else {
                continue;
            };
            if u != upstream || !self.fresh(s.received, now) {
                continue;
            }
            if unverified(from) {
                // The unverified together are one teammate: their longest pause, once.
                if unverified_pause.is_none_or(|q| p.until_ms > q.until_ms) {
                    unverified_pause = Some(p);
                }
            } else {
                running.push(p);
            }
        }
        running.extend(unverified_pause);
        if running.len() < self.peers_needed {
            return None;
        }
        running.sort_by_key(|p| std::cmp::Reverse(p.until_ms));
        Some(running[self.peers_needed - 1])
    }

    /// Drops everything heard from teammates the server did not vouch for (once it is known to,
    /// their reports start again under their names).
    pub fn forget_unverified(&mut self) {
        self.latest.retain(|(from, _), _| !unverified(from));
        self.heard.retain(|from, _| !unverified(from));
    }

    fn fresh(&self, at: Instant, now: Instant) -> bool {
        now.saturating_duration_since(at) <= self.window
    }

    /// Distinct teammates reporting `upstream` failing within the window.
    pub fn failing(&self, upstream: &str, now: Instant) -> usize {
        distinct(
            self.latest
                .iter()
                .filter(|((_, u), s)| u == upstream && s.failing && self.fresh(s.received, now))
                .map(|((from, _), _)| from.as_str()),
        )
    }

    /// Distinct teammates (fresh within the window) whose own calls confirmed `upstream`
    /// failing after `after_ms` (Unix ms): their evidence is newer than this Weir's opening,
    /// so its half-open probes would only repeat it.
    pub fn confirmations_since(&self, upstream: &str, after_ms: u64, now: Instant) -> usize {
        distinct(
            self.latest
                .iter()
                .filter(|((_, u), s)| {
                    u == upstream
                        && self.fresh(s.received, now)
                        && s.confirmed_ms.is_some_and(|c| c > after_ms)
                })
                .map(|((from, _), _)| from.as_str()),
        )
    }

    /// Distinct teammates heard from within the window.
    pub fn seen(&self, now: Instant) -> usize {
        distinct(
            self.heard
                .iter()
                .filter(|(_, t)| self.fresh(**t, now))
                .map(|(from, _)| from.as_str()),
        )
    }

    pub fn episode(&self, upstream: &str) -> Episode {
        self.episodes.get(upstream).copied().unwrap_or_default()
    }

    /// Decides for `upstream`, given the gate's success count now.
    pub fn decide(&mut self, upstream: &str, successes: u64, now: Instant) -> Decision {
        let enough = self.failing(upstream, now) >= self.peers_needed;
        let ep = self.episodes.entry(upstream.to_string()).or_default();
        match (enough, ep.acting, ep.overruled) {
            (false, acting, _) => {
                ep.overruled = false;
                ep.acting = false;
                if acting {
                    Decision::Release { overruled: false }
                } else {
                    Decision::Nothing
                }
            }
            (true, true, _) if successes > ep.successes_at_start => {
                ep.acting = false;
                ep.overruled = true;
                Decision::Release { overruled: true }
            }
            (true, false, false) => {
                ep.acting = true;
                ep.successes_at_start = successes;
                Decision::Act
            }
            _ => Decision::Nothing,
        }
    }

    /// Forgets teammates not heard from for a long while (bounded memory).
    pub fn prune(&mut self, now: Instant) {
        let keep = self.window * 10;
        self.latest
            .retain(|_, s| now.saturating_duration_since(s.received) <= keep);
        self.heard
            .retain(|_, t| now.saturating_duration_since(*t) <= keep);
    }
}

/// How long teammates' reports have held each upstream (an opened or re-opened breaker, an
/// honoured pause) since this Weir last had evidence of its own: its own calls reaching the
/// upstream. Past `max`, their reports no longer hold it, so its own probes go out and decide;
/// then the budget starts again. Without this, key holders that keep reporting could hold an
/// upstream for as long as they keep reporting.
#[derive(Debug)]
pub struct Holds {
    max: Duration,
    held: HashMap<String, Hold>,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    since: Instant,
    /// This Weir's own calls to the upstream when the hold began.
    calls: u64,
}

impl Holds {
    pub fn new(max: Duration) -> Holds {
        Holds {
            max,
            held: HashMap::new(),
        }
    }

    /// How much longer teammates may hold `upstream` now, given this Weir's own call count
    /// (any call since the hold began is local evidence, and starts the budget again). Starts
    /// the hold's clock if it was not running.
    pub fn left(&mut self, upstream: &str, own_calls: u64, now: Instant) -> Duration {
        let h = self.held.entry(upstream.to_owned()).or_insert(Hold {
            since: now,
            calls: own_calls,
        });
        if own_calls != h.calls {
            *h = Hold {
                since: now,
                calls: own_calls,
            };
        }
        self.max
            .saturating_sub(now.saturating_duration_since(h.since))
    }

    /// No upstream is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Nothing holds `upstream` any more (its breaker is closed and no pause runs): the next
    /// hold starts with the whole budget.
    pub fn release(&mut self, upstream: &str) {
        self.held.remove(upstream);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fact::{Cause, Fact, FactState, VERSION};
    use super::*;

    fn fact(peer: u8, state: FactState, at_ms: u64) -> Fact {
        Fact {
            v: VERSION,
            peer: format!("{peer:032x}"),
            upstream: "api".into(),
            state,
            degraded: false,
            cause: Cause::Local,
            since_ms: at_ms,
            pause: None,
            github: None,
            at_ms,
        }
    }

    /// The identity a fact arrives under: its `peer` field, as if each came from its own user.
    fn observe(p: &mut Peers, f: &Fact, now: Instant) -> bool {
        let from = f.peer.clone();
        p.observe(f, &from, now)
    }

    #[tokio::test(start_paused = true)]
    async fn teammates_are_counted_by_identity_not_by_the_peer_field() {
        let mut p = Peers::new("me", 2, Duration::from_secs(60));
        let now = Instant::now();
        // One sender writing three different `peer` fields is one teammate.
        for i in 1..=3 {
            assert!(p.observe(&fact(i, FactState::Open, u64::from(i)), "mallory", now));
        }
        assert_eq!(p.failing("api", now), 1);
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        p.observe(&fact(1, FactState::Open, 5), "bob", now);
        assert_eq!(p.decide("api", 0, now), Decision::Act);
    }

    #[tokio::test(start_paused = true)]
    async fn unvouched_teammates_together_are_one() {
        let mut p = Peers::new("me", 2, Duration::from_secs(60));
        let now = Instant::now();
        for i in 1..=5u8 {
            let f = fact(i, FactState::Open, 1);
            p.observe(&f, &format!("{UNVERIFIED}{}", f.peer), now);
        }
        assert_eq!((p.failing("api", now), p.seen(now)), (1, 1));
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        p.forget_unverified();
        assert_eq!(p.seen(now), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_needs_k_teammates_and_lasts_the_kth_longest() {
        let mut p = Peers::new("me", 2, Duration::from_secs(60));
        let now = Instant::now();
        let paused = |peer: u8, until_ms: u64| Fact {
            pause: Some(Pause {
                until_ms,
                kind: super::super::fact::PauseKind::Overloaded,
            }),
            ..fact(peer, FactState::Closed, 10)
        };
        p.observe(&paused(1, 900_000), "mallory", now);
        p.observe(&paused(2, 900_000), "mallory", now);
        assert_eq!(
            p.pause("api", 1_000, now),
            None,
            "one teammate, however many ids"
        );
        p.observe(&paused(3, 60_000), "bob", now);
        assert_eq!(p.pause("api", 1_000, now).unwrap().until_ms, 60_000);
        assert_eq!(p.pause("api", 70_000, now), None, "bob's pause ended");
    }

    #[tokio::test(start_paused = true)]
    async fn holds_are_capped_until_local_evidence() {
        let mut h = Holds::new(Duration::from_secs(600));
        let t0 = Instant::now();
        assert_eq!(h.left("api", 7, t0), Duration::from_secs(600));
        tokio::time::advance(Duration::from_secs(590)).await;
        assert_eq!(h.left("api", 7, Instant::now()), Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(h.left("api", 7, Instant::now()), Duration::ZERO, "spent");
        // This Weir's own probe went out: the budget starts again.
        assert_eq!(h.left("api", 8, Instant::now()), Duration::from_secs(600));
        tokio::time::advance(Duration::from_secs(700)).await;
        h.release("api");
        assert_eq!(h.left("api", 8, Instant::now()), Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn k_distinct_peers_within_t_act_and_local_success_overrules() {
        let me = format!("{:032x}", 9);
        let mut p = Peers::new(&me, 2, Duration::from_secs(60));
        let now = Instant::now();
        // The same teammate twice, and this Weir itself, are one report.
        assert!(observe(&mut p, &fact(1, FactState::Open, 1), now));
        assert!(observe(&mut p, &fact(1, FactState::Open, 2), now));
        let mut own = fact(1, FactState::Open, 3);
        own.peer = me.clone();
        assert!(!p.observe(&own, &me, now));
        assert_eq!(p.failing("api", now), 1);
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        // An echo (acting on peers) does not count; a second local report does.
        let mut echo = fact(2, FactState::Open, 3);
        echo.cause = Cause::Peers;
        observe(&mut p, &echo, now);
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        observe(&mut p, &fact(3, FactState::HalfOpen, 3), now);
        assert_eq!(p.failing("api", now), 2);
        // Only an opening on the teammate's own evidence confirms; half-open and echoes do not.
        assert_eq!(p.confirmations_since("api", 0, now), 1);
        assert_eq!(
            p.confirmations_since("api", 2, now),
            0,
            "older than our opening"
        );
        assert_eq!(p.decide("api", 5, now), Decision::Act);
        assert_eq!(p.decide("api", 5, now), Decision::Nothing, "acts once");
        // A local success overrules until the reports drop below K.
        assert_eq!(
            p.decide("api", 6, now),
            Decision::Release { overruled: true }
        );
        assert_eq!(p.decide("api", 6, now), Decision::Nothing);
        assert!(p.episode("api").overruled);
        // A replayed older fact is refused.
        assert!(!observe(&mut p, &fact(3, FactState::Closed, 1), now));
        // Past the window the reports no longer count; a new episode can start later.
        tokio::time::advance(Duration::from_secs(61)).await;
        let later = Instant::now();
        assert_eq!(p.failing("api", later), 0);
        assert_eq!(p.seen(later), 0);
        assert_eq!(p.decide("api", 6, later), Decision::Nothing);
        assert!(!p.episode("api").overruled);
        observe(&mut p, &fact(1, FactState::Open, 10), later);
        observe(&mut p, &fact(3, FactState::Open, 10), later);
        assert_eq!(p.decide("api", 6, later), Decision::Act);
        // A teammate reporting closed again ends it.
        observe(&mut p, &fact(3, FactState::Closed, 11), later);
        assert_eq!(
            p.decide("api", 6, later),
            Decision::Release { overruled: false }
        );
    }
}
