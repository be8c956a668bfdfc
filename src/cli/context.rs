//! What the client-setup commands (`ca`, `env`, `setup`, `doctor`) share: the `--config` and
//! `--data-dir` flags, the loaded settings, and where the local CA lives.

use super::EXIT_CONFIG;
use std::path::PathBuf;
use std::process::ExitCode;
use weir::config::Settings;
use weir::intercept::ca_store::CaStore;

/// Flags every client-setup command takes (anywhere on the command line).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CommonArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

/// Settings and paths of this install.
pub struct Context {
    pub settings: Settings,
    pub store: CaStore,
}

impl Context {
    /// Loads the config like `weir serve` does; a bad file is printed and becomes exit code 2.
    pub fn load(args: &CommonArgs) -> Result<Context, ExitCode> {
        let launch = weir::config::resolve(args.config.as_deref(), None, args.data_dir.as_deref())
            .map_err(|e| {
                eprintln!("weir: {e}");
                ExitCode::from(EXIT_CONFIG)
            })?;
        let (settings, data_dir) = (launch.settings, launch.data_dir);
        let store = CaStore::for_data_dir(&data_dir);
        Ok(Context { settings, store })
    }

    /// `http://127.0.0.1:PORT`, where clients reach Weir.
    pub fn proxy_url(&self) -> String {
        format!(
            "http://{}",
            weir::control::host_for(self.settings.listen.ip(), self.settings.listen.port())
        )
    }
}

/// `'text'` for POSIX shells: safe for any path.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,@+".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Prints `weir: <message>` to stderr and returns exit code 1.
pub fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("weir: {message}");
    ExitCode::FAILURE
}
