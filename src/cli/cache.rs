//! `weir cache clear`: empties the running instance's cache, in memory and on disk.

use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use http::Method;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum CacheCmd {
    /// Empty the cache (memory and the encrypted file in the data dir).
    Clear,
}

pub fn run(cmd: CacheCmd, args: ServeArgs) -> ExitCode {
    let (settings, data_dir) = match load(&args) {
        Ok(l) => (l.settings, l.data_dir),
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let base = format!(
        "http://{}",
        weir::config::host_for(settings.listen.ip(), settings.listen.port())
    );
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let CacheCmd::Clear = cmd;
    match rt.block_on(super::control_call::call(
        &base,
        &data_dir,
        Method::POST,
        "/_weir/api/cache/clear",
    )) {
        Ok(v) => {
            println!(
                "weir: cache cleared ({} entries removed)",
                v["cleared"].as_u64().unwrap_or(0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => super::control_call::report(&e),
    }
}
