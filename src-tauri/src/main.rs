//! The `weir-tray` binary: parse the command line, then hand over to [`weir_tray::run_app`].

// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| "weir=info,weir_tray=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = match weir_tray::TrayArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            // Usage errors exit 2 like `weir serve`; --help and --version exit 0.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if args.dashboard {
        return match weir_tray::window::run_dashboard(
            tauri::Builder::default(),
            weir_tray::context(),
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir-tray --dashboard: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // Before GTK (and any thread besides this one) starts.
    let dashboard_gl = weir_tray::dashboard::keep_gl_out_of_the_tray();
    let options = match weir_tray::AppOptions::desktop(&args) {
        Ok(o) => weir_tray::AppOptions { dashboard_gl, ..o },
        Err(e) => {
            eprintln!("weir-tray: {e}");
            return ExitCode::from(2);
        }
    };
    match weir_tray::run_app(tauri::Builder::default(), weir_tray::context(), options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-tray: {e}");
            ExitCode::FAILURE
        }
    }
}
