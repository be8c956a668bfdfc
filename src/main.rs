//! The `weir` command line: a thin layer over the engine library.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad configuration or usage.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
