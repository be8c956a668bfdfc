//! 200 concurrent identical cold GETs through Weir against a 1.2 s upstream: the upstream must
//! see one request, and the last waiter should have its answer within a few milliseconds of the
//! upstream's.

use crate::client::LabClient;
use crate::report::{Section, Table};
use crate::upstream::{Upstream, UpstreamSpec};
use crate::weir_ctl::{Caching, LabWeir};
use crate::LabError;
use serde::Serialize;
use tokio::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct ColdResult {
    pub name: String,
    pub waiters: usize,
    pub upstream_latency_ms: u64,
    /// Requests the upstream received (by its own count).
    pub upstream_requests: u64,
    /// Waiters that got a 2xx.
    pub answered_ok: usize,
    /// From the upstream producing its answer to the first / last answered waiter having the
    /// whole body.
    pub first_ms: f64,
    pub spread_ms: f64,
}

/// Sends `waiters` identical GETs (same identity) through a fresh Weir (default caching plus
/// `weir_extra`) at once.
pub async fn run_cold(
    waiters: usize,
    latency_ms: u64,
    weir_extra: &str,
) -> Result<ColdResult, LabError> {
    let up = Upstream::start(UpstreamSpec::with_latency(latency_ms)).await?;
    let weir = LabWeir::start(&up.origin(), Caching::Default, weir_extra).await?;
    let client = LabClient::via_proxy(weir.addr());
    let url = format!("{}/agents/sessions", up.origin());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..waiters {
        let (client, url) = (client.clone(), url.clone());
        tasks.spawn(async move {
            let ok =
                matches!(client.get(&url, "cold-identity").await, Ok(a) if a.status.is_success());
            (ok, Instant::now())
        });
    }
    let mut ends = Vec::with_capacity(waiters);
    let mut answered_ok = 0;
    while let Some(joined) = tasks.join_next().await {
        if let Ok((ok, at)) = joined {
            if ok {
                answered_ok += 1;
                ends.push(at);
            }
        }
    }
    let answered_at = up.counters().answer_instants().first().copied();
    let ms = |at: Option<Instant>| match (at, answered_at) {
        (Some(a), Some(u)) => a.saturating_duration_since(u).as_secs_f64() * 1000.0,
        _ => f64::NAN,
    };
    let result = ColdResult {
        name: if weir_extra.is_empty() {
            "Weir defaults".into()
        } else {
            "with extra settings".into()
        },
        waiters,
        upstream_latency_ms: latency_ms,
        upstream_requests: up.counters().requests.total(),
        answered_ok,
        first_ms: ms(ends.iter().min().copied()),
        spread_ms: ms(ends.iter().max().copied()),
    };
    weir.stop().await;
    up.stop();
    Ok(result)
}

pub async fn run() -> Result<Section, LabError> {
    let defaults = run_cold(200, 1200, "").await?;
    Ok(section(&[defaults]))
}

pub fn section(results: &[ColdResult]) -> Section {
    let mut table = Table::new(&[
        "scenario",
        "upstream requests",
        "answered 2xx",
        "first waiter after upstream",
        "last waiter after upstream",
    ]);
    for r in results {
        table.push(vec![
            format!(
                "{} identical cold GETs, {} ms upstream, {}",
                r.waiters, r.upstream_latency_ms, r.name
            ),
            r.upstream_requests.to_string(),
            format!("{}/{}", r.answered_ok, r.waiters),
            format!("{:.2} ms", r.first_ms),
            format!("{:.2} ms", r.spread_ms),
        ]);
    }
    Section {
        key: "cold".into(),
        title: "cold GETs: coalescing".into(),
        intro: "All requests carry the same token, so they share one cache key; each has its own \
                connection to Weir. Times are measured in one process with one monotonic clock: from \
                the upstream handler producing its answer to each client holding the whole body."
            .into(),
        table,
        series: Vec::new(),
        notes: vec![
            "target: 1 upstream request, last waiter ≤ 5 ms after the upstream's answer.".into(),
            "Weir's defaults, per-client rate limit included: followers that join a running fetch do not count against it.".into(),
        ],
    }
}
