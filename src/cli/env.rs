//! `weir env [--shell bash|zsh|fish|powershell] [--if-running | --unset]`: prints
//! [`weir::client_setup::shell_env`], only while this install's Weir answers
//! (`--if-running`, for shell profiles), or the commands that take Weir's variables back out
//! (`--unset`).

use super::args::{EnvArgs, EnvShell as Shell, GlobalArgs};
use super::context::load;
use std::process::ExitCode;

impl From<Shell> for weir::client_setup::Shell {
    fn from(s: Shell) -> Self {
        match s {
            Shell::Bash | Shell::Zsh => weir::client_setup::Shell::Posix,
            Shell::Fish => weir::client_setup::Shell::Fish,
            Shell::Powershell => weir::client_setup::Shell::PowerShell,
        }
    }
}

pub fn run(args: EnvArgs, global: &GlobalArgs) -> ExitCode {
    let install = match load(global) {
        Ok(i) => i,
        Err(code) => return code,
    };
    if args.unset {
        let vars = weir::client_setup::unset_vars(&install, |k| std::env::var(k).ok());
        print!(
            "{}",
            weir::client_setup::render_unset(&vars, args.shell.into())
        );
        return ExitCode::SUCCESS;
    }
    if args.if_running {
        let id = weir::client_setup::pointed::install_id(&install.data_dir);
        let secret = weir::client_setup::pointed::control_secret(&install.data_dir);
        if !weir::client_setup::weir_is_running(&install, id.as_deref(), secret.as_deref()) {
            // Nothing at all on stdout: the profile's eval then sets nothing.
            return ExitCode::SUCCESS;
        }
    }
    let (env, notes) = install.shell_env();
    for n in notes {
        eprintln!("weir: {n}");
    }
    print!("{}", env.render(args.shell.into()));
    ExitCode::SUCCESS
}
