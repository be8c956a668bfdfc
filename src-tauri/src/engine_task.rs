//! Starts the one in-process engine on Tauri's async runtime, with the same config and data
//! directory rules as `weir serve`, and owns it as managed state ([`Engine`]) until Quit.

use crate::error::TrayError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use tauri::{AppHandle, Manager, Runtime};
use weir::config::{self, Settings};
use weir::EngineHandle;

/// The command line of the tray binary (the same three options as `weir serve`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchArgs {
    pub config: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    /// Be the dashboard window's process (started by the tray; requests on stdin).
    pub dashboard: bool,
}

/// What `--help` prints.
pub const USAGE: &str = "usage: weir-tray [--config FILE] [--listen ADDR] [--data-dir DIR]\n\
    Runs Weir's proxy with a tray icon. Options as for `weir serve`.";

impl LaunchArgs {
    /// Parses `--config FILE`, `--listen ADDR`, `--data-dir DIR` (also `--opt=value`). Unknown
    /// arguments are errors, except the ones desktop launchers add (`-psn_…` on macOS).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<LaunchArgs, String> {
        let mut out = LaunchArgs::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--config" => out.config = Some(PathBuf::from(value("--config")?)),
                "--data-dir" => out.data_dir = Some(PathBuf::from(value("--data-dir")?)),
                "--listen" => {
                    let v = value("--listen")?;
                    out.listen = Some(v.parse().map_err(|_| {
                        format!("--listen `{v}` is not an address like 127.0.0.1:9347")
                    })?);
                }
                crate::dashboard::FLAG => out.dashboard = true,
                "-h" | "--help" => return Err(USAGE.to_string()),
                f if f.starts_with("-psn_") => {}
                other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
            }
        }
        Ok(out)
    }
}

/// Settings, data dir and config file exactly as `weir serve` finds them
/// ([`weir::config::resolve`]); a `--config` that does not exist is its own error.
pub fn resolve(args: &LaunchArgs) -> Result<weir::config::Launch, TrayError> {
    if let Some(f) = args.config.as_ref().filter(|f| !f.exists()) {
        return Err(TrayError::MissingConfig(f.clone()));
    }
    match config::resolve(
        args.config.as_deref(),
        args.listen,
        args.data_dir.as_deref(),
    ) {
        Err(config::ConfigError::NotLoopback(a)) => Err(TrayError::NotLoopback(a)),
        other => Ok(other?),
    }
}

/// The running engine, kept in Tauri's managed state.
pub struct Engine {
    pub handle: EngineHandle,
    quitting: AtomicBool,
}

impl Engine {
    /// Starts the engine on Tauri's runtime. Call from `setup` (the main thread, not inside the
    /// runtime): the listener is bound before this returns, so a taken port fails the launch.
    pub fn start(
        settings: Settings,
        data_dir: PathBuf,
        config_file: Option<PathBuf>,
        desktop: bool,
    ) -> Result<Engine, TrayError> {
        // The local CA (TLS interception) as `weir serve` loads it; its key lives in the
        // keychain, so only the real desktop app touches it (mock-runtime tests do not).
        let local_ca = if desktop {
            let service = std::env::var("WEIR_KEYCHAIN_SERVICE").unwrap_or_else(|_| "weir".into());
            weir::intercept::ca_store::load_for_engine(&settings, &data_dir, &service)
        } else {
            None
        };
        let mut opts = weir::EngineOptions::new(settings, data_dir);
        opts.local_ca = local_ca;
        opts.config_file = config_file;
        let handle = tauri::async_runtime::block_on(weir::start(opts))?;
        tracing::info!(
            "weir-tray: proxy listening on http://{}",
            handle.local_addr()
        );
        Ok(Engine {
            handle,
            quitting: AtomicBool::new(false),
        })
    }

    pub fn is_quitting(&self) -> bool {
        self.quitting.load(Ordering::Relaxed)
    }

    /// `export HTTPS_PROXY=… HTTP_PROXY=…` (both spellings: curl reads only the lower-case
    /// `http_proxy`, other tools only the upper-case ones).
    pub fn shell_proxy_settings(&self) -> String {
        let p = format!("http://{}", self.handle.local_addr());
        format!("export HTTPS_PROXY={p} HTTP_PROXY={p} https_proxy={p} http_proxy={p}")
    }
}

/// Graceful quit: stop accepting, drain in-flight requests, then exit the app. A second call
/// while draining does nothing.
pub fn quit<R: Runtime>(app: &AppHandle<R>) {
    let engine = app.state::<Engine>();
    if engine.quitting.swap(true, Ordering::Relaxed) {
        return;
    }
    let handle = engine.handle.clone();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        handle.shutdown().await;
        tracing::info!("weir-tray: engine stopped, exiting");
        app.exit(0);
    });
}

/// SIGINT/SIGTERM (logout, `kill`, Ctrl-C in a terminal) quit as gracefully as the menu does.
pub fn quit_on_signals<R: Runtime>(app: &AppHandle<R>) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        wait_for_signal().await;
        quit(&app);
    });
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!("weir-tray: no SIGTERM handler ({e}); Ctrl-C only");
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<LaunchArgs, String> {
        LaunchArgs::parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_the_serve_options_both_spellings() {
        let a = parse(&[
            "--config",
            "/c.toml",
            "--listen=127.0.0.1:0",
            "--data-dir=/d",
        ])
        .unwrap();
        assert_eq!(a.config, Some(PathBuf::from("/c.toml")));
        assert_eq!(a.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(a.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(parse(&[]).unwrap(), LaunchArgs::default());
    }

    #[test]
    fn rejects_bad_arguments_with_usage() {
        assert!(parse(&["--listen", "nope"])
            .unwrap_err()
            .contains("not an address"));
        assert!(parse(&["--config"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--frobnicate"]).unwrap_err().contains("usage:"));
    }

    #[test]
    fn resolve_refuses_a_missing_file_and_non_loopback() {
        let missing = LaunchArgs {
            config: Some("/nonexistent/weir.toml".into()),
            ..Default::default()
        };
        assert!(matches!(
            resolve(&missing),
            Err(TrayError::MissingConfig(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:0\"\n").unwrap();
        let wide = LaunchArgs {
            config: Some(file.clone()),
            listen: Some("0.0.0.0:9".parse().unwrap()),
            data_dir: Some(dir.path().into()),
            dashboard: false,
        };
        assert!(matches!(resolve(&wide), Err(TrayError::NotLoopback(_))));
        let ok = LaunchArgs {
            config: Some(file),
            listen: None,
            data_dir: Some(dir.path().join("d")),
            dashboard: false,
        };
        let weir::config::Launch {
            settings, data_dir, ..
        } = resolve(&ok).unwrap();
        assert_eq!(settings.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(data_dir, dir.path().join("d"));
    }
}
