//! Running a fleet in a child process (`weir-lab fleet-worker`). A 1,000-client buggy fleet
//! keeps ~10,000 sockets open on its side and the upstream as many on its side; the hard
//! open-files limit here is 20,000 per process, so the two must not share one.
//!
//! Protocol: the parent writes the [`FleetSpec`] as one JSON line on the child's stdin; the
//! child prints `started` when its clients start, then the [`FleetReport`] as one JSON line.

use crate::fleet::{self, FleetReport, FleetSpec};
use crate::LabError;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Where a fleet runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In this process (tests and small runs).
    InProcess,
    /// In a child process running this executable with `fleet-worker`.
    Child(std::path::PathBuf),
}

/// Runs `spec` where `placement` says; `on_start` runs when the clients start.
pub async fn run_fleet(
    placement: &Placement,
    spec: &FleetSpec,
    on_start: impl FnOnce(),
) -> Result<FleetReport, LabError> {
    match placement {
        Placement::InProcess => Ok(fleet::run(spec, on_start).await),
        Placement::Child(exe) => run_child(exe, spec, on_start).await,
    }
}

async fn run_child(
    exe: &Path,
    spec: &FleetSpec,
    on_start: impl FnOnce(),
) -> Result<FleetReport, LabError> {
    let mut child = Command::new(exe)
        .arg("fleet-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| LabError::Worker(format!("cannot start {}: {e}", exe.display())))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| LabError::Worker("no stdin".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| LabError::Worker("no stdout".into()))?;
    let mut line = serde_json::to_string(spec)?;
    line.push('\n');
    stdin.write_all(line.as_bytes()).await?;
    drop(stdin);

    // Bounded: the run, the give-up time of the last requests, and room to start and report.
    let limit = Duration::from_secs(spec.seconds)
        + Duration::from_millis(spec.give_up_ms)
        + Duration::from_secs(60);
    let mut lines = BufReader::new(stdout).lines();
    let mut on_start = Some(on_start);
    let read = async {
        while let Some(l) = lines.next_line().await? {
            if l.trim() == "started" {
                if let Some(f) = on_start.take() {
                    f();
                }
            } else if l.starts_with('{') {
                return Ok::<_, LabError>(Some(serde_json::from_str::<FleetReport>(&l)?));
            }
        }
        Ok(None)
    };
    let report = match tokio::time::timeout(limit, read).await {
        Ok(r) => r?,
        Err(_) => {
            child.kill().await?;
            return Err(LabError::Worker(format!("no report within {limit:?}")));
        }
    };
    let status = child.wait().await?;
    report.ok_or_else(|| LabError::Worker(format!("exited ({status}) without a report")))
}

/// The child side: reads a spec from stdin, runs it, prints the report.
pub async fn child_main() -> Result<(), LabError> {
    let mut line = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await?;
    let spec: FleetSpec = serde_json::from_str(&line)?;
    let report = fleet::run(&spec, || println!("started")).await;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
