//! `weir cache clear`: empties the running instance's cache, in memory and on disk.

use super::args::CacheCmd;
use super::ServeArgs;
use http::Method;
use std::process::ExitCode;

pub fn run(cmd: CacheCmd, args: ServeArgs) -> ExitCode {
    let CacheCmd::Clear = cmd;
    match super::control_call::run(&args, Method::POST, "/_weir/api/cache/clear", None) {
        Ok(v) => {
            println!(
                "weir: cache cleared ({} entries removed)",
                v["cleared"].as_u64().unwrap_or(0)
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}
