//! `weir handoff ls|show|confirm|decline`: the running instance's local-agent offers (#14)
//! through its control API ([`super::control_call`]: the control secret, after checking the
//! Weir there is this install's). For a headless `weir serve` without tray or browser.

use super::args::HandoffCmd;
use super::ServeArgs;
use http::Method;
use std::process::ExitCode;

pub fn run(cmd: HandoffCmd, json: bool, args: ServeArgs) -> ExitCode {
    let (method, path) = match &cmd {
        HandoffCmd::Ls => (Method::GET, "/_weir/api/handoffs".to_string()),
        HandoffCmd::Show { id } => (Method::GET, format!("/_weir/api/handoffs/{id}")),
        HandoffCmd::Confirm { id } => (Method::POST, format!("/_weir/api/handoffs/{id}/confirm")),
        HandoffCmd::Decline { id } => (Method::POST, format!("/_weir/api/handoffs/{id}/decline")),
    };
    let v = match super::control_call::run(&args, method, &path, None) {
        Ok(v) => v,
        Err(code) => return code,
    };
    match cmd {
        HandoffCmd::Ls if !json => print_table(&v),
        _ => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
    }
    ExitCode::SUCCESS
}

fn print_table(v: &serde_json::Value) {
    let offers = v["offers"].as_array().cloned().unwrap_or_default();
    if offers.is_empty() {
        let why = if v["configured"] == true {
            "no offers"
        } else {
            "no offers (no [local_agent] in the config)"
        };
        println!("{why}");
        return;
    }
    println!("{:>5}  {:<10}  {:<24}  TASK", "ID", "STATE", "REPOSITORY");
    for o in offers {
        let task: String = o["problem_statement"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        println!(
            "{:>5}  {:<10}  {:<24}  {}",
            o["id"],
            o["state"].as_str().unwrap_or(""),
            o["repo"].as_str().unwrap_or(""),
            task.replace('\n', " ")
        );
    }
}
