//! Team: N Weirs (library engines in this process, one per developer) in front of one upstream
//! that breaks hard. Each developer's tools poll the session list at their own pace: a couple
//! of busy laptops (an agent loop) and many light ones. Without team signals every Weir must
//! find the outage with its own failing calls (a light one may never collect enough to open);
//! with them, the first Weirs to open tell the rest over a real `nats-server`.

use super::LabConfig;
use crate::client::LabClient;
use crate::nats::NatsServer;
use crate::report::{Section, Series, Table};
use crate::upstream::{Upstream, UpstreamSpec};
use crate::weir_ctl::{lab_config, Caching, LabWeir, NO_RATE_LIMIT};
use crate::LabError;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use weir::events::{BreakerState, Event};

/// Healthy traffic before the outage (team links connect, teammates see each other).
const WARM_UP: Duration = Duration::from_secs(3);
/// Busy laptops (poll every 250 ms); the rest poll every 1–4 s.
const BUSY: usize = 2;

/// Which team setting a row runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signals {
    Off,
    Cautious,
    Open,
}

impl Signals {
    fn label(self) -> &'static str {
        match self {
            Signals::Off => "no team signals",
            Signals::Cautious => "team signals, action = cautious",
            Signals::Open => "team signals, action = open",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TeamRow {
    pub signals: Signals,
    pub weirs: usize,
    /// Calls that reached the (broken) upstream during the outage window: every one failed.
    pub failing_calls: u64,
    /// Weirs whose breaker opened within the window.
    pub opened: usize,
    /// Seconds from the outage's start to each opened breaker's first opening: median, max.
    pub open_median_s: Option<f64>,
    pub open_max_s: Option<f64>,
    pub per_second: Vec<u64>,
}

/// Poll period of Weir `i` of `n`: the first `BUSY` (2) every 250 ms, then 1 s … 4 s.
pub fn period(i: usize, n: usize) -> Duration {
    if i < BUSY {
        return Duration::from_millis(250);
    }
    let light = n.saturating_sub(BUSY).max(2) - 1;
    Duration::from_millis(1000 + ((i - BUSY) as u64 * 3000) / light as u64)
}

const TEAM_KEY: &str = "6c61622d7465616d2d6b65792d6c61622d7465616d2d6b65792d6c61622d6b65";

/// The NATS login of the lab's `i`-th Weir.
fn lab_user(i: usize) -> String {
    format!("weir{i}")
}

/// One row: `weirs` Weirs, an outage of `seconds`.
pub async fn run_row(weirs: usize, seconds: u64, signals: Signals) -> Result<TeamRow, LabError> {
    let up = Upstream::start(UpstreamSpec::with_latency(20)).await?;
    let nats = match signals {
        Signals::Off => None,
        _ => {
            Some(NatsServer::start_with_users(&(0..weirs).map(lab_user).collect::<Vec<_>>()).await?)
        }
    };
    let team_toml = match (&nats, signals) {
        (Some(n), Signals::Open) => {
            format!("\n[team]\nnats_url = \"{}\"\naction = \"open\"\n", n.url())
        }
        (Some(n), _) => format!(
            "\n[team]\nnats_url = \"{}\"\naction = \"cautious\"\n",
            n.url()
        ),
        (None, _) => String::new(),
    };
    let toml = format!(
        "watch_github_status = false\n{}",
        lab_config(
            &up.origin(),
            Caching::Off,
            &format!("{NO_RATE_LIMIT}{team_toml}")
        )
    );
    // One NATS login per Weir, as a team must have (teammates are counted by login).
    let secrets = |i: usize| weir::team::TeamSecrets {
        key: weir::team::TeamKey::from_hex(TEAM_KEY),
        auth: Some(weir::team::NatsAuth::UserPassword {
            user: lab_user(i),
            password: format!("pw-{}", lab_user(i)),
        }),
    };
    let mut fleet = Vec::with_capacity(weirs);
    for i in 0..weirs {
        let s = (signals != Signals::Off).then(|| secrets(i));
        fleet.push(LabWeir::start_team(&toml, s).await?);
    }
    if signals != Signals::Off {
        // Every team link up before the clock starts (bounded: 20 s).
        for w in &fleet {
            for _ in 0..200 {
                if w.handle().status().await.team.is_some_and(|t| t.connected) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let url = format!("{}/agents/sessions", up.origin());
    let stop_at = Instant::now() + WARM_UP + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, w) in fleet.iter().enumerate() {
        let client = LabClient::new(Some(w.addr()));
        let (url, every) = (url.clone(), period(i, weirs));
        let token = format!("lab-token-{i}");
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < stop_at {
                tick.tick().await;
                let _ = client.get(&url, &token).await;
            }
        });
    }
    tokio::time::sleep(WARM_UP).await;
    // The outage starts: watch every Weir's breaker from now on.
    let opened_at: Arc<std::sync::Mutex<Vec<Option<Duration>>>> =
        Arc::new(std::sync::Mutex::new(vec![None; weirs]));
    let start = Instant::now();
    for (i, w) in fleet.iter().enumerate() {
        let mut events = w.handle().subscribe();
        let opened_at = opened_at.clone();
        tasks.spawn(async move {
            while Instant::now() < stop_at {
                match tokio::time::timeout_at(stop_at, events.recv()).await {
                    Ok(Ok(Event::Breaker {
                        to: BreakerState::Open,
                        ..
                    })) => {
                        if let Ok(mut v) = opened_at.lock() {
                            v[i].get_or_insert(start.elapsed());
                        }
                    }
                    Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                    _ => return,
                }
            }
        });
    }
    up.counters().requests.restart();
    up.set_outage(true);
    while tasks.join_next().await.is_some() {}
    let per_second = up.counters().requests.per_second(seconds as usize);
    let failing_calls = per_second.iter().sum();
    for w in fleet {
        w.stop().await;
    }
    up.stop();
    drop(nats);
    let mut times: Vec<f64> = opened_at
        .lock()
        .map(|v| v.iter().flatten().map(|d| d.as_secs_f64()).collect())
        .unwrap_or_default();
    times.sort_by(f64::total_cmp);
    Ok(TeamRow {
        signals,
        weirs,
        failing_calls,
        opened: times.len(),
        open_median_s: times.get(times.len() / 2).copied(),
        open_max_s: times.last().copied(),
        per_second,
    })
}

pub async fn run(cfg: &LabConfig) -> Result<Section, LabError> {
    let n = 20;
    // The benchmark measures the outage's first minute: `--seconds 60`.
    let seconds = cfg.seconds;
    let mut rows = Vec::new();
    for s in [Signals::Off, Signals::Cautious, Signals::Open] {
        eprintln!("team: {n} Weirs, {} ({seconds} s outage)", s.label());
        rows.push(run_row(n, seconds, s).await?);
    }
    Ok(section(&rows, seconds))
}

pub fn section(rows: &[TeamRow], seconds: u64) -> Section {
    let base = rows
        .iter()
        .find(|r| r.signals == Signals::Off)
        .map(|r| r.failing_calls);
    let mut table = Table::new(&[
        "scenario",
        "failing calls upstream (outage's first minute)",
        "vs. no signals",
        "Weirs opened",
        "time to open, median",
        "time to open, slowest",
    ]);
    let secs = |v: Option<f64>| v.map_or("—".to_string(), |s| format!("{s:.1} s"));
    for r in rows {
        table.push(vec![
            r.signals.label().to_string(),
            r.failing_calls.to_string(),
            base.filter(|b| *b > 0).map_or("—".into(), |b| {
                format!("{:.2}", r.failing_calls as f64 / b as f64)
            }),
            format!("{} / {}", r.opened, r.weirs),
            secs(r.open_median_s),
            secs(r.open_max_s),
        ]);
    }
    let n = rows.first().map(|r| r.weirs).unwrap_or(0);
    Section {
        key: "team".into(),
        title: format!("team: {n} Weirs, one upstream breaks ({seconds} s)"),
        intro: format!(
            "{n} Weir engines (in one process, each with its own data dir) manage one upstream that \
             answers `500` to everything from second 0. Each developer's tools poll `GET /agents/sessions` \
             through their own Weir: {BUSY} busy laptops every 250 ms, the others every 1 s to 4 s (caching \
             off, so every poll is a call). Weir's shipped breaker settings (5 failures in a row, or 50 % \
             over at least 20 calls in 30 s; cautious: 3 in a row; open 5 s, doubling). With team signals the Weirs share a real `nats-server` \
             (K = 2 teammates, T = 60 s). Failing calls are the upstream's own count; time to open is \
             from the outage's start to each Weir's first breaker opening (with `cautious`, the opening \
             after its first failing call)."
        ),
        table,
        series: rows
            .iter()
            .map(|r| Series {
                label: r.signals.label().to_string(),
                per_second: r.per_second.clone(),
            })
            .collect(),
        notes: vec![
            "Without signals every Weir pays its own failing calls to open, then its own probes; \
             with them the first two Weirs that see the upstream failing (degraded) move the rest, \
             and teammates' fresh failures stand in for most half-open probes afterwards."
                .into(),
        ],
    }
}
