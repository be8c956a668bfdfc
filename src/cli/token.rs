//! `weir token set|status|forget`: the GitHub token the sessions companion polls with, kept in
//! this install's keychain entry (the one the dashboard's token panel writes). The token is
//! read from standard input or a hidden prompt, never from the command line (argv is visible
//! to every process and lands in shell history), and it is never printed.
//!
//! After a change the running Weir of this install (if any) is told to re-read the keychain
//! (`POST /_weir/api/token/reload`, with the control secret, after the install check).

use super::args::TokenCmd;
use super::serve::load_with_base;
use super::{ServeArgs, EXIT_CONFIG};
use http::{Method, Request};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};
use weir::secrets::Account;

/// The longest token accepted (GitHub's are well under 300 characters).
const MAX_TOKEN: usize = 1024;

pub fn run(cmd: TokenCmd, args: ServeArgs) -> ExitCode {
    let (settings, data_dir, base) = match load_with_base(&args) {
        Ok((l, base)) => (l.settings, l.data_dir, base),
        Err(code) => return code,
    };
    let keychain = match weir::secrets::store_for(&data_dir, settings.secrets_store) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let account = Account::GithubToken.as_str();
    let place = weir::secrets::stored_where(&keychain);
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    match cmd {
        TokenCmd::Set => {
            let token = match read_token() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            if let Err(e) = keychain.set(account, &token) {
                eprintln!("weir: cannot store the token in {place}: {e}. {}", e.fix());
                return ExitCode::FAILURE;
            }
            println!("A GitHub token ({}) is stored in {place}.", kind(&token));
            rt.block_on(tell_running(&base, &data_dir));
            ExitCode::SUCCESS
        }
        TokenCmd::Forget => {
            if let Err(e) = keychain.delete(account) {
                eprintln!(
                    "weir: cannot delete the token from {place}: {e}. {}",
                    e.fix()
                );
                return ExitCode::FAILURE;
            }
            println!("No GitHub token is stored now (in {place}).");
            rt.block_on(tell_running(&base, &data_dir));
            ExitCode::SUCCESS
        }
        TokenCmd::Status => {
            match keychain.get(account) {
                Ok(Some(t)) => {
                    println!("A GitHub token ({}) is stored in {place}.", kind(t.trim()))
                }
                Ok(None) => println!(
                    "No GitHub token is stored (in {place}). Store one with `weir token set`."
                ),
                Err(e) => {
                    eprintln!("weir: cannot read {place}: {e}. {}", e.fix());
                    return ExitCode::FAILURE;
                }
            }
            rt.block_on(print_poller(&base));
            ExitCode::SUCCESS
        }
    }
}

/// The token from standard input when it is piped, else from a hidden prompt.
fn read_token() -> Result<String, String> {
    let raw = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("GitHub token (input hidden): ")
            .map_err(|e| format!("cannot read the token from the terminal: {e}"))?
    } else {
        let mut s = String::new();
        std::io::stdin()
            .take(MAX_TOKEN as u64 + 2)
            .read_to_string(&mut s)
            .map_err(|e| format!("cannot read the token from standard input: {e}"))?;
        s
    };
    let token = raw.trim();
    if token.is_empty() {
        return Err("no token given: pipe it in (`gh auth token | weir token set`) or type it at the prompt".into());
    }
    if token.len() > MAX_TOKEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "that is not a GitHub token (one line, no spaces, at most {MAX_TOKEN} characters)"
        ));
    }
    Ok(token.to_string())
}

/// What kind of token it is, from its documented prefix (the prefix is not secret).
fn kind(token: &str) -> &'static str {
    match token.split('_').next().unwrap_or("") {
        "gho" => "OAuth app token, gho_",
        "ghu" => "GitHub App user token, ghu_",
        "ghp" => "classic personal access token, ghp_",
        "github" if token.starts_with("github_pat_") => "fine-grained personal access token",
        _ => "token of another kind",
    }
}

/// Asks this install's running Weir to re-read the keychain. Not running is fine: it reads the
/// token when it starts.
async fn tell_running(base: &str, data_dir: &std::path::Path) {
    let secret = match super::install_check::verify(base, data_dir).await {
        // No control secret to send (never started, or a keychain that did not answer): if
        // nothing answers at the address, nothing runs to tell (a refused connection is not a
        // Weir to restart); if something does, it is asked without a secret, and says so.
        Ok(None) => {
            if call(base, Method::GET, "/_weir/api/health", None)
                .await
                .is_err()
            {
                println!("Weir is not running at {base}; it reads the token when it starts.");
                return;
            }
            None
        }
        Ok(s) => s,
        Err(e) => {
            println!("No running Weir was told ({e}); Weir reads the token when it starts.");
            return;
        }
    };
    match call(
        base,
        Method::POST,
        "/_weir/api/token/reload",
        secret.as_deref(),
    )
    .await
    {
        Ok(_) => println!("The running Weir at {base} picked the change up."),
        Err(e) => println!(
            "The running Weir at {base} was not told ({e}); restart it to pick the change up."
        ),
    }
}

/// Prints what the running Weir's sessions poller does (public status, no secret needed).
async fn print_poller(base: &str) {
    let Ok(v) = call(base, Method::GET, "/_weir/api/status", None).await else {
        println!("Weir is not running at {base}.");
        return;
    };
    let s = &v["sessions"];
    let poller = s["poller"].as_str().unwrap_or("unknown");
    let reason = s["reason"]
        .as_str()
        .map(|r| format!(" ({})", r.replace('_', " ")))
        .unwrap_or_default();
    println!(
        "Sessions poller at {base}: {}{reason}",
        poller.replace('_', " ")
    );
    if poller != "off" {
        println!("Sessions: {}", s["summary"].as_str().unwrap_or(""));
    }
}

async fn call(
    base: &str,
    method: Method,
    path: &str,
    secret: Option<&str>,
) -> Result<serde_json::Value, String> {
    let mut req = Request::new(weir::http_client::empty());
    *req.method_mut() = method;
    *req.uri_mut() = format!("{base}{path}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    if let Some(v) = secret.and_then(|s| s.parse().ok()) {
        req.headers_mut().insert("x-weir-secret", v);
    }
    let t = Timeouts {
        headers: Duration::from_secs(10),
        body: Duration::from_secs(10),
    };
    let resp = UpstreamClient::new()
        .fetch(req, t, 1 << 20)
        .await
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
    if resp.status().is_success() {
        Ok(v)
    } else {
        Err(format!(
            "{} {}",
            resp.status(),
            v["detail"].as_str().unwrap_or_default()
        ))
    }
}
