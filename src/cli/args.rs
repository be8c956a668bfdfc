//! The whole `weir` command line as clap definitions, and nothing else: it depends only on clap
//! and std, so `build.rs` includes this same file (`#[path]`) to write the man pages with
//! clap_mangen at build time without compiling the engine. The commands' code (the sibling
//! modules) takes these types; `weir completions` renders them with clap_complete.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What `weir --help` (and the man page's EXIT STATUS section) says about exit codes. True to
/// `src/cli`: every command returns 0, `ExitCode::FAILURE` (1) or `EXIT_CONFIG` (2), and clap's
/// own usage errors exit 2.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  success (`weir doctor`: every check passed; `weir env --if-running`: also when Weir is
     not running, printing nothing)
  1  a runtime failure: Weir is not reachable or refused the call, the keychain or a file
     could not be used, a step failed, or a `weir doctor` check failed
  2  the command line or the configuration is wrong: an unknown option, a bad value, a config
     file that does not load (the message names the file, line and key), `--json` on a command
     without JSON output, or nothing on stdin where a secret was expected

The options --config, --data-dir, --listen and --json may be given anywhere on the command line.";

#[derive(clap::Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "A localhost proxy that keeps Copilot cloud-agent storms away from GitHub",
    after_help = EXIT_STATUS
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command takes, before or after the subcommand (`global = true`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct GlobalArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Address Weir listens on, overriding the config file (loopback only).
    #[arg(long, value_name = "ADDR", global = true)]
    pub listen: Option<SocketAddr>,
    /// Print JSON instead of text (queue, handoff, mode, network, doctor, routes).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Run the proxy in the foreground (headless).
    Serve {
        /// Run as a team gateway: the TLS listener, allow-list, admin listener and (optionally)
        /// the PostgreSQL queue of the config file's `[gateway]` table (docs/team.md).
        #[arg(long)]
        gateway: bool,
        /// Print the dashboard link with the control secret even when standard output is
        /// not a terminal (by default a journal or log file never gets it).
        #[arg(long)]
        print_secret: bool,
    },
    /// Print the running Weir's state at a glance: mode, each upstream's breaker, the queue,
    /// the cache, what it saved in the last hour, interception and tunnels (`--json`: the
    /// whole status document).
    Status,
    /// Inspect and manage queued creates of the running instance.
    Queue {
        #[command(subcommand)]
        cmd: QueueCmd,
    },
    /// Local-agent offers of the running instance: list, show, confirm, decline.
    Handoff {
        #[command(subcommand)]
        cmd: HandoffCmd,
    },
    /// Print the running Weir's mode and why, or choose one: automatic, cache-only,
    /// pass-through.
    Mode {
        /// The mode to choose; none prints the current one.
        #[arg(value_enum)]
        mode: Option<ModeChoice>,
    },
    /// Print whether the running Weir counts the network as metered and why, or set the
    /// override: `weir network metered on|off|auto`.
    Network {
        #[command(subcommand)]
        cmd: Option<NetworkCmd>,
    },
    /// The running instance's response cache: clear.
    Cache {
        #[command(subcommand)]
        cmd: CacheCmd,
    },
    /// This install's secrets: rotate the control secret, or migrate every secret between the
    /// OS keychain and the file store (`weir secrets migrate --to keychain|file`).
    #[command(visible_alias = "secrets")]
    Secret {
        #[command(subcommand)]
        cmd: SecretCmd,
    },
    /// Team signals (`[team]`): store the team key and the NATS login in the keychain.
    Team {
        #[command(subcommand)]
        cmd: TeamCmd,
    },
    /// The GitHub token the agent-sessions view uses: set (stdin or hidden prompt), status, forget.
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
    },
    /// The local CA used for HTTPS to managed hosts: path, show, rotate, install.
    Ca {
        #[command(subcommand)]
        action: CaAction,
    },
    /// Print the environment that points tools at Weir and trusts its CA.
    Env(EnvArgs),
    /// Configure an application to use Weir (vscode).
    Setup {
        #[command(subcommand)]
        target: SetupTarget,
    },
    /// Check that Weir, its CA, the environment and the upstreams are set up.
    Doctor,
    /// Print the route table: each managed host, each method and path pattern with its class
    /// and the class's cache times. `--classify` reads `METHOD URL` lines on stdin instead and
    /// prints the class Weir gives each (`scripts/check-clients.sh` uses it).
    Routes {
        #[arg(long)]
        classify: bool,
    },
    /// Print a shell completion script: `weir completions bash > ~/.local/share/bash-completion/completions/weir`.
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

impl Command {
    /// Whether the command has a JSON form (`--json`); the others refuse it with exit 2.
    pub fn has_json(&self) -> bool {
        matches!(
            self,
            Command::Status
                | Command::Queue { .. }
                | Command::Handoff { .. }
                | Command::Mode { .. }
                | Command::Network { .. }
                | Command::Doctor
                | Command::Routes { .. }
        )
    }

    /// `serve`, `queue`, …: the subcommand's name as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Serve { .. } => "serve",
            Command::Status => "status",
            Command::Queue { .. } => "queue",
            Command::Handoff { .. } => "handoff",
            Command::Mode { .. } => "mode",
            Command::Network { .. } => "network",
            Command::Cache { .. } => "cache",
            Command::Secret { .. } => "secret",
            Command::Team { .. } => "team",
            Command::Token { .. } => "token",
            Command::Ca { .. } => "ca",
            Command::Env(_) => "env",
            Command::Setup { .. } => "setup",
            Command::Doctor => "doctor",
            Command::Routes { .. } => "routes",
            Command::Completions { .. } => "completions",
        }
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum QueueCmd {
    /// List queued creates (`--json`: the API's answer).
    Ls,
    /// Show one item.
    Show { id: i64 },
    /// Cancel an item (its credential is deleted).
    Cancel { id: i64 },
    /// Queue a failed, expired or cancelled item again.
    Retry { id: i64 },
}

#[derive(clap::Subcommand, Debug)]
pub enum HandoffCmd {
    /// List offers waiting for an answer and those handed off (`--json`: the API's answer).
    Ls,
    /// Show one offer (or what its create became).
    Show { id: i64 },
    /// Start the local agent for an offer (once; a second confirm is refused).
    Confirm { id: i64 },
    /// Decline an offer: the create goes back to the queue; nothing runs.
    Decline { id: i64 },
}

/// The modes a user may choose (`offline` is entered automatically, never chosen).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeChoice {
    #[value(alias = "auto")]
    Automatic,
    CacheOnly,
    #[value(alias = "passthrough")]
    PassThrough,
}

#[derive(clap::Subcommand, Debug)]
pub enum NetworkCmd {
    /// Force metered (`on`), force not metered (`off`), or follow the OS again (`auto`); kept
    /// across restarts.
    Metered {
        #[arg(value_enum)]
        setting: MeteredSetting,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeteredSetting {
    On,
    Off,
    Auto,
}

#[derive(clap::Subcommand, Debug)]
pub enum CacheCmd {
    /// Empty the cache (memory and the encrypted file in the data dir).
    Clear,
}

#[derive(clap::Subcommand, Debug)]
pub enum SecretCmd {
    /// Store a new control secret (a running Weir keeps its old one until restarted).
    Rotate,
    /// Move every secret of this install to the OS keychain or to owner-only files in the data
    /// dir, or none (all are copied and read back before any is deleted). Stop Weir first.
    Migrate {
        #[arg(long, value_enum)]
        to: MigrateTo,
    },
}

/// Where `weir secrets migrate` moves the secrets.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateTo {
    Keychain,
    File,
}

#[derive(clap::Subcommand, Debug)]
pub enum TeamCmd {
    /// Store the team key (64 hex digits, read from stdin); with --generate, make a new one,
    /// store it and print it once to share with the team over a safe channel.
    SetKey {
        #[arg(long)]
        generate: bool,
    },
    /// Store the NATS login: a token (stdin), or --user NAME with the password on stdin.
    SetCredentials {
        #[arg(long)]
        user: Option<String>,
    },
    /// Remove the team key and the NATS login from the keychain.
    Clear,
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenCmd {
    /// Store a GitHub token: piped on standard input, else typed at a hidden prompt.
    Set,
    /// Say whether a token is stored (never the token) and what the sessions poller does.
    Status,
    /// Delete the stored token; the sessions poller stops.
    Forget,
}

#[derive(clap::Subcommand, Debug)]
pub enum CaAction {
    /// Print the path of the CA certificate (PEM).
    Path,
    /// Show the CA: subject, fingerprint, validity, permitted names, where the key is.
    Show,
    /// Replace the CA with a new one (the old key is deleted) and print the trust-store steps.
    Rotate,
    /// Print the exact steps that make this OS (and NSS browsers) trust the CA.
    Install {
        /// Run the steps instead of printing them (uses sudo for system stores when not root).
        #[arg(long)]
        apply: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct EnvArgs {
    /// Syntax of the output.
    #[arg(long, value_enum, default_value_t = EnvShell::Bash)]
    pub shell: EnvShell,
    /// Print the variables only if this install's Weir answers its health check now; print
    /// nothing (and exit 0) otherwise. For shell profiles: `eval "$(weir env --if-running)"`.
    #[arg(long, conflicts_with = "unset")]
    pub if_running: bool,
    /// Print the commands that remove Weir's variables from the shell:
    /// `eval "$(weir env --unset)"`. A proxy variable naming a non-loopback proxy is kept.
    #[arg(long)]
    pub unset: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvShell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

#[derive(clap::Subcommand, Debug)]
pub enum SetupTarget {
    /// Visual Studio Code (user settings.json).
    Vscode {
        /// Merge the settings into settings.json (a .bak copy is written first).
        #[arg(long, conflicts_with = "undo")]
        apply: bool,
        /// Take Weir's proxy settings back out of settings.json (a .bak copy is written
        /// first; comments and other keys are kept).
        #[arg(long)]
        undo: bool,
        /// The settings file (default: the OS location of VS Code's user settings.json).
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
    },
}

/// The shells `weir completions` writes for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}
