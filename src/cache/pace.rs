//! Degradation-aware freshness: while an upstream is strained, each list/view key is refreshed
//! at most once per its class's `degraded_refresh` and its cached answer served in between.
//!
//! Why: on Oct 29 the agent-sessions service answered in 1.2 s and failed 2 % of calls. A VS
//! Code window polls each running session every 5 s, so a 3 s view TTL sends every poll
//! upstream, healthy or not; what a struggling upstream needs is fewer calls, and a task's
//! status a minute or two old is still worth showing.
//!
//! - **Strained**: the upstream's breaker is `degraded`, or the last [`STRAIN_AFTER`] refreshes
//!   Weir made through the cache were each slow (at least the breaker's `slow_floor`, an
//!   absolute bar, because the relative baseline learns a slowness that is there from the
//!   start) or failed. One slow refresh is not enough: on a busy laptop a healthy call is
//!   sometimes late. The next fast, successful refresh ends it, so the interval returns to
//!   normal as soon as calls are fast again.
//! - **Not while the breaker is open or half-open**: then the breaker paces the calls (it
//!   refuses them locally while open; half-open, the refreshes are its probes), and holding a
//!   key for the interval would only hide that the upstream healed (`pipeline::cache`).
//! - **Paced key**: under strain, a key whose last refresh started less than the interval ago
//!   is answered from the cache (any copy `stale_if_error` still allows) with no upstream call.
//! - **A lasting strain stretches further**: once the strain has lasted [`LASTING`] intervals
//!   (4 minutes of the default 2), the interval doubles (4 minutes), as a backoff does. A blip
//!   costs the first interval only; an outage of an hour (Oct 29's lasted hours) asks each key
//!   half as often again, for data at most a few minutes old. The first fast success returns
//!   every key to the normal pace at once.
//! - **Young keys keep the normal pace**: a key first asked less than a quarter of the
//!   interval ago (30 s of the default 2 min: a job just created, which VS Code asks every 2 s
//!   for up to 30 s until its pull request appears) changes fast and its clients wait for
//!   that change.

use super::CacheKey;
use crate::config::UpstreamIndex;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Keys whose pace is remembered (a laptop has tens; a gateway a few thousand). Beyond it the
/// least recently used are forgotten, and a forgotten key is simply young again.
const MAX_KEYS: u64 = 20_000;

/// Slow or failed refreshes in a row that strain an upstream. Three, not two: on a laptop busy
/// compiling, two healthy refreshes in a row were seen to pass `slow_floor` (devhour on a
/// loaded machine, BENCHMARKS.md), which paced a healthy upstream and aged its data; a real
/// slowdown makes every refresh slow, so it is noticed one call later.
pub const STRAIN_AFTER: u32 = 3;

/// Intervals of unbroken strain after which the interval doubles.
pub const LASTING: u32 = 2;

#[derive(Debug, Clone, Copy, Default)]
struct Strain {
    /// Slow or failed refreshes in a row.
    bad_in_row: u32,
    /// When the last [`STRAIN_AFTER`]-th bad refresh in a row made the upstream strained.
    since: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct KeyPace {
    first_seen: Instant,
    last_refresh: Option<Instant>,
}

/// What a request under one key should do about the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paced {
    /// Freshness as usual (healthy upstream, young key, interval due, or stretching off).
    Normal,
    /// Strained, and this key was refreshed within the interval: the cached copy answers.
    Hold,
    /// Strained and the interval is over: one background refresh, the cached copy answers.
    Due,
}

/// The strain of each upstream and the refresh times of each key.
pub struct Pace {
    /// Per upstream index: slow or failed cache refreshes in a row, and since when.
    strained: Mutex<Vec<Strain>>,
    keys: moka::sync::Cache<CacheKey, KeyPace>,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            strained: Mutex::new(Vec::new()),
            keys: moka::sync::Cache::builder()
                .max_capacity(MAX_KEYS)
                .time_to_idle(Duration::from_secs(24 * 3600))
                .build(),
        }
    }
}

impl Pace {
    /// Records how one refresh through the cache went: `failed` (a 5xx, a timeout, no
    /// answer) or slower than `slow_floor` counts toward strain; a fast success ends it.
    pub fn record_refresh(
        &self,
        up: UpstreamIndex,
        elapsed: Duration,
        failed: bool,
        slow_floor: Duration,
    ) {
        let bad = failed || elapsed >= slow_floor;
        let mut s = self.strained.lock().unwrap_or_else(|e| e.into_inner());
        let i = up.index();
        if s.len() <= i {
            s.resize(i + 1, Strain::default());
        }
        let st = &mut s[i];
        let before = st.bad_in_row >= STRAIN_AFTER;
        st.bad_in_row = if bad {
            st.bad_in_row.saturating_add(1)
        } else {
            0
        };
        let after = st.bad_in_row >= STRAIN_AFTER;
        if before != after {
            st.since = after.then(Instant::now);
            tracing::debug!(
                upstream = %up,
                strained = after,
                ?elapsed,
                failed,
                "degradation-aware freshness"
            );
        }
    }

    /// Whether the last [`STRAIN_AFTER`] refreshes of upstream `up` were slow or failed.
    pub fn last_refresh_strained(&self, up: UpstreamIndex) -> bool {
        let s = self.strained.lock().unwrap_or_else(|e| e.into_inner());
        s.get(up.index())
            .is_some_and(|st| st.bad_in_row >= STRAIN_AFTER)
    }

    /// The interval for upstream `up` now: `base`, doubled once its refreshes have been slow or
    /// failing for [`LASTING`] intervals without a break.
    fn interval(&self, up: UpstreamIndex, base: Duration, now: Instant) -> Duration {
        let s = self.strained.lock().unwrap_or_else(|e| e.into_inner());
        let since = s.get(up.index()).and_then(|st| st.since);
        match since {
            Some(at) if now.saturating_duration_since(at) >= base * LASTING => base * 2,
            _ => base,
        }
    }

    /// Notes that a refresh of `key` starts now (counted whether or not it will succeed, so a
    /// failing key is not asked again on every poll).
    pub fn refreshing(&self, key: CacheKey, now: Instant) {
        let first_seen = self.keys.get(&key).map_or(now, |p| p.first_seen);
        self.keys.insert(
            key,
            KeyPace {
                first_seen,
                last_refresh: Some(now),
            },
        );
    }

    /// The decision for a request under `key` (of upstream `up`) that has a servable cached
    /// copy. `strained` is the upstream's state now (breaker not closed, or
    /// [`Pace::last_refresh_strained`]); `interval` the class's `degraded_refresh`, `fresh_ttl`
    /// its normal one.
    pub fn decide(
        &self,
        key: CacheKey,
        up: UpstreamIndex,
        strained: bool,
        interval: Duration,
        fresh_ttl: Duration,
        now: Instant,
    ) -> Paced {
        let p = match self.keys.get(&key) {
            Some(p) => p,
            None => {
                let p = KeyPace {
                    first_seen: now,
                    last_refresh: None,
                };
                self.keys.insert(key, p);
                p
            }
        };
        if !strained || interval <= fresh_ttl {
            return Paced::Normal;
        }
        if now.saturating_duration_since(p.first_seen) < interval / 4 {
            return Paced::Normal;
        }
        let interval = self.interval(up, interval, now);
        match p.last_refresh {
            Some(at) if now.saturating_duration_since(at) < interval => Paced::Hold,
            _ => Paced::Due,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(i: usize) -> UpstreamIndex {
        UpstreamIndex::at(i)
    }
    use crate::identity::Identity;

    fn key(p: &str) -> CacheKey {
        CacheKey::new(
            &crate::bench_api::upstream_named("up0"),
            &http::Method::GET,
            p,
            &Identity::from_hex(&"00".repeat(32)).unwrap(),
            &http::HeaderMap::new(),
            &[],
        )
    }

    const MIN2: Duration = Duration::from_secs(120);
    const TTL: Duration = Duration::from_secs(3);

    #[tokio::test(start_paused = true)]
    async fn strain_comes_from_slow_or_failed_refreshes_and_a_fast_one_ends_it() {
        let p = Pace::default();
        let floor = Duration::from_secs(1);
        let slow = |n: u32| {
            (0..n).for_each(|_| p.record_refresh(ix(0), Duration::from_millis(1200), false, floor))
        };
        assert!(!p.last_refresh_strained(ix(0)));
        slow(STRAIN_AFTER - 1);
        assert!(
            !p.last_refresh_strained(ix(0)),
            "a late call or two is not enough"
        );
        slow(1);
        assert!(p.last_refresh_strained(ix(0)));
        assert!(!p.last_refresh_strained(ix(1)), "per upstream");
        p.record_refresh(ix(0), Duration::from_millis(20), false, floor);
        assert!(!p.last_refresh_strained(ix(0)));
        for _ in 0..STRAIN_AFTER {
            p.record_refresh(ix(0), Duration::from_millis(20), true, floor);
        }
        assert!(p.last_refresh_strained(ix(0)), "fast failures strain too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_strained_key_is_refreshed_once_per_interval_and_young_keys_keep_the_pace() {
        let p = Pace::default();
        let k = key("/agents/sessions/s1");
        let t0 = Instant::now();
        p.refreshing(k, t0);
        // Young (a quarter of the interval): normal pace even under strain.
        let d = |at: Duration, strained: bool| p.decide(k, ix(0), strained, MIN2, TTL, t0 + at);
        assert_eq!(d(Duration::from_secs(29), true), Paced::Normal);
        assert_eq!(d(Duration::from_secs(60), true), Paced::Hold);
        // Old enough, and refreshed 120 s ago: due; then held until the interval passes.
        assert_eq!(d(MIN2, true), Paced::Due);
        p.refreshing(k, t0 + MIN2);
        assert_eq!(d(Duration::from_secs(125), true), Paced::Hold);
        assert_eq!(d(Duration::from_secs(239), true), Paced::Hold);
        assert_eq!(d(Duration::from_secs(240), true), Paced::Due);
        // Healthy again: normal at once.
        assert_eq!(d(Duration::from_secs(125), false), Paced::Normal);
        // Stretching off (interval not above the TTL).
        assert_eq!(
            p.decide(k, ix(0), true, TTL, TTL, t0 + Duration::from_secs(125)),
            Paced::Normal
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lasting_strain_doubles_the_interval_and_a_fast_refresh_ends_it() {
        let p = Pace::default();
        let floor = Duration::from_secs(1);
        let refresh = |ms: u64| p.record_refresh(ix(0), Duration::from_millis(ms), false, floor);
        let secs = Duration::from_secs;
        let k = key("/agents/sessions/s1");
        let t0 = Instant::now();
        (0..STRAIN_AFTER).for_each(|_| refresh(1200)); // strained from t0 on
        p.refreshing(k, t0);
        let d = |at: Duration, strained: bool| p.decide(k, ix(0), strained, MIN2, TTL, t0 + at);
        // The first intervals of a strain: the base.
        assert_eq!(d(secs(119), true), Paced::Hold);
        assert_eq!(d(secs(120), true), Paced::Due);
        p.refreshing(k, t0 + secs(240));
        // Strained for LASTING intervals: 120 s after the last refresh is no longer enough.
        assert_eq!(d(secs(360), true), Paced::Hold);
        assert_eq!(d(secs(479), true), Paced::Hold);
        assert_eq!(d(secs(480), true), Paced::Due);
        // One fast refresh ends the strain, and with it the stretch: strained again later (the
        // breaker, say), the base interval holds.
        refresh(20);
        assert!(!p.last_refresh_strained(ix(0)));
        assert_eq!(d(secs(360), false), Paced::Normal);
        assert_eq!(d(secs(360), true), Paced::Due);
        // A new strain starts at the base again.
        tokio::time::advance(secs(360)).await;
        (0..STRAIN_AFTER).for_each(|_| refresh(1200));
        assert_eq!(d(secs(360), true), Paced::Due);
    }
}
