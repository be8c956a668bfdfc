//! Command-line dispatch: parses [`args::Cli`] (the definitions, shared with `build.rs`) and
//! hands each command the global options it uses.

/// `println!` for what a long-running `weir serve` says: a closed stdout (a supervisor that
/// read the address and went away, `weir serve | head -1`) must not stop the proxy, and
/// `println!` panics when the write fails.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod args;
mod ca;
mod cache;
mod completions;
mod context;
mod control_call;
mod doctor;
mod env;
mod handoff;
mod install_check;
mod mode;
mod network;
mod queue;
mod routes;
mod secret;
mod serve;
mod serve_tls;
mod setup;
mod status;
mod team;
mod token;

use args::{Cli, Command, GlobalArgs};
use clap::Parser;
use std::process::ExitCode;

/// `--config`, `--listen`, `--data-dir`, defined once in the library for `weir serve` and the
/// tray; the CLI fills them from [`GlobalArgs`].
pub use weir::config::LaunchArgs as ServeArgs;

/// Exit code 2: the user must fix the config or the command line ([`args::EXIT_STATUS`]).
pub const EXIT_CONFIG: u8 = 2;

impl GlobalArgs {
    /// The launch flags of `weir serve` and the control commands.
    fn launch(&self) -> ServeArgs {
        ServeArgs {
            config: self.config.clone(),
            listen: self.listen,
            data_dir: self.data_dir.clone(),
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| "weir=info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a journal (the systemd user unit) or a
        // `2> weir.log` would keep the escape codes as text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let g = cli.global;
    if g.json && !cli.command.has_json() {
        eprintln!(
            "weir: `weir {}` has no JSON output (--json works with status, queue, handoff, mode, network, doctor and routes)",
            cli.command.name()
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    match cli.command {
        Command::Serve {
            gateway,
            print_secret,
        } => serve::run(g.launch(), gateway, print_secret),
        Command::Status => status::run(g.json, g.launch()),
        Command::Queue { cmd } => queue::run(cmd, g.json, g.launch()),
        Command::Handoff { cmd } => handoff::run(cmd, g.json, g.launch()),
        Command::Cache { cmd } => cache::run(cmd, g.launch()),
        Command::Secret { cmd } => secret::run(cmd, g.launch()),
        Command::Mode { mode } => mode::run(mode, g.json, g.launch()),
        Command::Network { cmd } => network::run(cmd, g.json, g.launch()),
        Command::Team { cmd } => team::run(cmd, g.launch()),
        Command::Token { cmd } => token::run(cmd, g.launch()),
        Command::Ca { action } => ca::run(action, &g),
        Command::Env(args) => env::run(args, &g),
        Command::Setup { target } => setup::run(target, &g),
        Command::Doctor => doctor::run(g.json, &g),
        Command::Routes { classify } => routes::run(classify, g.json, &g),
        Command::Completions { shell } => completions::run(shell),
    }
}
