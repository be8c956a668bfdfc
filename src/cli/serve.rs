//! `weir serve`: the proxy in the foreground until SIGINT/SIGTERM.

use super::{ServeArgs, EXIT_CONFIG};
use std::process::ExitCode;
use weir::config::{self, Settings};

/// Loads settings the way `weir serve` and the tray do: the given file, else the OS config
/// file if it exists, else the built-in defaults.
pub fn load_settings(args: &ServeArgs) -> Result<Settings, config::ConfigError> {
    let file = args
        .config
        .clone()
        .or_else(|| weir::paths::default_config_file().filter(|p| p.exists()));
    let mut settings = match file {
        Some(f) => config::load_file(&f)?,
        None => Settings::default(),
    };
    if let Some(l) = args.listen {
        settings.listen = l;
    }
    Ok(settings)
}

pub fn run(args: ServeArgs) -> ExitCode {
    let settings = match load_settings(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if !settings.listen.ip().is_loopback() {
        eprintln!(
            "weir: --listen {} is not a loopback address; Weir only listens on 127.0.0.1 or [::1]",
            settings.listen
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let data_dir = args
        .data_dir
        .clone()
        .or_else(|| settings.data_dir.clone())
        .unwrap_or_else(weir::paths::default_data_dir);
    // Before the runtime starts: the keychain calls block.
    let local_ca = weir::intercept::ca_store::load_for_engine(
        &settings,
        &data_dir,
        &super::context::keychain_service(),
    );
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Handlers are installed before anything is printed, so a supervisor that sends
        // SIGTERM as soon as it sees the address gets a graceful stop, not a default kill.
        let stop = shutdown_signal();
        let mut opts = weir::EngineOptions::new(settings, data_dir);
        opts.local_ca = local_ca;
        let handle = match weir::start(opts).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("weir: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("weir: proxy listening on http://{}", handle.local_addr());
        println!(
            "weir: dashboard and control API at {}",
            handle.dashboard_url_with_secret()
        );
        println!(
            "weir: point your tools at it with HTTPS_PROXY=http://{0} HTTP_PROXY=http://{0}",
            handle.local_addr()
        );
        super::serve_tls::print_intercept_status(&handle);
        stop.await;
        println!("weir: shutting down, draining in-flight requests");
        handle.shutdown().await;
        println!("weir: stopped");
        ExitCode::SUCCESS
    })
}

/// Registers SIGINT/SIGTERM handlers now and returns a future that resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut t), Ok(mut i)) => {
                    tokio::select! {
                        _ = t.recv() => {}
                        _ = i.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
