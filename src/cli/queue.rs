//! `weir queue ls|show|cancel|retry`: talks to the running instance's control API through
//! [`super::control_call`] (the control secret, after checking the Weir there is this
//! install's).

use super::args::QueueCmd;
use super::ServeArgs;
use http::Method;
use std::process::ExitCode;

pub fn run(cmd: QueueCmd, json: bool, args: ServeArgs) -> ExitCode {
    let (method, path) = match &cmd {
        QueueCmd::Ls => (Method::GET, "/_weir/api/queue".to_string()),
        QueueCmd::Show { id } => (Method::GET, format!("/_weir/api/queue/{id}")),
        QueueCmd::Cancel { id } => (Method::POST, format!("/_weir/api/queue/{id}/cancel")),
        QueueCmd::Retry { id } => (Method::POST, format!("/_weir/api/queue/{id}/retry")),
    };
    let v = match super::control_call::run(&args, method, &path, None) {
        Ok(v) => v,
        Err(code) => return code,
    };
    match cmd {
        QueueCmd::Ls if !json => print_table(&v),
        _ => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
    }
    ExitCode::SUCCESS
}

fn print_table(v: &serde_json::Value) {
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        println!("no queued creates");
        return;
    }
    println!(
        "{:>5}  {:<10}  {:<12}  {:>8}  PATH",
        "ID", "STATE", "UPSTREAM", "ATTEMPTS"
    );
    for i in items {
        println!(
            "{:>5}  {:<10}  {:<12}  {:>8}  {}",
            i["id"],
            i["state"].as_str().unwrap_or(""),
            i["upstream"].as_str().unwrap_or(""),
            i["attempts"],
            i["path"].as_str().unwrap_or("")
        );
    }
}
