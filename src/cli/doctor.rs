//! `weir doctor`: prints [`weir::client_setup::run_checks`], one ✓/✗ line per check with the
//! fix under every ✗ (`--json`: the same as one object); exit code 1 if anything failed.

use super::args::GlobalArgs;
use super::context::load;
use std::process::ExitCode;
use weir::client_setup::{run_checks, Check, Outcome};

pub fn run(json: bool, global: &GlobalArgs) -> ExitCode {
    let install = match load(global) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let checks = run_checks(&install);
    let failed = checks.iter().filter(|c| c.failed()).count();
    if json {
        println!("{:#}", as_json(&checks, failed));
        return if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    for c in &checks {
        match &c.outcome {
            Outcome::Ok => println!("✓ {}", c.what),
            Outcome::Info => println!("- {}", c.what),
            Outcome::Failed { fix } => println!("✗ {}\n    fix: {fix}", c.what),
        }
    }
    if failed == 0 {
        println!("weir doctor: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("weir doctor: {failed} check(s) failed");
        ExitCode::FAILURE
    }
}

/// `{"checks": [{"what", "outcome": "ok"|"info"|"failed", "fix"?}], "failed": N}`.
fn as_json(checks: &[Check], failed: usize) -> serde_json::Value {
    let checks: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| match &c.outcome {
            Outcome::Ok => serde_json::json!({"what": c.what, "outcome": "ok"}),
            Outcome::Info => serde_json::json!({"what": c.what, "outcome": "info"}),
            Outcome::Failed { fix } => {
                serde_json::json!({"what": c.what, "outcome": "failed", "fix": fix})
            }
        })
        .collect();
    serde_json::json!({"checks": checks, "failed": failed})
}
