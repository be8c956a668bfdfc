//! What the developer's tools saw in one row, per surface: requests, failures a person would
//! see (an error printed, a list gone empty, a session no longer followed), latency, and how
//! old the session data was when it arrived.

use crate::stats::{Percentiles, Samples};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Default)]
struct Surface {
    requests: u64,
    failures: u64,
    latency: Samples,
}

/// The row's tallies; every duration is recorded in simulated time (wall × speed).
#[derive(Debug, Default)]
pub struct Tally {
    surfaces: Mutex<BTreeMap<&'static str, Surface>>,
    /// Age of each session answer VS Code got (now − its `last_updated_at`).
    staleness: Mutex<Samples>,
    /// Running sessions VS Code silently stopped following after a failed poll.
    stopped_following: Mutex<u64>,
    creates: Mutex<Creates>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Creates {
    /// Tasks the developer meant to create.
    pub intended: u64,
    /// "Delegate" presses (a second one after an error).
    pub presses: u64,
    /// Presses VS Code accepted (a job with `job_id` and `session_id`).
    pub accepted: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SurfaceSummary {
    pub surface: String,
    pub requests: u64,
    pub failures: u64,
    pub latency: Percentiles,
}

impl Tally {
    pub fn record(&self, surface: &'static str, took: Duration, ok: bool) {
        let mut m = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        let s = m.entry(surface).or_default();
        s.requests += 1;
        s.latency.push(took);
        if !ok {
            s.failures += 1;
        }
    }

    /// A failure the person sees that is not one request's (a wait that timed out).
    pub fn fail(&self, surface: &'static str) {
        let mut m = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(surface).or_default().failures += 1;
    }

    pub fn stale(&self, age: Duration) {
        self.staleness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(age);
    }

    pub fn stopped_following(&self) {
        *self
            .stopped_following
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
    }

    pub fn create(&self, f: impl FnOnce(&mut Creates)) {
        f(&mut self.creates.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub fn surfaces(&self) -> Vec<SurfaceSummary> {
        let m = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|(k, s)| SurfaceSummary {
                surface: k.to_string(),
                requests: s.requests,
                failures: s.failures,
                latency: s.latency.percentiles(),
            })
            .collect()
    }

    pub fn all_latency(&self) -> Percentiles {
        let m = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Samples::default();
        for s in m.values() {
            all.extend(s.latency.clone());
        }
        all.percentiles()
    }

    pub fn staleness(&self) -> Percentiles {
        self.staleness
            .lock()
            .map(|s| s.percentiles())
            .unwrap_or_default()
    }

    pub fn stops(&self) -> u64 {
        self.stopped_following.lock().map(|s| *s).unwrap_or(0)
    }

    pub fn creates(&self) -> Creates {
        self.creates.lock().map(|c| c.clone()).unwrap_or_default()
    }
}
