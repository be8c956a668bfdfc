//! `weir completions bash|zsh|fish|powershell`: the completion script clap_complete renders
//! from [`super::args::Cli`], on stdout.

use super::args::{Cli, CompletionShell};
use clap::CommandFactory;
use clap_complete::Shell;
use std::process::ExitCode;

pub fn run(shell: CompletionShell) -> ExitCode {
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
        CompletionShell::Powershell => Shell::PowerShell,
    };
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "weir", &mut std::io::stdout());
    ExitCode::SUCCESS
}
