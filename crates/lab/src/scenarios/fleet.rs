//! The published fleet experiment: N clients, one logical request every 500 ms each, a 50 ms
//! client timeout that reissues without cancelling, an endpoint that answers in 500 ms. Each
//! row is one client variant (or the buggy clients through Weir); amplification is the
//! upstream's own requests per second divided by the healthy row's.

use super::LabConfig;
use crate::fleet::{FleetReport, FleetSpec};
use crate::policy::Policy;
use crate::report::{ms, num, percent, times, Section, Series, Table};
use crate::timeline::mean_rate;
use crate::upstream::{Upstream, UpstreamSpec};
use crate::weir_ctl::{Caching, LabWeir};
use crate::worker::run_fleet;
use crate::LabError;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// One row of the experiment.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub name: &'static str,
    /// How long the endpoint takes to answer.
    pub latency_ms: u64,
    pub policy: Policy,
    /// `Some` sends the fleet through Weir with this caching.
    pub weir: Option<Caching>,
    /// Extra Weir configuration for this row.
    pub weir_extra: &'static str,
    /// The upstream fails over half-way; only the second half is measured.
    pub failover: bool,
    /// The published amplification, if this row was published.
    pub published: Option<f64>,
}

const BUGGY: Policy = Policy::Reissue { timeout_ms: 50 };

/// The rows, healthy first (every other row is divided by it).
pub fn variants() -> Vec<Variant> {
    let v = |name, latency_ms, policy, weir, failover, published| Variant {
        name,
        latency_ms,
        policy,
        weir,
        weir_extra: "",
        failover,
        published,
    };
    vec![
        // Healthy: the same buggy clients, but the endpoint answers well within their 50 ms.
        v("healthy", 5, BUGGY, None, false, Some(1.0)),
        v("buggy clients", 500, BUGGY, None, false, Some(10.0)),
        v(
            "buggy clients after failover",
            500,
            BUGGY,
            None,
            true,
            Some(10.0),
        ),
        v(
            "sane timeout (1 s)",
            500,
            Policy::Reissue { timeout_ms: 1000 },
            None,
            false,
            Some(1.0),
        ),
        v(
            "backoff + jitter",
            500,
            Policy::Backoff {
                timeout_ms: 50,
                jitter: 0.25,
            },
            None,
            false,
            Some(4.0),
        ),
        v(
            "retry budget",
            500,
            Policy::Budget {
                timeout_ms: 50,
                ratio: 0.1,
                max_tokens: 10.0,
            },
            None,
            false,
            Some(1.0),
        ),
        // Caching off: the only saving left is coalescing a client's own reissues.
        v(
            "buggy clients through Weir (caching off)",
            500,
            BUGGY,
            Some(Caching::Off),
            false,
            None,
        ),
        v(
            "buggy clients through Weir (default caching)",
            500,
            BUGGY,
            Some(Caching::Default),
            false,
            None,
        ),
    ]
}

/// What one row measured.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRow {
    pub name: String,
    /// Upstream requests per second over the measured window, by the upstream's own count.
    pub upstream_rps: f64,
    pub amplification: f64,
    pub published: Option<f64>,
    /// Logical requests answered 2xx ÷ logical requests.
    pub success: f64,
    pub clients: FleetReport,
    /// Upstream requests Weir says it made (a cross-check), for the rows through Weir.
    pub weir_upstream_requests: Option<u64>,
    /// Every request the upstream saw during the row (all seconds, the tail included).
    pub upstream_total: u64,
    pub per_second: Vec<u64>,
}

impl FleetRow {
    /// Every upstream request of the row over every logical request: unlike req/s, this does
    /// not change when a saturated machine stretches the clients' period.
    pub fn upstream_per_logical(&self) -> f64 {
        if self.clients.logical == 0 {
            0.0
        } else {
            self.upstream_total as f64 / self.clients.logical as f64
        }
    }
}

/// Runs one variant.
pub async fn run_variant(cfg: &LabConfig, v: &Variant) -> Result<FleetRow, LabError> {
    let up = Arc::new(Upstream::start(UpstreamSpec::with_latency(v.latency_ms)).await?);
    let weir = match v.weir {
        Some(c) => Some(LabWeir::start(&up.origin(), c, v.weir_extra).await?),
        None => None,
    };
    let mut spec = FleetSpec::new(
        cfg.clients,
        cfg.seconds,
        format!("{}/agents/sessions", up.origin()),
        v.policy,
    );
    spec.proxy = weir.as_ref().map(|w| w.addr());
    spec.seed = cfg.seed;

    let (started_tx, started_rx) = oneshot::channel::<()>();
    let failover_at = Duration::from_millis(cfg.seconds * 500);
    let failover = v.failover.then(|| {
        let up = up.clone();
        tokio::spawn(async move {
            if started_rx.await.is_ok() {
                tokio::time::sleep(failover_at).await;
                up.fail_over();
            }
        })
    });
    let counters = up.counters().clone();
    let report = run_fleet(&cfg.placement, &spec, move || {
        counters.requests.restart();
        let _ = started_tx.send(());
    })
    .await?;
    if let Some(f) = failover {
        f.abort();
    }
    let seconds = cfg.seconds as usize;
    let per_second = up.counters().requests.per_second(seconds);
    // Second 0 is the ramp-up (clients start at random phases); after a failover, measure from
    // the first whole second on the standby.
    let from = if v.failover {
        seconds.div_ceil(2)
    } else {
        warmup(seconds)
    };
    let mut weir_upstream_requests = None;
    if let Some(w) = weir {
        weir_upstream_requests = Some(w.upstream_requests().await);
        w.stop().await;
    }
    let upstream_total = up.counters().requests.total();
    up.stop();
    Ok(FleetRow {
        name: v.name.to_string(),
        upstream_rps: mean_rate(&per_second, from, seconds),
        amplification: 0.0,
        published: v.published,
        success: if report.logical == 0 {
            0.0
        } else {
            report.succeeded as f64 / report.logical as f64
        },
        clients: report,
        weir_upstream_requests,
        upstream_total,
        per_second,
    })
}

/// Seconds left out at the start of a row: 1 when the row is long enough to spare it.
pub fn warmup(seconds: usize) -> usize {
    usize::from(seconds >= 3)
}

/// Runs every variant and fills in amplification against the first (healthy) row.
pub async fn run_rows(cfg: &LabConfig, variants: &[Variant]) -> Result<Vec<FleetRow>, LabError> {
    let mut rows = Vec::new();
    for v in variants {
        eprintln!(
            "fleet: {} ({} clients × {} s)",
            v.name, cfg.clients, cfg.seconds
        );
        rows.push(run_variant(cfg, v).await?);
    }
    let healthy = rows.first().map(|r| r.upstream_rps).unwrap_or(0.0);
    for r in &mut rows {
        r.amplification = if healthy > 0.0 {
            r.upstream_rps / healthy
        } else {
            0.0
        };
    }
    Ok(rows)
}

pub async fn run(cfg: &LabConfig) -> Result<Section, LabError> {
    let rows = run_rows(cfg, &variants()).await?;
    Ok(section(cfg, &rows))
}

pub fn section(cfg: &LabConfig, rows: &[FleetRow]) -> Section {
    let mut table = Table::new(&[
        "scenario",
        "upstream req/s",
        "amplification",
        "published",
        "upstream requests per logical request",
        "success",
        "client p50",
        "client p99",
        "client attempts",
        "Weir → upstream",
    ]);
    for r in rows {
        table.push(vec![
            r.name.clone(),
            num(r.upstream_rps),
            times(r.amplification),
            r.published
                .map(|p| format!("{p:.1}×"))
                .unwrap_or_else(|| "—".into()),
            format!("{:.2}", r.upstream_per_logical()),
            percent(r.success),
            ms(r.clients.latency.p50_ms),
            ms(r.clients.latency.p99_ms),
            r.clients.attempts.to_string(),
            r.weir_upstream_requests
                .map(|n| n.to_string())
                .unwrap_or_else(|| "—".into()),
        ]);
    }
    Section {
        key: "fleet".into(),
        title: format!("fleet: {} clients × {} s", cfg.clients, cfg.seconds),
        intro: format!(
            "{} clients, one logical `GET /agents/sessions` every 500 ms each, each with its own token. \
             Buggy clients time out after 50 ms and reissue without cancelling (the old request stays \
             open); the endpoint answers in 500 ms (5 ms in the healthy row). Upstream req/s is the \
             upstream's own count from second 1 on (second 0 is the ramp-up; the second half for the failover row); amplification \
             divides it by the healthy row's.",
            cfg.clients
        ),
        table,
        series: rows.iter().map(|r| Series { label: r.name.clone(), per_second: r.per_second.clone() }).collect(),
        notes: vec![
            "backoff + jitter: reissue after 50 ms, then gaps of 100, 200, 400 ms … each stretched by up to +25 %; four attempts fit in 500 ms.".into(),
            "retry budget: each client earns 0.1 retry per call answered within its timeout (at most 10 held); a 50 ms timeout against a 500 ms endpoint never earns one.".into(),
            "through Weir: one lab Weir stands in for every client's own Weir, so its per-Weir limits are raised to fit the fleet (30,000 connections; bulkhead 4,096 in flight + 4,096 queued); every per-client default (cache, coalescing, rate limit) is as shipped except where the row says caching off.".into(),
            "failover: at half-time the upstream drops every open connection and the same address keeps serving, as a virtual IP moving to a standby.".into(),
        ],
    }
}
