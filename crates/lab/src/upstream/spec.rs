//! What a lab upstream does (latency, failures, rate limit, token lifetimes) and what it
//! counts (requests per second, 5xx and 429 answers, creates per intent, answer instants).

use super::mirror::Mirror;
use super::tasks::Tasks;
use super::world::{SessionTiming, World};
use crate::timeline::Timeline;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use tokio::time::Instant;

/// The behaviour of one lab upstream. Serialisable so the `upstream` subcommand and the fleet
/// worker share it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSpec {
    /// Delay before every answer (list, view, create, other).
    pub latency_ms: u64,
    /// Delay before a token answer (`GET /copilot_internal/v2/token`).
    pub token_latency_ms: u64,
    /// Fraction of requests that fail after the delay (0.02 = 2 %): half with `500` before any
    /// work was done, half with `504` after it was done (the gateway gave up; a create made
    /// its session anyway).
    pub failure_rate: f64,
    /// Size of the session-list body.
    pub list_body_bytes: usize,
    /// `refresh_in` of issued Copilot tokens, seconds.
    pub token_refresh_in_s: u64,
    /// Tokens expire this long after they are issued, seconds.
    pub token_expires_in_s: u64,
    /// A secondary rate limit: beyond `limit` requests per fixed window, `429` + `Retry-After`.
    pub rate_limit: Option<RateLimitSpec>,
    /// Seed of the failure draws, so a run can be repeated.
    pub seed: u64,
    /// How a created session moves on (queued → running → completed, its pull request).
    #[serde(default)]
    pub session_timing: SessionTiming,
    /// Whether `failure_rate` also fails Mission Control's calls (`/agents/sessions` create,
    /// its events and commands). Its backend is not known from any public source (issue #29);
    /// a scenario says which it assumes. Latency applies either way.
    #[serde(default = "yes")]
    pub mission_control_faults: bool,
    /// The Copilot API origin a token answer names in `endpoints.api` (`None`: this upstream's
    /// own). A real answer from api.github.com names the Copilot API host, never itself: the
    /// developer's hour serves the token from its api.github.com upstream and names the agents
    /// upstream here.
    #[serde(default)]
    pub api_origin: Option<String>,
}

fn yes() -> bool {
    true
}

/// One intent's sessions on the upstream.
#[derive(Debug, Clone)]
struct Created {
    times: u32,
    problem_statement: String,
    /// Unix seconds of the first creation.
    created_at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimitSpec {
    pub limit: u32,
    pub window_ms: u64,
}

impl Default for UpstreamSpec {
    fn default() -> Self {
        UpstreamSpec {
            latency_ms: 0,
            token_latency_ms: 0,
            failure_rate: 0.0,
            list_body_bytes: 1024,
            token_refresh_in_s: 1500,
            token_expires_in_s: 1800,
            rate_limit: None,
            seed: 7,
            session_timing: SessionTiming::default(),
            mission_control_faults: true,
            api_origin: None,
        }
    }
}

impl UpstreamSpec {
    /// Every route answers after `ms`.
    pub fn with_latency(ms: u64) -> UpstreamSpec {
        UpstreamSpec {
            latency_ms: ms,
            token_latency_ms: ms,
            ..UpstreamSpec::default()
        }
    }
}

/// The upstream's own counters: the ground truth of every lab table.
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    /// Every request received, by second of arrival.
    pub requests: Timeline,
    /// Requests answered `500` on purpose.
    pub failed: AtomicU64,
    /// Requests refused with `429` by the rate limit.
    pub rate_limited: AtomicU64,
    /// Token requests received.
    pub token_requests: AtomicU64,
    /// Create requests received.
    pub create_requests: AtomicU64,
    /// Requests Weir sent for itself (`User-Agent: weir/…`: its own `GET /user`), not for a
    /// client; they are also counted by route (`/user` as `weir user`).
    pub weir_own: AtomicU64,
    /// While set, every request fails with `500` (the team scenario's outage).
    pub outage: std::sync::atomic::AtomicBool,
    creates: Mutex<BTreeMap<String, Created>>,
    answers: Mutex<Vec<Instant>>,
    /// Requests received per route (`list`, `session`, `logs`, `job`, `token`, `create`, …).
    by_route: Mutex<BTreeMap<&'static str, u64>>,
    /// The account's sessions and jobs, in their real shapes.
    pub world: World,
    /// The account's Task API tasks.
    pub tasks: Tasks,
    /// Mission Control: the mirrored local session's events and commands.
    pub mirror: Mirror,
}

impl UpstreamCounters {
    /// Records that the session for `intent` was created (again).
    pub(crate) fn created(&self, intent: &str, problem_statement: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if let Ok(mut m) = self.creates.lock() {
            let e = m.entry(intent.to_string()).or_insert_with(|| Created {
                times: 0,
                problem_statement: problem_statement.to_string(),
                created_at: now,
            });
            e.times += 1;
        }
    }

    /// How many times each intent was created.
    pub fn creates(&self) -> BTreeMap<String, u32> {
        self.creates
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.times)).collect())
            .unwrap_or_default()
    }

    /// The created sessions as the session list shows them (what Weir's in-doubt lookup reads).
    pub(crate) fn sessions_json(&self) -> String {
        let m = self.creates.lock().map(|m| m.clone()).unwrap_or_default();
        let sessions: Vec<serde_json::Value> = m
            .iter()
            .map(|(intent, c)| {
                // The real session has no `problem_statement`; the service names it after
                // the statement (the job behind it has the statement itself).
                serde_json::json!({ "id": format!("s-{intent}"), "name": c.problem_statement, "state": "queued", "resource_type": "", "resource_id": 0, "created_at": super::world::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.created_at)) })
            })
            .collect();
        serde_json::json!({ "sessions": sessions }).to_string()
    }

    pub(crate) fn answered(&self, at: Instant) {
        if let Ok(mut v) = self.answers.lock() {
            // Bounded: only the first answers matter (the cold-GET spread check).
            if v.len() < 4096 {
                v.push(at);
            }
        }
    }

    /// The instants the first (up to 4,096) answers were produced, in order.
    pub fn answer_instants(&self) -> Vec<Instant> {
        self.answers.lock().map(|v| v.clone()).unwrap_or_default()
    }

    pub(crate) fn count_route(&self, route: &'static str) {
        if let Ok(mut m) = self.by_route.lock() {
            *m.entry(route).or_default() += 1;
        }
    }

    /// Requests received per route.
    pub fn by_route(&self) -> BTreeMap<&'static str, u64> {
        self.by_route.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Relaxed)
    }

    pub fn weir_own(&self) -> u64 {
        self.weir_own.load(Relaxed)
    }

    pub fn rate_limited(&self) -> u64 {
        self.rate_limited.load(Relaxed)
    }
}
