//! `weir network`: prints whether the running Weir counts the network as metered, from where
//! (the override, the OS) and why; `weir network metered on|off|auto` forces it or follows the
//! OS again, through `PUT /_weir/api/network` ([`super::control_call`]: the control secret,
//! after checking the Weir there is this install's). `--json` prints the status object.

use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use http::Method;
use std::process::ExitCode;
use weir::network::NetworkStatus;

#[derive(clap::Subcommand)]
pub enum NetworkCmd {
    /// Force metered (`on`), force not metered (`off`), or follow the OS again (`auto`); kept
    /// across restarts.
    Metered {
        #[arg(value_enum)]
        setting: Setting,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Setting {
    On,
    Off,
    Auto,
}

impl Setting {
    fn forced(self) -> Option<bool> {
        match self {
            Setting::On => Some(true),
            Setting::Off => Some(false),
            Setting::Auto => None,
        }
    }
}

pub fn run(cmd: Option<NetworkCmd>, json: bool, args: ServeArgs) -> ExitCode {
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
    let (method, body) = match cmd {
        None => (Method::GET, None),
        Some(NetworkCmd::Metered { setting }) => (
            Method::PUT,
            Some(serde_json::json!({"metered": setting.forced(), "by": "cli"})),
        ),
    };
    let answer = rt.block_on(super::control_call::call_with(
        &base,
        &data_dir,
        method,
        "/_weir/api/network",
        body,
    ));
    let v = match answer {
        Ok(v) => v,
        Err(e) => return super::control_call::report(&e),
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
            eprintln!("weir: unexpected answer from {base}: {e}");
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
