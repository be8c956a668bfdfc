//! Parallel coding agents against a rate-limited upstream (429 + `Retry-After`). Naive agents
//! retry a refused call after 100 ms whatever the server said; polite ones wait `Retry-After`.
//! Wasted calls are the upstream's own 429 count; time to finish is until the last agent is done.

use super::LabConfig;
use crate::client::{request, Credential, LabClient};
use crate::report::{num, Section, Series, Table};
use crate::upstream::{RateLimitSpec, Upstream, UpstreamSpec};
use crate::weir_ctl::{Caching, LabWeir};
use crate::LabError;
use bytes::Bytes;
use http::{header, HeaderValue, Method};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Calls each agent must complete.
pub const CALLS: usize = 15;
/// The upstream lets this many calls through per window.
pub const LIMIT: RateLimitSpec = RateLimitSpec {
    limit: 10,
    window_ms: 2000,
};
/// An agent that is not done by then gives up.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Habit {
    /// Retries a refused call after 100 ms.
    Naive,
    /// Waits what `Retry-After` says (1 s without one).
    Polite,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentsRow {
    pub name: String,
    pub agents: usize,
    /// Calls the upstream received / refused with 429.
    pub upstream_calls: u64,
    pub upstream_429: u64,
    /// Calls the agents sent (Weir may have answered some itself).
    pub agent_attempts: u64,
    pub completed: u64,
    pub finish_s: f64,
    pub per_second: Vec<u64>,
}

pub async fn run_row(
    name: &str,
    agents: usize,
    habit: Habit,
    weir: bool,
) -> Result<AgentsRow, LabError> {
    let up = Upstream::start(UpstreamSpec {
        rate_limit: Some(LIMIT),
        ..UpstreamSpec::with_latency(50)
    })
    .await?;
    let lab_weir = match weir {
        true => Some(LabWeir::start(&up.origin(), Caching::Default, "").await?),
        false => None,
    };
    let client = LabClient::new(lab_weir.as_ref().map(|w| w.addr()));
    let attempts = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    up.counters().requests.restart();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for a in 0..agents {
        let (client, origin) = (client.clone(), up.origin());
        let (attempts, completed) = (attempts.clone(), completed.clone());
        tasks.spawn(async move {
            for i in 0..CALLS {
                // Distinct pass-through calls (class `other`): nothing a cache could answer.
                let url = format!("{origin}/repos/octo/lab/contents/agent{a}/file{i}");
                if call(&client, &url, habit, &attempts, start + DEADLINE).await {
                    completed.fetch_add(1, Relaxed);
                } else {
                    return;
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let finish_s = start.elapsed().as_secs_f64();
    let seconds = finish_s.ceil() as usize;
    if let Some(w) = lab_weir {
        w.stop().await;
    }
    let row = AgentsRow {
        name: name.to_string(),
        agents,
        upstream_calls: up.counters().requests.total(),
        upstream_429: up.counters().rate_limited(),
        agent_attempts: attempts.load(Relaxed),
        completed: completed.load(Relaxed),
        finish_s,
        per_second: up.counters().requests.per_second(seconds),
    };
    up.stop();
    Ok(row)
}

/// One call, retried per `habit` until it succeeds or `deadline` passes.
async fn call(
    client: &LabClient,
    url: &str,
    habit: Habit,
    attempts: &AtomicU64,
    deadline: Instant,
) -> bool {
    while Instant::now() < deadline {
        attempts.fetch_add(1, Relaxed);
        let Ok(mut req) = request(
            Method::GET,
            url,
            Credential::Token("agent-token"),
            Bytes::new(),
        ) else {
            return false;
        };
        req.headers_mut().insert(
            header::USER_AGENT,
            HeaderValue::from_static("copilot-swe-agent/1.0"),
        );
        let wait = match client.send(req).await {
            Ok(a) if a.status.is_success() => return true,
            Ok(a) => match habit {
                Habit::Naive => Duration::from_millis(100),
                Habit::Polite => retry_after(&a.headers).unwrap_or(Duration::from_secs(1)),
            },
            Err(_) => Duration::from_millis(100),
        };
        tokio::time::sleep(wait).await;
    }
    false
}

fn retry_after(h: &http::HeaderMap) -> Option<Duration> {
    h.get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

pub async fn run(_cfg: &LabConfig) -> Result<Section, LabError> {
    let agents = 6;
    let mut rows = Vec::new();
    for (name, habit, weir) in [
        ("naive retries, direct", Habit::Naive, false),
        ("honours Retry-After, direct", Habit::Polite, false),
        ("naive retries, through Weir", Habit::Naive, true),
    ] {
        eprintln!("agents-429: {name} ({agents} agents × {CALLS} calls)");
        rows.push(run_row(name, agents, habit, weir).await?);
    }
    Ok(section(&rows))
}

pub fn section(rows: &[AgentsRow]) -> Section {
    let mut table = Table::new(&[
        "scenario",
        "upstream req/s",
        "success",
        "wasted calls (upstream 429s)",
        "upstream calls",
        "agent attempts",
        "time to finish",
    ]);
    for r in rows {
        table.push(vec![
            r.name.clone(),
            num(r.upstream_calls as f64 / r.finish_s.max(0.001)),
            format!("{}/{}", r.completed, r.agents * CALLS),
            r.upstream_429.to_string(),
            r.upstream_calls.to_string(),
            r.agent_attempts.to_string(),
            format!("{:.1} s", r.finish_s),
        ]);
    }
    let agents = rows.first().map(|r| r.agents).unwrap_or(0);
    Section {
        key: "agents-429".into(),
        title: format!("agents-429: {agents} parallel agents"),
        intro: format!(
            "{agents} agents each make {CALLS} distinct pass-through calls (`GET /repos/octo/lab/contents/…`, \
             one token) against an upstream that allows {} calls per {} ms window and refuses the rest \
             with `429` and `Retry-After` (seconds to the window's end). Naive agents retry a refused \
             call after 100 ms; polite ones sleep `Retry-After`.",
            LIMIT.limit, LIMIT.window_ms
        ),
        table,
        series: rows.iter().map(|r| Series { label: r.name.clone(), per_second: r.per_second.clone() }).collect(),
        notes: vec![],
    }
}
