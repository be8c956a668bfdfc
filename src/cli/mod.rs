//! Command-line parsing and dispatch.

mod ca;
mod context;
mod doctor;
mod env;
mod queue;
mod serve;
mod serve_tls;
mod setup;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
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
    Serve(ServeArgs),
    /// Inspect and manage queued creates of the running instance.
    Queue {
        #[command(subcommand)]
        cmd: queue::QueueCmd,
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

#[derive(clap::Args, Clone)]
pub struct ServeArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, overriding the config file (loopback only).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

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
        Command::Serve(args) => serve::run(args),
        Command::Queue { cmd, args } => queue::run(cmd, args),
        Command::Ca(args) => ca::run(args),
        Command::Env(args) => env::run(args),
        Command::Setup(args) => setup::run(args),
        Command::Doctor(args) => doctor::run(args),
    }
}
