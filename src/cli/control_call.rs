//! One authenticated call to the running instance's control API, shared by `weir queue`,
//! `cache`, `handoff` and `network` ([`run`]): checks that the Weir at the configured address
//! is this install's and proves it holds the control secret ([`super::install_check`]), then
//! sends the secret (`WEIR_CONTROL_SECRET`, else the keychain entry of this data dir's install).

use http::{Method, Request};
use std::path::Path;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};

/// Why a control call gave no answer; `Display` is the message for the user.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    NotThisInstall(#[from] super::install_check::InstallCheckError),
    #[error("bad address {0}")]
    BadAddress(String),
    #[error("cannot reach Weir at {base} ({detail}). Is `weir serve` or the tray running?")]
    Unreachable { base: String, detail: String },
    /// Weir answered with a problem: its title and detail.
    #[error("{title} — {detail}")]
    Refused { title: String, detail: String },
}

/// The whole of a one-call command (`weir queue`, `cache`, `handoff`, `network`): reads the
/// config for the address and the data dir, sends `method path` (with `body`) and gives the
/// JSON answer; on failure it has already said why and gives the exit code (2 for a config
/// that does not load or a bad address, else 1).
pub fn run(
    args: &super::ServeArgs,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, std::process::ExitCode> {
    let (launch, base) = super::serve::load_with_base(args)?;
    let data_dir = launch.data_dir;
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        eprintln!("weir: cannot start the async runtime");
        return Err(std::process::ExitCode::FAILURE);
    };
    rt.block_on(call_with(&base, &data_dir, method, path, body))
        .map_err(|e| report(&e))
}

/// Sends `method path` (with a JSON `body`, if any) to the Weir at `base` with this install's
/// control secret and returns the JSON answer.
pub async fn call_with(
    base: &str,
    data_dir: &Path,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, CallError> {
    let secret = super::install_check::verify(base, data_dir).await?;
    let mut req = match body {
        None => Request::new(weir::http_client::empty()),
        Some(b) => {
            let mut r = Request::new(weir::http_client::full(b.to_string()));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
    };
    *req.method_mut() = method;
    *req.uri_mut() = format!("{base}{path}")
        .parse()
        .map_err(|e| CallError::BadAddress(format!("{base}: {e}")))?;
    if let Some(v) = secret.and_then(|s| s.parse().ok()) {
        req.headers_mut().insert("x-weir-secret", v);
    }
    let t = Timeouts {
        headers: Duration::from_secs(10),
        body: Duration::from_secs(10),
    };
    let resp = UpstreamClient::new()
        .fetch(req, t, 16 << 20)
        .await
        .map_err(|e| CallError::Unreachable {
            base: base.to_string(),
            detail: e.to_string(),
        })?;
    let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
    if !resp.status().is_success() {
        return Err(CallError::Refused {
            title: v["title"].as_str().unwrap_or("error").to_string(),
            detail: v["detail"].as_str().unwrap_or("").to_string(),
        });
    }
    Ok(v)
}

/// Prints `e` and gives the exit code: 2 for a bad address (the config), else 1.
pub fn report(e: &CallError) -> std::process::ExitCode {
    eprintln!("weir: {e}");
    match e {
        CallError::BadAddress(_) => std::process::ExitCode::from(super::EXIT_CONFIG),
        _ => std::process::ExitCode::FAILURE,
    }
}
