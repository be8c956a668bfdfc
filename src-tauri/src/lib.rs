//! # weir-tray
//!
//! A thin Tauri v2 shell over the `weir` engine: one in-process engine, a tray icon whose shape
//! and menu follow its state, notifications for changes worth an interruption, and a window
//! showing the engine's own dashboard.
//!
//! # Layout
//! - [`engine_task`]: command line, config/data-dir resolution (as `weir serve`), start, quit.
//! - [`tray_state`]: pure snapshot + events → [`tray_state::TrayView`].
//! - [`menu`]: typed menu IDs and the live menu; [`icons`]: one icon per state.
//! - [`tray`]: the tray icon and its refresh loop; [`actions`]: what menu clicks do.
//! - [`notify`]: which events notify, and the per-upstream rate limiter.
//! - [`window`]: the dashboard window; [`commands`]: the window's Tauri commands.

pub mod actions;
pub mod commands;
pub mod engine_task;
pub mod error;
pub mod icons;
pub mod menu;
pub mod notify;
pub mod tray;
pub mod tray_state;
pub mod window;

pub use engine_task::{Engine, LaunchArgs};
pub use error::TrayError;

use std::path::PathBuf;
use tauri::{App, Builder, Context, Manager, RunEvent, Runtime};
use weir::config::Settings;

/// What [`build_app`] starts.
#[derive(Debug, Clone)]
pub struct AppOptions {
    pub settings: Settings,
    pub data_dir: PathBuf,
    /// Where the dashboard's settings panel saves (the `--config` file, else the OS default).
    pub config_file: Option<PathBuf>,
    /// Tray icon, notifications, single instance, autostart, signal handling. Off for tests
    /// with the mock runtime, which has no tray and no session bus.
    pub desktop: bool,
}

impl AppOptions {
    /// The real app's options from its command line (see [`LaunchArgs`]).
    pub fn desktop(args: &LaunchArgs) -> Result<AppOptions, TrayError> {
        let weir::config::Launch {
            settings,
            data_dir,
            config_file,
        } = engine_task::resolve(args)?;
        Ok(AppOptions {
            settings,
            data_dir,
            config_file,
            desktop: true,
        })
    }

    /// Engine and commands only.
    pub fn headless(settings: Settings, data_dir: PathBuf) -> AppOptions {
        AppOptions {
            settings,
            data_dir,
            config_file: None,
            desktop: false,
        }
    }
}

/// The app's embedded configuration (tauri.conf.json, capabilities, icons).
pub fn context<R: Runtime>() -> Context<R> {
    tauri::generate_context!()
}

/// Builds the app on any runtime (`tauri::Builder::default()` for real,
/// `tauri::test::mock_builder()` in tests). The engine is running, its listener bound and
/// (desktop) the tray shown once this returns.
pub fn build_app<R: Runtime>(
    builder: Builder<R>,
    context: Context<R>,
    options: AppOptions,
) -> Result<App<R>, TrayError> {
    let AppOptions {
        settings,
        data_dir,
        config_file,
        desktop,
    } = options;
    let mut builder = builder;
    if desktop {
        // First, so a second launch hands over before starting anything else.
        builder = builder
            .plugin(tauri_plugin_single_instance::init(|app, _args, _cwd| {
                if let Err(e) = window::show(app, window::View::Overview) {
                    tracing::warn!("weir-tray: second launch: cannot show the dashboard: {e}");
                }
            }))
            .plugin(tauri_plugin_autostart::Builder::new().build());
    }
    let app = builder
        .plugin(tauri_plugin_clipboard_manager::init())
        .plugin(tauri_plugin_opener::init())
        .invoke_handler(tauri::generate_handler![
            commands::get_status,
            commands::set_paused,
            commands::get_dashboard_base
        ])
        .build(context)?;
    // After `build` (plugins are initialised, so a second instance has already handed over and
    // exited) and not in `setup`, which only runs with the event loop: tests never run it.
    app.manage(Engine::start(settings, data_dir, config_file, desktop)?);
    if desktop {
        tray::install(app.handle())?;
        engine_task::quit_on_signals(app.handle());
    }
    Ok(app)
}

/// Builds and runs the app until Quit (or a signal). Closing the window only hides it.
pub fn run_app<R: Runtime>(
    builder: Builder<R>,
    context: Context<R>,
    options: AppOptions,
) -> Result<(), TrayError> {
    let app = build_app(builder, context, options)?;
    app.run(|app, event| match event {
        // Exit with no code = the last window went away; a tray app keeps running. Quit
        // calls `exit(0)`, which has a code and goes through.
        RunEvent::ExitRequested {
            code: None, api, ..
        } => api.prevent_exit(),
        RunEvent::Exit => {
            // Any way out (logout, a plugin) still drains the proxy; harmless after Quit.
            let engine = app.state::<Engine>().handle.clone();
            tauri::async_runtime::block_on(engine.shutdown());
        }
        _ => {}
    });
    Ok(())
}
