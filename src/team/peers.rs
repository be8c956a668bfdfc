//! What teammates said, and what it makes this Weir do: the pure decision logic (no network,
//! no clock but tokio's, so tests run with paused time).
//!
//! Per upstream: K distinct teammates (never this Weir) whose latest fact, received within the
//! window T, says the upstream is failing on their own evidence start an *episode*: the Weir
//! acts (cautious breaker, or an opened one). Local evidence wins: a call of this Weir's that
//! succeeds during the episode ends it (*overruled*) until fewer than K teammates report
//! failing again. The episode also ends when fewer than K do.

use super::fact::Fact;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

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

    /// Takes in a (verified, checked) fact received now. `false` when it is this Weir's own
    /// or older than one already seen from that teammate for that upstream (a replay).
    pub fn observe(&mut self, fact: &Fact, now: Instant) -> bool {
        if fact.peer == self.me {
            return false;
        }
        let key = (fact.peer.clone(), fact.upstream.clone());
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
            },
        );
        self.heard.insert(fact.peer.clone(), now);
        true
    }

    fn fresh(&self, at: Instant, now: Instant) -> bool {
        now.saturating_duration_since(at) <= self.window
    }

    /// Distinct teammates reporting `upstream` failing within the window.
    pub fn failing(&self, upstream: &str, now: Instant) -> usize {
        self.latest
            .iter()
            .filter(|((_, u), s)| u == upstream && s.failing && self.fresh(s.received, now))
            .count()
    }

    /// Distinct teammates (fresh within the window) whose own calls confirmed `upstream`
    /// failing after `after_ms` (Unix ms): their evidence is newer than this Weir's opening,
    /// so its half-open probes would only repeat it.
    pub fn confirmations_since(&self, upstream: &str, after_ms: u64, now: Instant) -> usize {
        self.latest
            .iter()
            .filter(|((_, u), s)| {
                u == upstream
                    && self.fresh(s.received, now)
                    && s.confirmed_ms.is_some_and(|c| c > after_ms)
            })
            .count()
    }

    /// Distinct teammates heard from within the window.
    pub fn seen(&self, now: Instant) -> usize {
        self.heard.values().filter(|t| self.fresh(**t, now)).count()
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

    #[tokio::test(start_paused = true)]
    async fn k_distinct_peers_within_t_act_and_local_success_overrules() {
        let me = format!("{:032x}", 9);
        let mut p = Peers::new(&me, 2, Duration::from_secs(60));
        let now = Instant::now();
        // The same teammate twice, and this Weir itself, are one report.
        assert!(p.observe(&fact(1, FactState::Open, 1), now));
        assert!(p.observe(&fact(1, FactState::Open, 2), now));
        let mut own = fact(1, FactState::Open, 3);
        own.peer = me.clone();
        assert!(!p.observe(&own, now));
        assert_eq!(p.failing("api", now), 1);
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        // An echo (acting on peers) does not count; a second local report does.
        let mut echo = fact(2, FactState::Open, 3);
        echo.cause = Cause::Peers;
        p.observe(&echo, now);
        assert_eq!(p.decide("api", 0, now), Decision::Nothing);
        p.observe(&fact(3, FactState::HalfOpen, 3), now);
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
        assert!(!p.observe(&fact(3, FactState::Closed, 1), now));
        // Past the window the reports no longer count; a new episode can start later.
        tokio::time::advance(Duration::from_secs(61)).await;
        let later = Instant::now();
        assert_eq!(p.failing("api", later), 0);
        assert_eq!(p.seen(later), 0);
        assert_eq!(p.decide("api", 6, later), Decision::Nothing);
        assert!(!p.episode("api").overruled);
        p.observe(&fact(1, FactState::Open, 10), later);
        p.observe(&fact(3, FactState::Open, 10), later);
        assert_eq!(p.decide("api", 6, later), Decision::Act);
        // A teammate reporting closed again ends it.
        p.observe(&fact(3, FactState::Closed, 11), later);
        assert_eq!(
            p.decide("api", 6, later),
            Decision::Release { overruled: false }
        );
    }
}
