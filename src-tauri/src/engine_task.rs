//! Starts the one in-process engine on Tauri's async runtime, with the same config and data
//! directory rules as `weir serve`, and owns it as managed state ([`Engine`]) until Quit.

use crate::error::TrayError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use tauri::{AppHandle, Manager, Runtime};
use weir::config::{self, Settings};
use weir::EngineHandle;

/// The command line of the tray binary: `weir serve`'s launch flags, parsed with the same clap
/// definitions ([`weir::config::LaunchArgs`]), plus the hidden flag the tray starts its
/// dashboard process with.
#[derive(clap::Parser, Debug, Clone, Default, PartialEq, Eq)]
#[command(
    name = "weir-tray",
    version,
    about = "Runs Weir's proxy with a tray icon. Options as for `weir serve`."
)]
pub struct TrayArgs {
    #[command(flatten)]
    pub launch: weir::config::LaunchArgs,
    /// Be the dashboard window's process (started by the tray; requests on stdin).
    #[arg(long = "dashboard", hide = true)]
    pub dashboard: bool,
}

impl TrayArgs {
    /// Parses the arguments after the program name, `--opt value` or `--opt=value`. Unknown
    /// arguments are errors, except the `-psn_…` argument macOS launchers add; `--help` and
    /// `--version` come back as errors whose `exit_code()` is 0.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<TrayArgs, clap::Error> {
        let args = args.into_iter().filter(|a| !a.starts_with("-psn_"));
        <TrayArgs as clap::Parser>::try_parse_from(
            std::iter::once("weir-tray".to_string()).chain(args),
        )
    }
}

/// Settings, data dir and config file exactly as `weir serve` finds them
/// ([`weir::config::resolve`]); a `--config` that does not exist is its own error.
pub fn resolve(args: &weir::config::LaunchArgs) -> Result<weir::config::Launch, TrayError> {
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
    /// This install as `weir env` and the other set-up commands see it.
    install: weir::client_setup::Install,
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
            weir::intercept::ca_store::load_local_ca(&settings, &data_dir)
        } else {
            None
        };
        let install = weir::client_setup::Install::new(settings.clone(), data_dir.clone());
        let mut opts = weir::EngineOptions::new(settings, data_dir);
        opts.local_ca = local_ca;
        opts.config_file = config_file;
        let handle = tauri::async_runtime::block_on(weir::start(opts))?;
        tracing::info!(
            "weir-tray: proxy listening on http://{}",
            handle.local_addr()
        );
        // What "Copy shell proxy settings" gives is what `weir env` prints for this install,
        // at the address the engine really listens on.
        let mut install = install;
        install.settings.listen = handle.local_addr();
        Ok(Engine {
            handle,
            install,
            quitting: AtomicBool::new(false),
        })
    }

    /// Whether the dashboard's Set up view was never shown for this install (the page records
    /// it in the data dir when it shows the view): the tray then opens it on start.
    pub fn first_run(&self) -> bool {
        !self
            .install
            .data_dir
            .join(weir::client_setup::doctor_checks::SETUP_SEEN_FILE)
            .exists()
    }

    /// This install's data dir (the tray keeps its own small choices there too).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.install.data_dir
    }

    pub fn is_quitting(&self) -> bool {
        self.quitting.load(Ordering::Relaxed)
    }

    /// Exactly what `weir env` prints (proxy variables, `NO_PROXY`, the CA variables when
    /// interception is on), from the same library code. Writes the CA bundle like `weir env`
    /// does, so call it off the UI thread when that matters.
    pub fn shell_proxy_settings(&self) -> String {
        let (env, notes) = self.install.shell_env();
        for note in notes {
            tracing::info!("weir-tray: {note}");
        }
        env.render(weir::client_setup::shell_env::Shell::Posix)
    }
}

/// Graceful quit: warn about tools still pointed at Weir (they would fail while it is gone),
/// stop accepting, drain in-flight requests, then exit the app. A second call while draining
/// does nothing.
pub fn quit<R: Runtime>(app: &AppHandle<R>) {
    let engine = app.state::<Engine>();
    if engine.quitting.swap(true, Ordering::Relaxed) {
        return;
    }
    let handle = engine.handle.clone();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        warn_pointed_tools(&handle).await;
        handle.shutdown().await;
        tracing::info!("weir-tray: engine stopped, exiting");
        app.exit(0);
    });
}

/// The quit warning: one notification naming each tool that would break without Weir, with
/// the command that takes it out. Tools that fall back to a direct connection (the PAC) are
/// left out: they keep working.
async fn warn_pointed_tools(handle: &EngineHandle) {
    let h = handle.clone();
    let Ok(tools) = tauri::async_runtime::spawn_blocking(move || h.pointed_tools()).await else {
        return;
    };
    let lines: Vec<String> = tools
        .iter()
        .filter(|t| !t.falls_back_direct)
        .map(|t| format!("{} (undo: {})", t.what, t.undo))
        .collect();
    if lines.is_empty() {
        return;
    }
    let notice = crate::notify::Notice {
        key: "Weir".into(),
        summary: "These tools still point at Weir".into(),
        body: lines.join("\n"),
        level: crate::notify::Level::Info,
    };
    // Sent before the engine stops (and waited for): the app exits right after.
    let _ = tauri::async_runtime::spawn_blocking(move || crate::notify::send(&notice)).await;
}

/// **Restart engine**: a config file that does not validate is refused and this engine keeps
/// running; otherwise the engine drains and the app starts again with the same arguments, so
/// every setting (listen address, upstreams) is read afresh.
pub fn restart<R: Runtime>(app: &AppHandle<R>) -> Result<(), String> {
    let engine = app.state::<Engine>();
    if let Err(e) = engine.handle.restart_options() {
        return Err(format!("Weir was not restarted: {e}"));
    }
    if engine.quitting.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    let handle = engine.handle.clone();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        handle.shutdown().await;
        tracing::info!("weir-tray: engine stopped, restarting");
        app.restart();
    });
    Ok(())
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

    fn parse(v: &[&str]) -> Result<TrayArgs, clap::Error> {
        TrayArgs::parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_the_serve_options_both_spellings() {
        let a = parse(&[
            "--config",
            "/c.toml",
            "--listen=127.0.0.1:0",
            "--data-dir=/d",
            "-psn_0_12345",
        ])
        .unwrap();
        assert_eq!(a.launch.config, Some(PathBuf::from("/c.toml")));
        assert_eq!(a.launch.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(a.launch.data_dir, Some(PathBuf::from("/d")));
        assert!(!a.dashboard);
        assert!(parse(&[crate::dashboard::FLAG]).unwrap().dashboard);
        assert_eq!(parse(&[]).unwrap(), TrayArgs::default());
    }

    #[test]
    fn rejects_bad_arguments_like_weir_serve() {
        let bad = parse(&["--listen", "nope"]).unwrap_err();
        assert_eq!(bad.kind(), clap::error::ErrorKind::ValueValidation);
        assert_eq!(bad.exit_code(), 2);
        assert!(parse(&["--config"]).is_err());
        let unknown = parse(&["--frobnicate"]).unwrap_err();
        assert_eq!(unknown.kind(), clap::error::ErrorKind::UnknownArgument);
        assert_eq!(parse(&["--help"]).unwrap_err().exit_code(), 0);
    }

    #[test]
    fn resolve_refuses_a_missing_file_and_non_loopback() {
        let missing = weir::config::LaunchArgs {
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
        let wide = weir::config::LaunchArgs {
            config: Some(file.clone()),
            listen: Some("0.0.0.0:9".parse().unwrap()),
            data_dir: Some(dir.path().into()),
        };
        assert!(matches!(resolve(&wide), Err(TrayError::NotLoopback(_))));
        let ok = weir::config::LaunchArgs {
            config: Some(file),
            listen: None,
            data_dir: Some(dir.path().join("d")),
        };
        let weir::config::Launch {
            settings, data_dir, ..
        } = resolve(&ok).unwrap();
        assert_eq!(settings.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(data_dir, dir.path().join("d"));
    }
}
