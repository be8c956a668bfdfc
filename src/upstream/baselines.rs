//! The breakers' latency baselines kept across restarts: `baselines.json` in the data dir
//! (owner-only, a few hundred bytes per upstream), read when the engine starts and written
//! every few minutes and at shutdown, so a restart during a slowdown still knows what normal
//! was (issue 22, item 9). A missing, stale or unreadable file only means relearning.

use super::Upstreams;
use crate::config::RouteClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const FILE: &str = "baselines.json";
const VERSION: u32 = 1;
/// Newest samples kept per class: more than `baseline_min_samples` (10 by default), so the
/// restored median judges at once, and few enough that the file stays small.
const KEEP: usize = 16;
/// A sample longer than this is not a latency Weir measured (the longest class deadline is
/// minutes); the file was edited or damaged.
const MAX_SAMPLE_US: u64 = 3_600_000_000;
/// How often the file is rewritten while running (a crash loses at most this much learning).
const EVERY: Duration = Duration::from_secs(300);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    version: u32,
    /// By upstream name.
    upstreams: BTreeMap<String, StoredUpstream>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredUpstream {
    /// Baselines belong to an origin: a name pointed elsewhere starts over.
    origin: String,
    /// Good latencies by class, in µs, oldest first.
    classes: BTreeMap<String, Vec<u64>>,
}

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// Puts the kept baselines back into the breakers of the upstreams whose name and origin
/// match. Returns how many classes were restored.
pub(crate) fn restore(upstreams: &Upstreams, data_dir: &Path) -> usize {
    let file = path(data_dir);
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "latency baselines not read; relearning");
            return 0;
        }
    };
    let stored: Stored = match serde_json::from_slice(&bytes) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "latency baselines unreadable; relearning");
            return 0;
        }
    };
    if stored.version != VERSION {
        return 0;
    }
    let mut restored = 0;
    for u in &upstreams.list {
        let Some(s) = stored.upstreams.get(&u.settings.name) else {
            continue;
        };
        if s.origin != u.settings.origin.to_string() {
            continue;
        }
        for (class, ms) in &s.classes {
            let Some(class) = RouteClass::parse(class) else {
                continue;
            };
            let samples: Vec<Duration> = ms
                .iter()
                .filter(|&&m| m <= MAX_SAMPLE_US)
                .map(|&m| Duration::from_micros(m))
                .collect();
            if !samples.is_empty() {
                u.gate.breaker.restore_baseline(class.as_str(), &samples);
                restored += 1;
            }
        }
    }
    restored
}

/// Writes every upstream's baselines (the newest [`KEEP`] samples per class).
pub(crate) fn save(upstreams: &Upstreams, data_dir: &Path) {
    let mut stored = Stored {
        version: VERSION,
        upstreams: BTreeMap::new(),
    };
    for u in &upstreams.list {
        let classes: BTreeMap<String, Vec<u64>> = u
            .gate
            .breaker
            .baselines()
            .into_iter()
            .map(|(class, v)| {
                let skip = v.len().saturating_sub(KEEP);
                let ms = v[skip..]
                    .iter()
                    .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                    .collect();
                (class.to_owned(), ms)
            })
            .collect();
        if !classes.is_empty() {
            stored.upstreams.insert(
                u.settings.name.clone(),
                StoredUpstream {
                    origin: u.settings.origin.to_string(),
                    classes,
                },
            );
        }
    }
    if stored.upstreams.is_empty() && !path(data_dir).exists() {
        return;
    }
    let file = path(data_dir);
    let written = serde_json::to_vec(&stored)
        .map_err(std::io::Error::other)
        .and_then(|b| crate::paths::write_private(&file, &b));
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "latency baselines not written");
    }
}

/// Restores the baselines now, then rewrites them every [`EVERY`] until the engine stops
/// (the final write is [`save`] at shutdown, which the engine awaits).
pub(crate) fn spawn(
    upstreams: Arc<Upstreams>,
    data_dir: PathBuf,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    tasks: &tokio_util::task::TaskTracker,
) {
    let n = restore(&upstreams, &data_dir);
    if n > 0 {
        tracing::info!(classes = n, "latency baselines restored");
    }
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.tick().await;
        loop {
            let stop = tokio::select! {
                _ = tick.tick() => false,
                _ = stopping.wait_for(|s| *s) => true,
            };
            if stop {
                return;
            }
            let (u, d) = (upstreams.clone(), data_dir.clone());
            let _ = tokio::task::spawn_blocking(move || save(&u, &d)).await;
        }
    });
}
