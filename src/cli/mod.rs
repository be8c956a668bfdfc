//! Command-line parsing and dispatch.

mod ca;
mod cache;
mod context;
mod control_call;
mod doctor;
mod env;
mod handoff;
mod install_check;
mod mode;
mod network;
mod queue;
mod secret;
mod serve;
mod serve_tls;
mod setup;
mod team;
mod token;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A localhost proxy that keeps Copilot cloud-agent storms away from GitHub"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy in the foreground (headless).
    Serve {
        #[command(flatten)]
        args: ServeArgs,
        /// Run as a team gateway: the TLS listener, allow-list, admin listener and (optionally)
        /// the PostgreSQL queue of the config file's `[gateway]` table (docs/team.md).
        #[arg(long)]
        gateway: bool,
        /// Print the dashboard link with the control secret even when standard output is
        /// not a terminal (by default a journal or log file never gets it).
        #[arg(long)]
        print_secret: bool,
    },
    /// Inspect and manage queued creates of the running instance.
    Queue {
        #[command(subcommand)]
        cmd: queue::QueueCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Local-agent offers of the running instance: list, show, confirm, decline.
    Handoff {
        #[command(subcommand)]
        cmd: handoff::HandoffCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Print the running Weir's mode and why, or choose one: automatic, cache-only,
    /// pass-through.
    Mode(mode::ModeArgs),
    /// Print whether the running Weir counts the network as metered and why, or set the
    /// override: `weir network metered on|off|auto`.
    Network {
        #[command(subcommand)]
        cmd: Option<network::NetworkCmd>,
        /// Print the network status as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// The running instance's response cache: clear.
    Cache {
        #[command(subcommand)]
        cmd: cache::CacheCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// The control secret of this install: rotate.
    Secret {
        #[command(subcommand)]
        cmd: secret::SecretCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Team signals (`[team]`): store the team key and the NATS login in the keychain.
    Team {
        #[command(subcommand)]
        cmd: team::TeamCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// The GitHub token the agent-sessions view uses: set (stdin or hidden prompt), status, forget.
    Token {
        #[command(subcommand)]
        cmd: token::TokenCmd,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// The local CA used for HTTPS to managed hosts: path, show, rotate, install.
    Ca(ca::CaArgs),
    /// Print the environment that points tools at Weir and trusts its CA.
    Env(env::EnvArgs),
    /// Configure an application to use Weir (vscode).
    Setup(setup::SetupArgs),
    /// Check that Weir, its CA, the environment and the upstreams are set up.
    Doctor(doctor::DoctorArgs),
}

/// `--config`, `--listen`, `--data-dir`, defined once in the library for `weir serve` and the
/// tray.
pub use weir::config::LaunchArgs as ServeArgs;

/// Exit code 2: the user must fix the config or the command line.
pub const EXIT_CONFIG: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| "weir=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve {
            args,
            gateway,
            print_secret,
        } => serve::run(args, gateway, print_secret),
        Command::Queue { cmd, args } => queue::run(cmd, args),
        Command::Handoff { cmd, args } => handoff::run(cmd, args),
        Command::Cache { cmd, args } => cache::run(cmd, args),
        Command::Secret { cmd, args } => secret::run(cmd, args),
        Command::Mode(args) => mode::run(args),
        Command::Network { cmd, json, args } => network::run(cmd, json, args),
        Command::Team { cmd, args } => team::run(cmd, args),
        Command::Token { cmd, args } => token::run(cmd, args),
        Command::Ca(args) => ca::run(args),
        Command::Env(args) => env::run(args),
        Command::Setup(args) => setup::run(args),
        Command::Doctor(args) => doctor::run(args),
    }
}
