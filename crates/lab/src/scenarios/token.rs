//! Aug 17: a fleet refreshing Copilot tokens (`GET /copilot_internal/v2/token`) against a token
//! endpoint that turned slow, with a client bug that reissues on a short timeout without
//! cancelling. Times are scaled down from real ones (a 25-minute `refresh_in` becomes a third
//! of the row) so a row holds several refresh rounds.

use super::LabConfig;
use crate::fleet::{FleetSpec, Schedule};
use crate::policy::Policy;
use crate::report::{num, percent, times, Section, Series, Table};
use crate::timeline::mean_rate;
use crate::upstream::{Upstream, UpstreamSpec};
use crate::weir_ctl::{Caching, LabWeir};
use crate::worker::run_fleet;
use crate::LabError;
use serde::Serialize;

/// Windows (token refreshers) per developer: each VS Code window refreshes on its own.
const WINDOWS: usize = 2;

/// The scaled times of one run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TokenTimes {
    pub refresh_in_s: u64,
    pub healthy_ms: u64,
    pub slow_ms: u64,
    pub client_timeout_ms: u64,
    /// Weir's `classes.token.token_margin`.
    pub margin_ms: u64,
}

impl TokenTimes {
    pub fn for_seconds(seconds: u64) -> TokenTimes {
        let refresh_in_s = (seconds / 3).max(2);
        let slow_ms = refresh_in_s * 300;
        let client_timeout_ms = slow_ms / 10;
        TokenTimes {
            refresh_in_s,
            healthy_ms: client_timeout_ms / 3,
            slow_ms,
            client_timeout_ms,
            margin_ms: refresh_in_s * 200,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenRow {
    pub name: String,
    pub upstream_rps: f64,
    pub amplification: f64,
    pub success: f64,
    pub client_attempts: u64,
    pub per_second: Vec<u64>,
}

/// Breaker settings that make the lab's one Weir behave like per-developer Weirs: each of
/// those sees one developer's few token calls and never reaches the 20-call minimum.
pub const PER_DEVELOPER_BREAKER: &str = "[breaker]\nminimum_calls = 1000000\n";

async fn run_row(
    cfg: &LabConfig,
    name: &str,
    t: TokenTimes,
    slow: bool,
    weir: Option<&str>,
) -> Result<TokenRow, LabError> {
    let latency = if slow { t.slow_ms } else { t.healthy_ms };
    let spec = UpstreamSpec {
        token_refresh_in_s: t.refresh_in_s,
        token_expires_in_s: t.refresh_in_s * 3,
        ..UpstreamSpec::with_latency(latency)
    };
    let up = Upstream::start(spec).await?;
    let lab_weir = match weir {
        Some(more) => {
            let extra = format!(
                "[classes.token]\ntoken_margin = \"{}ms\"\n{more}",
                t.margin_ms
            );
            Some(LabWeir::start(&up.origin(), Caching::Default, &extra).await?)
        }
        None => None,
    };
    let url = format!("{}/copilot_internal/v2/token", up.origin());
    let mut fleet = FleetSpec::new(
        cfg.clients,
        cfg.seconds,
        url,
        Policy::Reissue {
            timeout_ms: t.client_timeout_ms,
        },
    );
    fleet.pollers = WINDOWS;
    fleet.schedule = Schedule::TokenRefreshIn;
    fleet.period_ms = t.refresh_in_s * 1000;
    fleet.give_up_ms = t.slow_ms * 3;
    fleet.token_prefix = "gho_lab".into();
    fleet.proxy = lab_weir.as_ref().map(|w| w.addr());
    fleet.seed = cfg.seed;
    let counters = up.counters().clone();
    let report = run_fleet(&cfg.placement, &fleet, move || counters.requests.restart()).await?;
    let seconds = cfg.seconds as usize;
    let per_second = up.counters().requests.per_second(seconds);
    // Leave out the first slow answer's worth of ramp-up.
    let from = (t.slow_ms.div_ceil(1000) as usize).min(seconds.saturating_sub(1));
    if let Some(w) = lab_weir {
        w.stop().await;
    }
    up.stop();
    Ok(TokenRow {
        name: name.to_string(),
        upstream_rps: mean_rate(&per_second, from, seconds),
        amplification: 0.0,
        success: if report.logical == 0 {
            0.0
        } else {
            report.succeeded as f64 / report.logical as f64
        },
        client_attempts: report.attempts,
        per_second,
    })
}

pub async fn run(cfg: &LabConfig) -> Result<Section, LabError> {
    let t = TokenTimes::for_seconds(cfg.seconds);
    let mut rows = Vec::new();
    for (name, slow, weir) in [
        ("healthy token endpoint", false, None),
        ("slow endpoint + reissue bug", true, None),
        (
            "slow endpoint + reissue bug, through Weir (breaker per developer)",
            true,
            Some(PER_DEVELOPER_BREAKER),
        ),
        (
            "slow endpoint + reissue bug, through one shared Weir (shipped breaker)",
            true,
            Some(""),
        ),
    ] {
        eprintln!(
            "aug17-token: {name} ({} developers × {WINDOWS} windows × {} s)",
            cfg.clients, cfg.seconds
        );
        rows.push(run_row(cfg, name, t, slow, weir).await?);
    }
    let healthy = rows[0].upstream_rps;
    for r in &mut rows {
        r.amplification = if healthy > 0.0 {
            r.upstream_rps / healthy
        } else {
            0.0
        };
    }
    Ok(section(cfg, t, &rows))
}

pub fn section(cfg: &LabConfig, t: TokenTimes, rows: &[TokenRow]) -> Section {
    let mut table = Table::new(&[
        "scenario",
        "upstream req/s",
        "amplification",
        "success",
        "client attempts",
    ]);
    for r in rows {
        table.push(vec![
            r.name.clone(),
            num(r.upstream_rps),
            times(r.amplification),
            percent(r.success),
            r.client_attempts.to_string(),
        ]);
    }
    Section {
        key: "aug17-token".into(),
        title: format!("aug17-token: {} developers × {WINDOWS} windows × {} s", cfg.clients, cfg.seconds),
        intro: format!(
            "Each developer has its own GitHub token and {WINDOWS} VS Code windows; each window refreshes its \
             Copilot token `refresh_in` = {} s after its previous refresh (scaled from 25 minutes). The \
             token endpoint answers in {} ms when healthy and {} ms when slow; clients time out after {} ms \
             and reissue without cancelling. Through Weir, tokens are coalesced and cached until \
             `refresh_in` minus `token_margin` = {} ms. Upstream req/s leaves out the first slow answer's ramp-up.",
            t.refresh_in_s, t.healthy_ms, t.slow_ms, t.client_timeout_ms, t.margin_ms
        ),
        table,
        series: rows.iter().map(|r| Series { label: r.name.clone(), per_second: r.per_second.clone() }).collect(),
        notes: vec![
            "One lab Weir serves every developer. A real Weir runs per developer and sees only that developer's few token calls, so its breaker never reaches its 20-call minimum: the \"breaker per developer\" row sets `breaker.minimum_calls` out of reach to behave the same way. The last row keeps the shipped breaker on the shared Weir: when the slow endpoint answers no faster than the token class's 3 s `slow_call` (the 30 s rows: 3,000 ms) it opens, and developers with no cached token get 503 problems until it closes — the upstream is protected, at the cost of those refreshes.".into(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_times_keep_their_ratios() {
        let t = TokenTimes::for_seconds(30);
        assert_eq!(
            (
                t.refresh_in_s,
                t.slow_ms,
                t.client_timeout_ms,
                t.healthy_ms,
                t.margin_ms
            ),
            (10, 3000, 300, 100, 2000)
        );
        let t = TokenTimes::for_seconds(5);
        assert_eq!(t.refresh_in_s, 2);
        assert!(t.healthy_ms < t.client_timeout_ms && t.client_timeout_ms * 10 == t.slow_ms);
    }
}
