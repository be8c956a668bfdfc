//! `weir network`: prints whether the running Weir counts the network as metered, from where
//! (the override, the OS) and why; `weir network metered on|off|auto` forces it or follows the
//! OS again, through `PUT /_weir/api/network` ([`super::control_call`]: the control secret,
//! after checking the Weir there is this install's). `--json` prints the status object.

use super::args::{MeteredSetting, NetworkCmd};
use super::ServeArgs;
use http::Method;
use std::process::ExitCode;
use weir::network::NetworkStatus;

/// `on`/`off` force; `auto` follows the OS again.
fn forced(s: MeteredSetting) -> Option<bool> {
    match s {
        MeteredSetting::On => Some(true),
        MeteredSetting::Off => Some(false),
        MeteredSetting::Auto => None,
    }
}

pub fn run(cmd: Option<NetworkCmd>, json: bool, args: ServeArgs) -> ExitCode {
    let (method, body) = match cmd {
        None => (Method::GET, None),
        Some(NetworkCmd::Metered { setting }) => (
            Method::PUT,
            Some(serde_json::json!({"metered": forced(setting), "by": "cli"})),
        ),
    };
    let v = match super::control_call::run(&args, method, "/_weir/api/network", body) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if json {
        println!("{v:#}");
        return ExitCode::SUCCESS;
    }
    match serde_json::from_value::<NetworkStatus>(v) {
        Ok(s) => {
            println!("{}", line(&s));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weir: unexpected answer from the running Weir: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `metered (forced) — forced with `weir network`; NetworkManager says Metered = no`.
fn line(s: &NetworkStatus) -> String {
    let mut out = format!("{} — {}", s.label, s.reason);
    if let Some(e) = &s.persist_error {
        out.push_str(&format!("\nwarning: not kept for the next start ({e})"));
    }
    out
}
