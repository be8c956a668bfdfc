//! `weir-lab`: runs the storm-lab scenarios and the helpers the benchmark scripts use.
//!
//! Exit codes: 0 success, 1 a run failed, 2 bad usage.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use weir_lab::scenarios::{LabConfig, Scenario};
use weir_lab::worker::Placement;

#[derive(Parser)]
#[command(name = "weir-lab", about = "Weir's storm lab (loopback only)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs scenarios and writes RESULTS.md, results.json and SVG charts into --out.
    Run {
        /// Scenarios to run (repeatable); all of them by default.
        #[arg(long = "scenario", value_enum)]
        scenarios: Vec<Scenario>,
        /// Clients in the fleet scenarios.
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        /// Seconds per row.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value = "out/lab")]
        out: PathBuf,
        /// Run fleets in this process instead of a child (fine below ~300 clients).
        #[arg(long)]
        in_process: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Internal: runs one fleet read from stdin (see `worker`).
    FleetWorker,
    /// Serves a lab upstream until interrupted; prints its origin on the first line.
    Upstream {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
    },
    /// Prints a `weir serve` config managing `--upstream` (for the benchmark script). The
    /// per-client rate limit is off: the load generator is a single client.
    WeirConfig {
        #[arg(long)]
        upstream: String,
        #[arg(long, default_value = "127.0.0.1:9347")]
        listen: SocketAddr,
    },
    /// Prints a loopback port that was free a moment ago.
    FreePort,
    /// A forward proxy of hyper alone (no Weir): the overhead benchmark's floor.
    BareProxy {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// A TLS server answering every request from memory with one fixed answer (HTTP/1.1 and
    /// HTTP/2 by ALPN): the floor under Weir's intercepted cache hit (scripts/profile-h2-floor.sh).
    BareTls {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// PEM certificate chain.
        #[arg(long)]
        cert: PathBuf,
        /// PEM private key (PKCS#8, SEC1 or PKCS#1).
        #[arg(long)]
        key: PathBuf,
        #[arg(long, value_enum, default_value = "hyper")]
        engine: weir_lab::bare_tls::Engine,
        #[arg(long, default_value_t = 200)]
        status: u16,
        /// A header field of every answer, `name: value` (repeatable); Age and X-Request-Id
        /// are made per answer.
        #[arg(long = "header")]
        headers: Vec<String>,
        /// The body of every answer.
        #[arg(long)]
        body_file: Option<PathBuf>,
    },
    /// Opens --conns connections to --proxy, sends one GET --url on each, and holds them open.
    Hold {
        #[arg(long)]
        proxy: SocketAddr,
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1000)]
        conns: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Big fleets keep ~10,000 sockets open: use the whole hard limit.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("weir-lab: cannot raise the open-files limit: {e}");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-lab: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-lab: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            scenarios,
            clients,
            seconds,
            out,
            in_process,
            seed,
        } => {
            let placement = if in_process {
                Placement::InProcess
            } else {
                Placement::Child(std::env::current_exe().context("cannot find my own executable")?)
            };
            let cfg = LabConfig {
                clients,
                seconds,
                placement,
                seed,
            };
            let scenarios = if scenarios.is_empty() {
                Scenario::ALL.to_vec()
            } else {
                scenarios
            };
            weir_lab::run::run_and_write(&cfg, &scenarios, &out).await?;
            println!("wrote {}", out.join("RESULTS.md").display());
        }
        Command::FleetWorker => weir_lab::worker::child_main().await?,
        Command::Upstream { listen, latency_ms } => {
            let up = weir_lab::upstream::Upstream::start_on(
                weir_lab::upstream::UpstreamSpec::with_latency(latency_ms),
                listen,
            )
            .await?;
            println!("{}", up.origin());
            tokio::signal::ctrl_c().await?;
            up.stop();
        }
        Command::WeirConfig { upstream, listen } => {
            let extra = weir_lab::weir_ctl::NO_RATE_LIMIT;
            let text = weir_lab::weir_ctl::lab_config(
                &upstream,
                weir_lab::weir_ctl::Caching::Default,
                extra,
            )
            .replace(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"{listen}\""),
            );
            print!("{text}");
        }
        Command::FreePort => {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            println!("{}", l.local_addr()?.port());
        }
        Command::BareProxy { listen } => weir_lab::bare_proxy::serve(listen).await?,
        Command::BareTls {
            listen,
            cert,
            key,
            engine,
            status,
            headers,
            body_file,
        } => {
            let body = match body_file {
                Some(p) => {
                    std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?
                }
                None => Vec::new(),
            };
            let status = http::StatusCode::from_u16(status).context("--status")?;
            let answer = weir_lab::bare_tls::Answer::new(status, &headers, body.into())?;
            let tls = weir_lab::bare_tls::tls_config(&cert, &key)?;
            weir_lab::bare_tls::serve(listen, tls, engine, answer).await?
        }
        Command::Hold {
            proxy,
            url,
            conns,
            seconds,
        } => {
            let held = weir_lab::hold::hold(proxy, &url, conns).await?;
            println!("held {}", held.len());
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        }
    }
    Ok(())
}
