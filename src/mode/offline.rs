//! Automatic mode's offline detection. When an upstream turns unreachable at the network level
//! (connection refused, name not resolved, connect timeout; never an HTTP error), every
//! managed upstream is probed at once (`HEAD /`, no credentials); if none can be reached, Weir
//! goes offline and acts as in cache only. It then probes with jittered exponential backoff
//! (`offline.probe_base` doubling to `offline.probe_cap`, each delay in the upper half of its
//! ceiling so probes never bunch up at zero), one upstream per probe, taking turns in the
//! configured order, and leaves offline on the first probe that reaches one. Probes run only
//! in automatic: cache only means no upstream calls.
//!
//! One upstream per probe, not all of them: while offline, each probe's name lookup runs on a
//! thread of tokio's blocking pool, started for it and ending 10 s later (probes are 30-60 s
//! apart), so probing every upstream started one thread per upstream each time: most of an
//! offline laptop's idle wakeups (Session 22 in BENCHMARKS.md). When the network comes back,
//! every upstream behind it is back at once, so the next probe finds it as before; only an
//! upstream that stays unreachable by itself (a host behind a VPN that is still down) can
//! delay leaving, by one probe each.

use super::{Behaviour, Mode, Modes};
use crate::config::OfflineSettings;
use crate::config::UpstreamIndex;
use crate::events::Bus;
use crate::upstream::{Reach, Upstreams};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
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
            let cause = match round(self.upstreams.as_ref()).await {
                Round::AllUnreachable(cause) => cause,
                Round::Reached => continue,
            };
            if !self.modes.enter_offline(cause) {
                continue;
            }
            let (backoff, jitter) = (&self.backoff, self.jitter.as_mut());
            let delay = |n| probe_delay(backoff, n, &mut *jitter);
            if !probe_out(&self.modes, self.upstreams.as_ref(), delay, &mut stop).await {
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
}

/// The managed upstreams as the detector probes them (a fake in the tests).
trait Probe: Send + Sync {
    /// How many there are (positions `0..count`, in the configured order).
    fn count(&self) -> usize;
    fn name(&self, i: usize) -> &str;
    /// One probe of upstream `i`: `Err(why)` when it cannot be reached at the network level.
    /// Any answer, even an HTTP error, a TLS refusal or a slow one after connecting, is `Ok`:
    /// it proves the network works.
    fn reach(&self, i: usize) -> BoxFuture<'_, Result<(), String>>;
}

impl Probe for Upstreams {
    fn count(&self) -> usize {
        self.list.len()
    }

    fn name(&self, i: usize) -> &str {
        &self.get(UpstreamIndex::at(i)).settings.name
    }

    fn reach(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match self.probe(UpstreamIndex::at(i)).await {
                Err(e) if e.is_unreachable() => Err(e.to_string()),
                _ => Ok(()),
            }
        })
    }
}

/// What one round of probes found.
enum Round {
    /// One answered.
    Reached,
    /// None could be reached; why, per upstream.
    AllUnreachable(String),
}

/// Probes every upstream at once: are they all unreachable?
async fn round(probe: &dyn Probe) -> Round {
    let probes = (0..probe.count()).map(|i| async move { (i, probe.reach(i).await) });
    let results = futures_util::future::join_all(probes).await;
    let mut why = Vec::new();
    for (i, r) in results {
        match r {
            Err(e) => why.push(format!("{}: {e}", probe.name(i))),
            Ok(()) => return Round::Reached,
        }
    }
    Round::AllUnreachable(why.join("; "))
}

/// While offline: waits `delay(n)` before probe `n`, each probe one upstream in turn, until one
/// is reached (leaves offline) or the user chooses a mode (which ended offline). Returns
/// `false` when the engine is stopping.
async fn probe_out(
    modes: &Modes,
    probe: &dyn Probe,
    mut delay: impl FnMut(u32) -> Duration,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut mode = modes.watch();
    mode.borrow_and_update();
    let count = probe.count().max(1);
    let mut n = 0u32;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(delay(n)) => {}
            // The user chose a mode: offline is over (`Modes::choose` ended it).
            r = mode.changed() => {
                if r.is_err() || !modes.is_offline() { return true; }
                continue;
            }
            _ = stop.changed() => return false,
        }
        if !modes.is_offline() {
            return true;
        }
        modes.count_probe();
        // Turns in the configured order: every upstream once in `count` probes.
        let i = (n as usize) % count;
        if probe.reach(i).await.is_ok() {
            tracing::info!(upstream = %probe.name(i), "a probe reached an upstream; leaving offline");
            modes.leave_offline();
            return true;
        }
        n = n.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::{ChosenBy, ModeKind};
    use std::sync::Mutex;

    /// Upstreams `u0`, `u1`... refusing connections, except the one `reachable` names; every
    /// probe is written down.
    struct Fake {
        names: Vec<String>,
        reachable: Mutex<Option<usize>>,
        probed: Mutex<Vec<usize>>,
    }

    impl Fake {
        fn new(count: usize) -> Arc<Fake> {
            Arc::new(Fake {
                names: (0..count).map(|i| format!("u{i}")).collect(),
                reachable: Mutex::new(None),
                probed: Mutex::new(Vec::new()),
            })
        }

        fn probed(&self) -> Vec<usize> {
            self.probed.lock().unwrap().clone()
        }
    }

    impl Probe for Fake {
        fn count(&self) -> usize {
            self.names.len()
        }

        fn name(&self, i: usize) -> &str {
            &self.names[i]
        }

        fn reach(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
            self.probed.lock().unwrap().push(i);
            let ok = *self.reachable.lock().unwrap() == Some(i);
            Box::pin(async move {
                if ok {
                    Ok(())
                } else {
                    Err("connection refused".into())
                }
            })
        }
    }

    #[tokio::test]
    async fn going_offline_probes_every_upstream_once() {
        let fake = Fake::new(3);
        let Round::AllUnreachable(why) = round(fake.as_ref()).await else {
            panic!("none is reachable");
        };
        assert_eq!(
            why,
            "u0: connection refused; u1: connection refused; u2: connection refused"
        );
        assert_eq!(fake.probed(), [0, 1, 2]);
        *fake.reachable.lock().unwrap() = Some(1);
        assert!(matches!(round(fake.as_ref()).await, Round::Reached));
        assert_eq!(fake.probed().len(), 6);
    }

    /// Offline with the defaults (1 s doubling to 60 s, no jitter) and five upstreams: one
    /// probe per wait, the upstreams in turn (was: all five each time), and the first probe of
    /// the upstream that answers again ends offline.
    #[tokio::test(start_paused = true)]
    async fn offline_probes_one_upstream_per_wait_in_turns() {
        let bus = crate::events::Bus::new();
        let modes = Arc::new(Modes::load(None, bus.clone()));
        assert!(modes.enter_offline("all refused".into()));
        let fake = Fake::new(5);
        let task = {
            let (modes, fake, mut stop) = (modes.clone(), fake.clone(), bus.stopping());
            tokio::spawn(async move {
                let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
                let delay = |n| probe_delay(&b, n, &mut NoJitter);
                probe_out(&modes, fake.as_ref(), delay, &mut stop).await
            })
        };
        // Probes at 1, 3, 7, 15, 31, 63 s, then every 60 s: 14 in the first 10 minutes.
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(fake.probed(), [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]);
        assert_eq!(modes.status().offline.map(|o| o.probes), Some(14));
        assert_eq!(modes.status().mode, ModeKind::Offline);

        // u2 answers again; u4, u0 and u1 are probed (and fail) before its turn comes.
        *fake.reachable.lock().unwrap() = Some(2);
        assert!(task.await.unwrap(), "left offline, not stopped");
        assert_eq!(fake.probed()[14..], [4, 0, 1, 2]);
        assert_eq!(modes.status().mode, ModeKind::Automatic);
    }

    #[tokio::test(start_paused = true)]
    async fn a_chosen_mode_or_the_engine_stopping_ends_the_probes() {
        let bus = crate::events::Bus::new();
        let modes = Arc::new(Modes::load(None, bus.clone()));
        let fake = Fake::new(2);
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for stopping in [false, true] {
            assert!(modes.enter_offline("all refused".into()));
            let task = {
                let (modes, fake, mut stop) = (modes.clone(), fake.clone(), bus.stopping());
                tokio::spawn(async move {
                    let delay = |n| probe_delay(&b, n, &mut NoJitter);
                    probe_out(&modes, fake.as_ref(), delay, &mut stop).await
                })
            };
            tokio::time::sleep(Duration::from_secs(2)).await;
            if stopping {
                bus.stop();
            } else {
                modes.choose(Mode::Automatic, ChosenBy::Cli);
            }
            assert_eq!(task.await.unwrap(), !stopping);
        }
        assert_eq!(fake.probed(), [0, 0], "one probe each time, before the end");
    }

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
