//! Oct 29: the agent-sessions service fails 2 % of calls and answers in 1,200 ms; on every
//! laptop three surfaces keep polling the session list (VS Code once per running session every
//! 5 s, a CLI listing, a browser tab), each retrying on its own, while people create sessions
//! and press "create" again when they see an error.

use super::surfaces::{poll_loop, CreateLoop, CreateTally, Creates, PollTally, Polls, Surface};
use super::LabConfig;
use crate::client::LabClient;
use crate::report::{ms, num, percent, Section, Series, Table};
use crate::timeline::mean_rate;
use crate::upstream::{Upstream, UpstreamSpec};
use crate::weir_ctl::{Caching, LabWeir};
use crate::LabError;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Running sessions per developer, each with a VS Code window polling the list.
const SESSIONS: usize = 3;

#[derive(Debug, Clone, Serialize)]
pub struct Oct29Row {
    pub name: String,
    pub developers: usize,
    pub upstream_rps: f64,
    pub upstream_failed: u64,
    pub polls: Polls,
    pub creates: Creates,
    /// Intents with no session upstream after the grace period.
    pub lost: u64,
    /// Intents with more than one session upstream.
    pub doubled: u64,
    pub per_second: Vec<u64>,
}

pub fn upstream_spec() -> UpstreamSpec {
    UpstreamSpec {
        failure_rate: 0.02,
        ..UpstreamSpec::with_latency(1200)
    }
}

/// One row: `weir` = `None` for direct.
pub async fn run_row(
    cfg: &LabConfig,
    developers: usize,
    weir: Option<Caching>,
) -> Result<Oct29Row, LabError> {
    let up = Upstream::start(UpstreamSpec {
        seed: cfg.seed,
        ..upstream_spec()
    })
    .await?;
    let lab_weir = match weir {
        Some(c) => Some(LabWeir::start(&up.origin(), c, "").await?),
        None => None,
    };
    let client = LabClient::new(lab_weir.as_ref().map(|w| w.addr()));
    let list_url = format!("{}/agents/sessions", up.origin());
    let create_url = format!("{}/agents/swe/v1/jobs/octo/lab", up.origin());
    let polls = Arc::new(PollTally::default());
    let creates = Arc::new(CreateTally::default());
    up.counters().requests.restart();
    let start = Instant::now();
    let end = start + Duration::from_secs(cfg.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for d in 0..developers {
        let mut surfaces: Vec<Surface> = (0..SESSIONS).map(|_| Surface::vscode(d)).collect();
        surfaces.push(Surface::cli(d));
        surfaces.push(Surface::browser(d));
        for (i, s) in surfaces.into_iter().enumerate() {
            let seed = cfg.seed ^ ((d * 16 + i) as u64);
            tasks.spawn(poll_loop(
                client.clone(),
                list_url.clone(),
                s,
                start,
                end,
                polls.clone(),
                seed,
            ));
        }
        let creator = CreateLoop {
            client: client.clone(),
            url: create_url.clone(),
            dev: d,
            period: Duration::from_secs(15),
            tally: creates.clone(),
            seed: cfg.seed ^ d as u64,
        };
        tasks.spawn(creator.run(start, end));
    }
    while tasks.join_next().await.is_some() {}
    let seconds = cfg.seconds as usize;
    let per_second = up.counters().requests.per_second(seconds);
    // Queued creates are replayed after the run: give them time to land.
    let intended = creates.intended();
    let grace_end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < grace_end && up.counters().creates().len() < intended.len() {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let made = up.counters().creates();
    let lost = intended.iter().filter(|i| !made.contains_key(*i)).count() as u64;
    let doubled = made.values().filter(|n| **n > 1).count() as u64;
    if let Some(w) = lab_weir {
        w.stop().await;
    }
    let row = Oct29Row {
        name: match weir {
            None => "direct".into(),
            Some(_) => "through Weir".into(),
        },
        developers,
        upstream_rps: mean_rate(&per_second, 0, seconds),
        upstream_failed: up.counters().failed(),
        polls: polls.snapshot(),
        creates: creates.snapshot(),
        lost,
        doubled,
        per_second,
    };
    up.stop();
    Ok(row)
}

/// Developers for a fleet of `clients`: one per ten clients, at least five.
pub fn developers(clients: usize) -> usize {
    (clients / 10).max(5)
}

pub async fn run(cfg: &LabConfig) -> Result<Section, LabError> {
    let devs = developers(cfg.clients);
    eprintln!("oct29: direct ({devs} developers × {} s)", cfg.seconds);
    let direct = run_row(cfg, devs, None).await?;
    eprintln!("oct29: through Weir");
    let weir = run_row(cfg, devs, Some(Caching::Default)).await?;
    Ok(section(cfg, &[direct, weir]))
}

pub fn section(cfg: &LabConfig, rows: &[Oct29Row]) -> Section {
    let mut table = Table::new(&[
        "scenario",
        "upstream req/s",
        "success",
        "list p50",
        "list p99",
        "list errors",
        "creates",
        "answered 202 (queued)",
        "lost",
        "doubled",
    ]);
    for r in rows {
        table.push(vec![
            r.name.clone(),
            num(r.upstream_rps),
            percent(r.polls.success_fraction()),
            ms(r.polls.latency.p50_ms),
            ms(r.polls.latency.p99_ms),
            r.polls.errors.to_string(),
            r.creates.intended.to_string(),
            r.creates.queued.to_string(),
            r.lost.to_string(),
            r.doubled.to_string(),
        ]);
    }
    let devs = rows.first().map(|r| r.developers).unwrap_or(0);
    Section {
        key: "oct29".into(),
        title: format!("oct29: {devs} developers × {} s", cfg.seconds),
        intro: format!(
            "The upstream answers every call in 1,200 ms and fails 2 % of them (half `500` before any \
             work, half `504` after the work was done). Each of {devs} developers has {SESSIONS} running \
             sessions, each with a VS Code window polling `GET /agents/sessions` every 5 s (2 immediate \
             retries on an error), a CLI listing every 10 s (1 retry) and a browser tab every 10 s (no \
             retry), and creates a session every 15 s, pressing \"create\" again (up to 3 presses) when \
             the answer is an error. Success and latency are per logical list call, retries included. \
             Lost = an intended create with no session upstream after a 30 s grace; doubled = more than one."
        ),
        table,
        series: rows.iter().map(|r| Series { label: r.name.clone(), per_second: r.per_second.clone() }).collect(),
        notes: vec![],
    }
}
