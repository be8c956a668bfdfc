//! What the developer's tools saw in one row, per surface: requests, failures a person would
//! see (an error printed, a list gone empty, a session no longer followed), latency, and how
//! old the session data was when it arrived.

use crate::stats::{Percentiles, Samples};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Default)]
struct Surface {
    requests: u64,
    failures: u64,
    /// Failed answers the tool absorbed without showing them (sent again, read as empty).
    absorbed: u64,
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
    /// Age of each Task API task answer VS Code got during a live turn (now − `updated_at`).
    task_staleness: Mutex<Samples>,
    /// Events each followed Task API turn ended with (task id → distinct event ids).
    turn_events: Mutex<BTreeMap<String, usize>>,
    mirror: Mutex<MirrorTally>,
}

/// What the Mission Control client sent and got back (issue #29: an event is lost or doubled
/// by Weir only if the client's own sends do not explain it).
#[derive(Debug, Default, Clone)]
pub struct MirrorTally {
    /// Event id → times the client put it in a batch (more than once after a failed batch).
    pub sent: BTreeMap<String, u32>,
    /// Event ids in a batch the client got a 2xx for.
    pub acked: BTreeSet<String>,
    /// Failed batches the client re-queued.
    pub batches_resent: u64,
    /// Events the client dropped (a failed batch while 2,000 were already buffered).
    pub dropped: u64,
    /// Command id → times the client ran it.
    pub runs: BTreeMap<String, u32>,
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
    pub absorbed: u64,
    pub latency: Percentiles,
}

impl Tally {
    /// One request; a failed one is a failure the person sees if `visible`, else absorbed.
    pub fn record(&self, surface: &'static str, took: Duration, ok: bool, visible: bool) {
        let mut m = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        let s = m.entry(surface).or_default();
        s.requests += 1;
        s.latency.push(took);
        match (ok, visible) {
            (true, _) => {}
            (false, true) => s.failures += 1,
            (false, false) => s.absorbed += 1,
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
                absorbed: s.absorbed,
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

    pub fn task_stale(&self, age: Duration) {
        self.task_staleness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(age);
    }

    pub fn task_staleness(&self) -> Percentiles {
        self.task_staleness
            .lock()
            .map(|s| s.percentiles())
            .unwrap_or_default()
    }

    /// A followed turn ended with `events` distinct events.
    pub fn turn_ended(&self, task: &str, events: usize) {
        self.turn_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(task.to_string(), events);
    }

    pub fn turn_events(&self) -> BTreeMap<String, usize> {
        self.turn_events
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    pub fn mirror(&self, f: impl FnOnce(&mut MirrorTally)) {
        f(&mut self.mirror.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub fn mirror_tally(&self) -> MirrorTally {
        self.mirror.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn stops(&self) -> u64 {
        self.stopped_following.lock().map(|s| *s).unwrap_or(0)
    }

    pub fn creates(&self) -> Creates {
        self.creates.lock().map(|c| c.clone()).unwrap_or_default()
    }
}
