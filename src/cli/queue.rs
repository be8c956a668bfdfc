//! `weir queue ls|show|cancel|retry`: talks to the running instance's control API. Every call
//! sends the control secret, read from the keychain (or `WEIR_CONTROL_SECRET`), after checking
//! that the Weir there is this install's ([`super::install_check`]).

use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use http::{Method, Request};
use std::process::ExitCode;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};
use weir::secrets::{Account, Namespace};

#[derive(clap::Subcommand)]
pub enum QueueCmd {
    /// List queued creates.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Show one item.
    Show { id: i64 },
    /// Cancel an item (its credential is deleted).
    Cancel { id: i64 },
    /// Queue a failed, expired or cancelled item again.
    Retry { id: i64 },
}

pub fn run(cmd: QueueCmd, args: ServeArgs) -> ExitCode {
    let (settings, data_dir) = match load(&args) {
        Ok(l) => (l.settings, l.data_dir),
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let base = format!(
        "http://{}",
        weir::config::host_for(settings.listen.ip(), settings.listen.port())
    );
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    rt.block_on(async move {
        let (method, path, secret) = match &cmd {
            QueueCmd::Ls { .. } => (
                Method::GET,
                "/_weir/api/queue".to_string(),
                Some(secret(&data_dir).await),
            ),
            QueueCmd::Show { id } => (
                Method::GET,
                format!("/_weir/api/queue/{id}"),
                Some(secret(&data_dir).await),
            ),
            QueueCmd::Cancel { id } => (
                Method::POST,
                format!("/_weir/api/queue/{id}/cancel"),
                Some(secret(&data_dir).await),
            ),
            QueueCmd::Retry { id } => (
                Method::POST,
                format!("/_weir/api/queue/{id}/retry"),
                Some(secret(&data_dir).await),
            ),
        };
        if let Err(e) = super::install_check::verify(&base, &data_dir).await {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
        let mut req = Request::new(weir::http_client::empty());
        *req.method_mut() = method;
        *req.uri_mut() = match format!("{base}{path}").parse() {
            Ok(u) => u,
            Err(e) => {
                eprintln!("weir: bad address {base}: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        if let Some(Some(s)) = secret {
            if let Ok(v) = s.parse() {
                req.headers_mut().insert("x-weir-secret", v);
            }
        }
        let t = Timeouts {
            headers: Duration::from_secs(10),
            body: Duration::from_secs(10),
        };
        let resp = match UpstreamClient::new().fetch(req, t, 16 << 20).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "weir: cannot reach Weir at {base} ({e}). Is `weir serve` or the tray running?"
                );
                return ExitCode::FAILURE;
            }
        };
        let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
        if !resp.status().is_success() {
            eprintln!(
                "weir: {} — {}",
                v["title"].as_str().unwrap_or("error"),
                v["detail"].as_str().unwrap_or("")
            );
            return ExitCode::FAILURE;
        }
        match cmd {
            QueueCmd::Ls { json: false } => print_table(&v),
            _ => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
        }
        ExitCode::SUCCESS
    })
}

/// The control secret: `WEIR_CONTROL_SECRET`, else the keychain entry of this data dir's install.
pub(super) async fn secret(data_dir: &std::path::Path) -> Option<String> {
    if let Ok(s) = std::env::var("WEIR_CONTROL_SECRET") {
        return Some(s);
    }
    let keychain = Namespace::for_data_dir(data_dir).keychain();
    let got =
        tokio::task::spawn_blocking(move || keychain.get(Account::ControlSecret.as_str())).await;
    match got {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            eprintln!(
                "weir: cannot read the control secret from the keychain: {e}. {}",
                e.fix()
            );
            None
        }
        Err(_) => None,
    }
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
