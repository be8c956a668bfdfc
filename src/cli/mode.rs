//! `weir mode [automatic|cache-only|pass-through]`: with no argument prints the running Weir's
//! mode and why; with one, chooses it (sending the control secret, after the install check
//! of [`super::install_check`]). `--json` prints the status object instead.

use super::args::ModeChoice;
use super::serve::load_with_base;
use super::{ServeArgs, EXIT_CONFIG};
use http::{header, Method, Request};
use std::process::ExitCode;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};
use weir::mode::{Mode, ModeKind, ModeStatus};

/// The library's mode for the one the user chose.
fn chosen(c: ModeChoice) -> Mode {
    match c {
        ModeChoice::Automatic => Mode::Automatic,
        ModeChoice::CacheOnly => Mode::CacheOnly,
        ModeChoice::PassThrough => Mode::PassThrough,
    }
}

pub fn run(mode: Option<ModeChoice>, json: bool, args: ServeArgs) -> ExitCode {
    let (data_dir, base) = match load_with_base(&args) {
        Ok((l, base)) => (l.data_dir, base),
        Err(code) => return code,
    };
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    rt.block_on(async move {
        let mut req = Request::new(weir::http_client::empty());
        if let Some(mode) = mode.map(chosen) {
            let secret = match super::install_check::verify(&base, &data_dir).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let body = serde_json::json!({"mode": mode, "by": "cli"}).to_string();
            req = Request::new(weir::http_client::full(body));
            *req.method_mut() = Method::PUT;
            req.headers_mut().insert(
                header::CONTENT_TYPE,
                "application/json".parse().expect("static"),
            );
            if let Some(v) = secret.and_then(|s| s.parse().ok()) {
                req.headers_mut().insert("x-weir-secret", v);
            }
        }
        *req.uri_mut() = match format!("{base}/_weir/api/mode").parse() {
            Ok(u) => u,
            Err(e) => {
                eprintln!("weir: bad address {base}: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        let t = Timeouts {
            headers: Duration::from_secs(10),
            body: Duration::from_secs(10),
        };
        let resp = match UpstreamClient::new().fetch(req, t, 1 << 20).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "weir: cannot reach Weir at {base} ({e}). Is `weir serve` or the tray running?"
                );
                return ExitCode::FAILURE;
            }
        };
        if !resp.status().is_success() {
            let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
            eprintln!(
                "weir: {} — {}",
                v["title"].as_str().unwrap_or("error"),
                v["detail"].as_str().unwrap_or("")
            );
            return ExitCode::FAILURE;
        }
        if json {
            println!("{}", String::from_utf8_lossy(resp.body()));
            return ExitCode::SUCCESS;
        }
        match serde_json::from_slice::<ModeStatusView>(resp.body()) {
            Ok(s) => {
                println!("{}", line(&s));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir: unexpected answer from {base}: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// The fields of [`ModeStatus`] the CLI prints (the library type is serialise-only).
#[derive(serde::Deserialize)]
struct ModeStatusView {
    mode: ModeKind,
    reason: String,
    persist_error: Option<String>,
}

fn line(s: &ModeStatusView) -> String {
    let name = match s.mode {
        ModeKind::Automatic => "automatic",
        ModeKind::Offline => "offline (automatic)",
        ModeKind::CacheOnly => "cache-only",
        ModeKind::PassThrough => "pass-through",
    };
    let mut out = format!("{name} — {}", s.reason);
    if let Some(e) = &s.persist_error {
        out.push_str(&format!("\nwarning: not kept for the next start ({e})"));
    }
    out
}

// Keeps the view in step with the library's type: a renamed field fails this build.
const _: fn(ModeStatus) -> (ModeKind, String, Option<String>) =
    |s| (s.mode, s.reason, s.persist_error);
