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
    // Rendered first, then written: clap_complete panics when its writer fails, and a reader
    // that stops early (`weir completions bash | grep -q complete`, `| head`) closes the pipe.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "weir", &mut script);
    write_out(&mut std::io::stdout().lock(), &script)
}

/// Writes `bytes`; a reader that closed the pipe had what it wanted (success, as `cat` would
/// end quietly), any other failure is said.
fn write_out(out: &mut impl std::io::Write, bytes: &[u8]) -> ExitCode {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: cannot write the completion script: {e}");
            ExitCode::FAILURE
        }
    }
}
