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
//! - [`dashboard`]: starts the dashboard window's own process on demand; [`window`]: that
//!   process (`weir-tray --dashboard`) and its window; [`commands`]: the window's Tauri commands.
//! - [`browser`]: the dashboard in the user's own browser instead (a menu choice).
//! - [`webkit_memory`]: the WebKit settings the dashboard process uses to hold less memory.
//! - [`resident`]: hands back the pages of the WebKit libraries the tray process never runs.

pub mod actions;
pub mod browser;
pub mod commands;
pub mod dashboard;
pub mod engine_task;
pub mod error;
pub mod icons;
pub mod menu;
pub mod notify;
pub mod resident;
pub mod tray;
pub mod tray_state;
pub mod webkit_memory;
pub mod window;

pub use engine_task::{Engine, TrayArgs};
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
    /// Tray icon, notifications, single instance, autostart, signal handling, the dashboard
    /// process. Off for tests with the mock runtime, which has no tray and no session bus.
    pub desktop: bool,
    /// `GDK_GL` for the dashboard process (see [`dashboard::keep_gl_out_of_the_tray`]).
    pub dashboard_gl: dashboard::GlEnv,
}

impl AppOptions {
    /// The real app's options from its command line (see [`TrayArgs`]).
    pub fn desktop(args: &TrayArgs) -> Result<AppOptions, TrayError> {
        let weir::config::Launch {
            settings,
            data_dir,
            config_file,
        } = engine_task::resolve(&args.launch)?;
        Ok(AppOptions {
            settings,
            data_dir,
            config_file,
            desktop: true,
            dashboard_gl: dashboard::GlEnv::Inherit,
        })
    }

    /// Engine and commands only.
    pub fn headless(settings: Settings, data_dir: PathBuf) -> AppOptions {
        AppOptions {
            settings,
            data_dir,
            config_file: None,
            desktop: false,
            dashboard_gl: dashboard::GlEnv::Inherit,
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
        dashboard_gl,
    } = options;
    let mut builder = builder;
    if desktop {
        // First, so a second launch hands over before starting anything else.
        builder = builder
            .plugin(tauri_plugin_single_instance::init(|app, _args, _cwd| {
                if let Err(e) = dashboard::show(app, window::View::Overview) {
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
        let exe = std::env::current_exe().map_err(TrayError::Dashboard)?;
        app.manage(dashboard::Dashboard::new(exe, dashboard_gl));
        tray::install(app.handle())?;
        engine_task::quit_on_signals(app.handle());
        // The first start opens the Set up view (the page marks it shown, so once only).
        if app.state::<Engine>().first_run() {
            if let Err(e) = dashboard::show(app.handle(), window::View::Setup) {
                tracing::warn!("weir-tray: cannot open the Set up view: {e}");
            }
        }
    }
    Ok(app)
}

/// Builds and runs the app until Quit (or a signal). The dashboard window is another process
/// ([`dashboard`]); the tray app has no window of its own.
pub fn run_app<R: Runtime>(
    builder: Builder<R>,
    context: Context<R>,
    options: AppOptions,
) -> Result<(), TrayError> {
    let desktop = options.desktop;
    let app = build_app(builder, context, options)?;
    app.run(move |app, event| match event {
        // The event loop is up and the tray shown: what loading WebKit left resident in this
        // process can go (WebKit only runs in the dashboard's process).
        RunEvent::Ready if desktop => resident::after_start(),
        // Exit with no code = the last window went away (the tray has none, but a plugin
        // may make one); a tray app keeps running. Quit calls `exit(0)`, which has a code.
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
