//! Runs the chosen scenarios in order and writes the report.

use crate::report::{self, Section};
use crate::scenarios::{agents429, cold, devhour, fleet, oct29, team, token, LabConfig, Scenario};
use crate::LabError;
use std::path::Path;

/// Runs `scenarios` and returns their sections.
pub async fn run(cfg: &LabConfig, scenarios: &[Scenario]) -> Result<Vec<Section>, LabError> {
    let mut sections = Vec::new();
    for s in scenarios {
        eprintln!("== {s:?}");
        if *s == Scenario::Devhour {
            sections.extend(devhour::run(cfg).await?);
            continue;
        }
        sections.push(match s {
            Scenario::Fleet => fleet::run(cfg).await?,
            Scenario::Oct29 => oct29::run(cfg).await?,
            Scenario::Aug17Token => token::run(cfg).await?,
            Scenario::Agents429 => agents429::run(cfg).await?,
            Scenario::Cold => cold::run().await?,
            Scenario::Team => team::run(cfg).await?,
            Scenario::Devhour => unreachable!("handled above"),
        });
    }
    Ok(sections)
}

/// Runs `scenarios` and writes `RESULTS.md`, `results.json` and the charts into `out`.
pub async fn run_and_write(
    cfg: &LabConfig,
    scenarios: &[Scenario],
    out: &Path,
) -> Result<Vec<Section>, LabError> {
    let sections = run(cfg, scenarios).await?;
    report::write_all(out, &sections, &machine(cfg))?;
    Ok(sections)
}

/// The run's parameters and the machine it ran on.
pub fn machine(cfg: &LabConfig) -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!(
        "Run: `weir-lab run --clients {} --seconds {}` (fleets {}), seed {}. Machine: {cpus} CPUs ({cpu}), Linux {kernel}. \
         Everything on loopback; one row at a time.",
        cfg.clients,
        cfg.seconds,
        match cfg.placement {
            crate::worker::Placement::InProcess => "in process",
            crate::worker::Placement::Child(_) => "in a child process",
        },
        cfg.seed
    )
}
