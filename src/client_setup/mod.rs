//! Client set-up: what points a developer's tools at Weir and makes them trust its CA. The `weir`
//! CLI (`env`, `setup`, `ca install`, `doctor`) and the tray call these; they only print.
//!
//! - [`shell_env`](mod@shell_env): the environment variables (`HTTPS_PROXY`, `NO_PROXY`, the
//!   CA bundle) and their rendering for POSIX shells, fish and PowerShell.
//! - [`vscode`]: VS Code's proxy settings, merged into its JSONC `settings.json`.
//! - [`ca_install`]: the OS trust-store steps for the local CA, and running them.
//! - [`doctor_checks`]: is this machine set up? One typed [`doctor_checks::Check`] per finding.
//! - [`pointed`]: which tools still point at Weir ([`pointed_at_weir`], for doctor and the
//!   tray's quit warning), and whether this install's Weir answers ([`weir_is_running`]).

pub mod ca_install;
pub mod doctor_checks;
pub mod pointed;
pub mod shell_env;
pub mod vscode;

pub use ca_install::{apply_steps, install_steps, rotate, Rotation, StepReport};
pub use doctor_checks::{run_checks, Check, CheckKind, Outcome};
pub use pointed::{pointed_at_weir, weir_is_running, PointedTool, Sources, ToolKind};
pub use shell_env::{
    prepare_ca_files, render_unset, shell_env, unset_vars, CaFiles, EnvNote, Shell, ShellEnv,
    ShellEnvInput,
};
pub use vscode::VscodeError;

use crate::config::{ConfigError, Settings};
use crate::intercept::CaStore;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One install as the set-up commands see it: its settings, data dir and local CA.
#[derive(Debug, Clone)]
pub struct Install {
    pub settings: Settings,
    pub data_dir: PathBuf,
    pub ca: CaStore,
}

impl Install {
    /// Loads the config like `weir serve` does ([`crate::config::resolve`]), without `--listen`.
    pub fn load(config: Option<&Path>, data_dir: Option<&Path>) -> Result<Install, ConfigError> {
        let launch = crate::config::resolve(config, None, data_dir)?;
        Ok(Install::new(launch.settings, launch.data_dir))
    }

    /// The install with these settings and data dir (its CA key in the data dir's namespace).
    pub fn new(settings: Settings, data_dir: PathBuf) -> Install {
        let ca = CaStore::for_data_dir(&data_dir);
        Install {
            settings,
            data_dir,
            ca,
        }
    }

    /// The CA store after settling where this install's secrets live, as `weir serve` does at
    /// start ([`crate::secrets::choose()`]): with no keychain under `auto` that makes the file
    /// store, so a CA a command creates before the first start (`weir env`, `weir ca
    /// install|rotate`: the CI runner's steps) has its key where `weir serve` will look. Without
    /// it they asked the OS keychain and failed with its fix (install gnome-keyring) on a box
    /// that needs none. Blocks on the keychain's probe.
    pub fn settled_ca(&self) -> Result<CaStore, crate::secrets::ChooseError> {
        crate::secrets::choose(&self.data_dir, self.settings.secrets_store)?;
        Ok(CaStore::for_data_dir(&self.data_dir))
    }

    /// Where clients reach Weir.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.settings.listen
    }

    /// `http://127.0.0.1:PORT`, where clients reach Weir.
    pub fn proxy_url(&self) -> String {
        proxy_url(self.proxy_addr())
    }
}

/// `http://HOST:PORT` for a listen address (`[::1]` bracketed).
pub fn proxy_url(addr: SocketAddr) -> String {
    format!("http://{}", crate::config::host_for(addr.ip(), addr.port()))
}

/// `'text'` for POSIX shells (and fish): safe for any path; plain when nothing needs quoting.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,@+".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}
