//! `weir doctor`: prints [`weir::client_setup::run_checks`], one ✓/✗ line per check with the
//! fix under every ✗; exit code 1 if anything failed.

use super::context::{load, CommonArgs};
use std::process::ExitCode;
use weir::client_setup::{run_checks, Outcome};

#[derive(clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    common: CommonArgs,
}

pub fn run(args: DoctorArgs) -> ExitCode {
    let install = match load(&args.common) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let checks = run_checks(&install);
    for c in &checks {
        match &c.outcome {
            Outcome::Ok => println!("✓ {}", c.what),
            Outcome::Info => println!("- {}", c.what),
            Outcome::Failed { fix } => println!("✗ {}\n    fix: {fix}", c.what),
        }
    }
    let failed = checks.iter().filter(|c| c.failed()).count();
    if failed == 0 {
        println!("weir doctor: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("weir doctor: {failed} check(s) failed");
        ExitCode::FAILURE
    }
}
