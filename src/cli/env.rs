//! `weir env [--shell bash|zsh|fish|powershell]`: prints [`weir::client_setup::shell_env`].

use super::context::{load, CommonArgs};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Syntax of the output.
    #[arg(long, value_enum, default_value_t = Shell::Bash)]
    shell: Shell,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

impl From<Shell> for weir::client_setup::Shell {
    fn from(s: Shell) -> Self {
        match s {
            Shell::Bash | Shell::Zsh => weir::client_setup::Shell::Posix,
            Shell::Fish => weir::client_setup::Shell::Fish,
            Shell::Powershell => weir::client_setup::Shell::PowerShell,
        }
    }
}

pub fn run(args: EnvArgs) -> ExitCode {
    let install = match load(&args.common) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let (env, notes) = install.shell_env();
    for n in notes {
        eprintln!("weir: {n}");
    }
    print!("{}", env.render(args.shell.into()));
    ExitCode::SUCCESS
}
