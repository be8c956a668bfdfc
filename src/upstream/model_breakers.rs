//! Per-model circuit breakers: one `weir_resilience::Breaker` per (upstream, model) a
//! completion request names, apart from the upstream's own gate. A model provider's outage
//! (Oct 28) opens only that model's breaker, never the agent-sessions breaker; a sessions
//! outage (Oct 29) never touches these. Each entry also keeps the model's fallback count and
//! the fallback episode under way, so an episode is announced once when it starts and once
//! when it ends.
//!
//! The map is bounded: clients name the models, and a buggy or hostile one could name
//! thousands. Past [`MAX_MODELS`] the least recently used entry is dropped, preferring one
//! that is closed and not in an episode (a dropped breaker's state is forgotten, which only
//! ever lets calls through).

use crate::config::{is_model_name, UpstreamIndex};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;
use weir_resilience::{Breaker, BreakerConfig, FullJitter, NoJitter, State};

/// Models tracked at once, over every upstream (a developer uses a handful).
pub const MAX_MODELS: usize = 64;

/// `models[]`: one (upstream, model) pair's breaker and fallbacks. Never the agent-sessions
/// breaker: that one is `upstreams[].breaker`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    pub upstream: String,
    pub model: String,
    /// `closed`, `degraded`, `open` or `half_open`, and why.
    pub breaker: State,
    pub reason: String,
    /// Requests of this model re-sent with its fallback model since start.
    pub fallbacks: u64,
    /// The fallback episode under way (`null`: none).
    pub episode: Option<ModelEpisode>,
}

/// A model fallback episode: from the first fallback until the model answers again.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelEpisode {
    /// The model requests go to meanwhile.
    pub to: String,
    pub since: String,
    /// Fallbacks in this episode.
    pub fallbacks: u64,
    /// What made the first fallback (e.g. `overloaded (529)`, `breaker open`).
    pub reason: String,
}

#[derive(Default)]
pub(crate) struct ModelBreakers {
    inner: Mutex<Map>,
}

#[derive(Default)]
struct Map {
    entries: HashMap<(UpstreamIndex, String), Entry>,
    /// A use counter standing in for "recently used" (no clock needed).
    tick: u64,
}

struct Entry {
    upstream: String,
    breaker: Breaker,
    last_used: u64,
    fallbacks: u64,
    episode: Option<Episode>,
}

struct Episode {
    to: String,
    since: SystemTime,
    fallbacks: u64,
    reason: String,
}

/// An episode that started or ended, to announce.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EpisodeChange {
    pub upstream: String,
    pub from: String,
    pub to: String,
    pub fallbacks: u64,
    pub reason: String,
}

impl ModelBreakers {
    /// The breaker of `model` on upstream `up` (named `upstream`), made with `config` if new
    /// (an existing one is brought to `config` in place, keeping its state). `None` for a
    /// name Weir does not track (too long, or with quotes, spaces or control characters: see
    /// [`is_model_name`]): such a request goes out once, without a breaker.
    pub fn breaker(
        &self,
        up: UpstreamIndex,
        upstream: &str,
        model: &str,
        config: &BreakerConfig,
        jitter: bool,
    ) -> Option<Breaker> {
        if !is_model_name(model) {
            return None;
        }
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.tick += 1;
        let tick = m.tick;
        let key = (up, model.to_string());
        if let Some(e) = m.entries.get_mut(&key) {
            e.last_used = tick;
            if e.breaker.config() != *config {
                // Validated settings; a refusal keeps the old ones.
                let _ = e.breaker.reconfigure(config.clone());
            }
            return Some(e.breaker.clone());
        }
        if m.entries.len() >= MAX_MODELS {
            m.evict_one();
        }
        let name = format!("{upstream} model {model}");
        let breaker = if jitter {
            Breaker::new(name, config.clone(), FullJitter)
        } else {
            Breaker::new(name, config.clone(), NoJitter)
        }
        .ok()?;
        m.entries.insert(
            key,
            Entry {
                upstream: upstream.to_string(),
                breaker: breaker.clone(),
                last_used: tick,
                fallbacks: 0,
                episode: None,
            },
        );
        Some(breaker)
    }

    /// Counts one fallback of `model` to `to`; returns the episode change when this fallback
    /// starts one.
    pub fn fell_back(
        &self,
        up: UpstreamIndex,
        model: &str,
        to: &str,
        reason: &str,
    ) -> Option<EpisodeChange> {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entries.get_mut(&(up, model.to_string()))?;
        e.fallbacks += 1;
        match &mut e.episode {
            Some(ep) => {
                ep.fallbacks += 1;
                None
            }
            None => {
                e.episode = Some(Episode {
                    to: to.to_string(),
                    since: SystemTime::now(),
                    fallbacks: 1,
                    reason: reason.to_string(),
                });
                Some(EpisodeChange {
                    upstream: e.upstream.clone(),
                    from: model.to_string(),
                    to: to.to_string(),
                    fallbacks: 1,
                    reason: reason.to_string(),
                })
            }
        }
    }

    /// `model` answered well: if its breaker is back on the closed side, the episode under
    /// way (if any) ends, and is returned to announce. While half-open (probes still
    /// deciding) the episode goes on.
    pub fn answered(&self, up: UpstreamIndex, model: &str) -> Option<EpisodeChange> {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entries.get_mut(&(up, model.to_string()))?;
        e.episode.as_ref()?;
        if !matches!(e.breaker.state(), State::Closed | State::Degraded) {
            return None;
        }
        let ep = e.episode.take()?;
        Some(EpisodeChange {
            upstream: e.upstream.clone(),
            from: model.to_string(),
            to: ep.to,
            fallbacks: ep.fallbacks,
            reason: ep.reason,
        })
    }

    /// `models[]` in the status document, ordered by upstream then model.
    pub fn status(&self) -> Vec<ModelStatus> {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<((UpstreamIndex, String), ModelStatus)> = m
            .entries
            .iter()
            .map(|(k, e)| {
                let b = e.breaker.snapshot();
                let st = ModelStatus {
                    upstream: e.upstream.clone(),
                    model: k.1.clone(),
                    breaker: b.state,
                    reason: b.reason.to_string(),
                    fallbacks: e.fallbacks,
                    episode: e.episode.as_ref().map(|ep| ModelEpisode {
                        to: ep.to.clone(),
                        since: crate::time_fmt::rfc3339(ep.since),
                        fallbacks: ep.fallbacks,
                        reason: ep.reason.clone(),
                    }),
                };
                (k.clone(), st)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, s)| s).collect()
    }
}

impl Map {
    fn evict_one(&mut self) {
        let quiet = |e: &Entry| e.episode.is_none() && e.breaker.state() == State::Closed;
        let victim = self
            .entries
            .iter()
            .filter(|(_, e)| quiet(e))
            .min_by_key(|(_, e)| e.last_used)
            .or_else(|| self.entries.iter().min_by_key(|(_, e)| e.last_used))
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            self.entries.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(i: usize) -> UpstreamIndex {
        UpstreamIndex::at(i)
    }

    fn cfg() -> BreakerConfig {
        crate::config::Settings::default().resilience.breaker
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_and_keeps_the_troubled_ones() {
        let mb = ModelBreakers::default();
        let c = cfg();
        let sick = mb.breaker(ix(0), "up", "sick", &c, false).unwrap();
        assert!(sick.trip("test"));
        for i in 0..(MAX_MODELS * 2) {
            assert!(mb
                .breaker(ix(0), "up", &format!("m{i}"), &c, false)
                .is_some());
        }
        let st = mb.status();
        assert_eq!(st.len(), MAX_MODELS);
        let s = st
            .iter()
            .find(|s| s.model == "sick")
            .expect("open breaker kept");
        assert_eq!(s.breaker, State::Open);
        let long = "x".repeat(crate::config::MAX_MODEL_NAME + 1);
        for bad in [long.as_str(), "a\"b", "a b", ""] {
            assert!(mb.breaker(ix(0), "up", bad, &c, false).is_none(), "{bad}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_announcement_per_episode() {
        let mb = ModelBreakers::default();
        let c = cfg();
        let b = mb.breaker(ix(1), "up", "claude-x", &c, false).unwrap();
        let first = mb.fell_back(ix(1), "claude-x", "gpt-5", "overloaded (529)");
        assert_eq!(first.map(|e| e.fallbacks), Some(1));
        assert_eq!(
            mb.fell_back(ix(1), "claude-x", "gpt-5", "overloaded (529)"),
            None
        );
        // Open: a success (a probe) does not end it while the breaker is not closed.
        assert!(b.trip("test"));
        assert_eq!(mb.answered(ix(1), "claude-x"), None);
        let st = &mb.status()[0];
        assert_eq!(
            (st.fallbacks, st.episode.as_ref().map(|e| e.fallbacks)),
            (2, Some(2))
        );
        // Another upstream's model of the same name is another breaker.
        let other = mb.breaker(ix(2), "up2", "claude-x", &c, false).unwrap();
        assert_eq!(other.state(), State::Closed);
        // Closed: the model's next good answer ends its episode, announced once.
        assert!(mb
            .fell_back(ix(2), "claude-x", "gpt-5", "server_error (500)")
            .is_some());
        let end = mb.answered(ix(2), "claude-x").expect("episode ends");
        assert_eq!(
            (end.from.as_str(), end.to.as_str(), end.fallbacks),
            ("claude-x", "gpt-5", 1)
        );
        assert_eq!(mb.answered(ix(2), "claude-x"), None);
    }
}
