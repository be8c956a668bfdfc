//! Automatic mode's offline detection. When an upstream turns unreachable at the network level
//! (connection refused, name not resolved, connect timeout; never an HTTP error), every
//! managed upstream is probed (`HEAD /`, no credentials); if none can be reached, Weir goes
//! offline and acts as in cache only. It then probes with jittered exponential backoff
//! (`offline.probe_base` doubling to `offline.probe_cap`, each delay in the upper half of its
//! ceiling so probes never bunch up at zero) and leaves offline on the first probe that
//! reaches any upstream. Probes run only in automatic: cache only means no upstream calls.

use super::{Behaviour, Mode, Modes};
use crate::config::OfflineSettings;
use crate::events::Bus;
use crate::upstream::{Reach, Upstreams};
use std::sync::Arc;
use std::time::Duration;
use weir_resilience::{Backoff, FullJitter, Jitter, NoJitter};

/// Starts the detector (nothing when `offline.detect = false`).
pub(crate) fn spawn_detector(
    modes: Arc<Modes>,
    upstreams: Arc<Upstreams>,
    cfg: OfflineSettings,
    bus: &Bus,
) {
    if !cfg.detect || upstreams.list.is_empty() {
        return;
    }
    let d = Detector {
        modes,
        upstreams,
        backoff: Backoff::new(cfg.probe_base, cfg.probe_cap),
        jitter: if cfg.jitter {
            Box::new(FullJitter)
        } else {
            Box::new(NoJitter)
        },
        bus: bus.clone(),
    };
    bus.spawn(d.run());
}

struct Detector {
    modes: Arc<Modes>,
    upstreams: Arc<Upstreams>,
    backoff: Backoff,
    jitter: Box<dyn Jitter + Sync>,
    bus: Bus,
}

/// The wait before probe `n`: in `[c/2, c]` for the backoff's ceiling `c`, so probes spread
/// out but never bunch up at zero.
fn probe_delay(backoff: &Backoff, n: u32, jitter: &mut (dyn Jitter + Sync)) -> Duration {
    let ceiling = backoff.ceiling(n);
    let half = ceiling / 2;
    half + jitter.pick(ceiling - half).min(ceiling - half)
}

/// What one round of probes found.
enum Round {
    /// This upstream answered.
    Reached(String),
    /// None could be reached; why, per upstream.
    AllUnreachable(String),
}

impl Detector {
    async fn run(mut self) {
        let mut stop = self.bus.stopping();
        let mut mode = self.modes.watch();
        loop {
            tokio::select! {
                _ = self.upstreams.reach.turned_unreachable.notified() => {}
                // Back to automatic while upstreams were last seen unreachable: check again,
                // as no new failure may come to say so.
                r = mode.changed() => {
                    if r.is_err() { return; }
                    let now = *mode.borrow_and_update();
                    if now != Behaviour::Normal || !self.any_unreachable() { continue; }
                }
                _ = stop.changed() => return,
            }
            if self.modes.chosen() != Mode::Automatic || self.modes.is_offline() {
                continue;
            }
            let cause = match self.round().await {
                Round::AllUnreachable(cause) => cause,
                Round::Reached(_) => continue,
            };
            if !self.modes.enter_offline(cause) {
                continue;
            }
            if !self.probe_out(&mut stop).await {
                return;
            }
            mode.borrow_and_update();
        }
    }

    fn any_unreachable(&self) -> bool {
        self.upstreams
            .configured()
            .any(|u| self.upstreams.reach.get(u) == Reach::Unreachable)
    }

    /// Probes until one reaches an upstream (leaves offline) or the user chooses another mode.
    /// Returns `false` when the engine is stopping.
    async fn probe_out(&mut self, stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        let mut mode = self.modes.watch();
        mode.borrow_and_update();
        let mut n = 0u32;
        loop {
            let wait = self.delay(n);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                // The user chose a mode: offline is over (`Modes::choose` ended it).
                r = mode.changed() => {
                    if r.is_err() || !self.modes.is_offline() { return true; }
                    continue;
                }
                _ = stop.changed() => return false,
            }
            if !self.modes.is_offline() {
                return true;
            }
            self.modes.count_probe();
            if let Round::Reached(name) = self.round().await {
                tracing::info!(upstream = %name, "a probe reached an upstream; leaving offline");
                self.modes.leave_offline();
                return true;
            }
            n = n.saturating_add(1);
        }
    }

    fn delay(&mut self, n: u32) -> Duration {
        probe_delay(&self.backoff, n, self.jitter.as_mut())
    }

    /// Probes every managed upstream at once.
    async fn round(&self) -> Round {
        let ups = &self.upstreams;
        let probes = ups
            .configured()
            .map(|u| async move { (u, ups.probe(u).await) });
        let results = futures_util::future::join_all(probes).await;
        let mut why = Vec::new();
        for (u, r) in results {
            let name = &ups.get(u).settings.name;
            match r {
                Err(e) if e.is_unreachable() => why.push(format!("{name}: {e}")),
                // Any answer, even an HTTP error, a TLS refusal or a slow one after
                // connecting, proves the network works.
                _ => return Round::Reached(name.clone()),
            }
        }
        Round::AllUnreachable(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_delays_double_to_the_cap_and_stay_in_the_upper_half() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let exact: Vec<u64> = (0..8)
            .map(|n| probe_delay(&b, n, &mut NoJitter).as_secs())
            .collect();
        assert_eq!(exact, [1, 2, 4, 8, 16, 32, 60, 60]);
        for n in 0..40 {
            let c = b.ceiling(n);
            let d = probe_delay(&b, n, &mut FullJitter);
            assert!(d >= c / 2 && d <= c, "probe {n}: {d:?} of {c:?}");
        }
    }
}
