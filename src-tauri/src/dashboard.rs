//! The tray's side of the dashboard window: a child process (`weir-tray --dashboard`, see
//! [`window::run_dashboard`]) started when the dashboard is opened and gone when it is closed.
//!
//! Why a process and not a window of the tray: WebKitGTK keeps its network process (and the
//! tray keeps WebKit's UI-side state) for as long as the process that opened a webview lives;
//! Tauri keeps the web context alive on Linux on purpose. A child process hands all of it back
//! when the window closes, and the tray itself never loads GL or WebKit state at all.
//! The page talks to the engine over HTTP, so the child needs no engine and no IPC.

use crate::error::TrayError;
use crate::window::{self, Request, View};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use tauri::{AppHandle, Manager, Runtime};

/// The command-line flag that makes `weir-tray` the dashboard process.
pub const FLAG: &str = "--dashboard";

/// `GDK_GL=disable` for the tray process, unless the user chose a value: GDK otherwise loads
/// Mesa (libGL, swrast, ~45 MB of LLVM on a machine without a GPU) at start-up to pick visuals,
/// and the tray draws nothing with GL. Returns what the dashboard process should get back
/// (WebKit renders with GL). Call first thing in `main`, before any thread or GTK starts.
pub fn keep_gl_out_of_the_tray() -> GlEnv {
    #[cfg(target_os = "linux")]
    if std::env::var_os("GDK_GL").is_none() {
        std::env::set_var("GDK_GL", "disable");
        return GlEnv::Restore(None);
    }
    GlEnv::Inherit
}

/// What the dashboard process's `GDK_GL` should be.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GlEnv {
    /// The tray left it alone: pass it on.
    #[default]
    Inherit,
    /// The tray changed it: give the child this value (`None`: unset).
    Restore(Option<OsString>),
}

struct Open {
    pid: u32,
    stdin: ChildStdin,
}

/// Starts the dashboard process on demand and forwards requests to the running one.
pub struct Dashboard {
    exe: PathBuf,
    gl: GlEnv,
    open: Arc<Mutex<Option<Open>>>,
}

impl Dashboard {
    pub fn new(exe: PathBuf, gl: GlEnv) -> Dashboard {
        Dashboard {
            exe,
            gl,
            open: Arc::new(Mutex::new(None)),
        }
    }

    /// The running dashboard process, if any.
    pub fn running(&self) -> Option<u32> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.as_ref().map(|o| o.pid)
    }

    /// Shows `request` in the running dashboard process, or starts one for it.
    pub fn show(&self, request: &Request) -> Result<(), TrayError> {
        let line = request.to_line();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = open.as_mut() {
            match o
                .stdin
                .write_all(line.as_bytes())
                .and_then(|_| o.stdin.flush())
            {
                Ok(()) => return Ok(()),
                // It is exiting (its window was just closed): start another.
                Err(e) => tracing::debug!("weir-tray: dashboard process {} gone: {e}", o.pid),
            }
        }
        *open = None;
        let mut command = Command::new(&self.exe);
        command.arg(FLAG).stdin(Stdio::piped());
        if let GlEnv::Restore(value) = &self.gl {
            match value {
                Some(v) => command.env("GDK_GL", v),
                None => command.env_remove("GDK_GL"),
            };
        }
        let mut child = command.spawn().map_err(TrayError::Dashboard)?;
        let pid = child.id();
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| TrayError::Dashboard(std::io::ErrorKind::BrokenPipe.into()))?;
        stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.flush())
            .map_err(TrayError::Dashboard)?;
        *open = Some(Open { pid, stdin });
        // Reap it when it exits and forget it, so the next click starts a fresh one.
        let slot = self.open.clone();
        std::thread::spawn(move || {
            match child.wait() {
                Ok(status) => tracing::debug!("weir-tray: dashboard process {pid} ended: {status}"),
                Err(e) => tracing::warn!("weir-tray: dashboard process {pid}: {e}"),
            }
            let mut open = slot.lock().unwrap_or_else(|p| p.into_inner());
            if open.as_ref().is_some_and(|o| o.pid == pid) {
                *open = None;
            }
        });
        tracing::info!("weir-tray: dashboard process {pid} started");
        Ok(())
    }
}

/// Shows the dashboard at `view`: in the user's browser if they chose that
/// ([`crate::browser`]), else in the dashboard window (starting its process if needed).
pub fn show<R: Runtime>(app: &AppHandle<R>, view: View) -> Result<(), TrayError> {
    let engine = app.state::<crate::Engine>();
    let url = window::dashboard_url(&engine, view)?;
    if crate::browser::prefers_browser(engine.data_dir()) {
        return open_in_browser(app, engine.data_dir(), &url);
    }
    let dashboard = app.try_state::<Dashboard>().ok_or(TrayError::NoDashboard)?;
    dashboard.show(&Request { view, url })
}

/// Opens `url` in the default browser through a launcher page only this user can read (the
/// secret stays off every command line, see [`crate::browser`]).
fn open_in_browser<R: Runtime>(
    app: &AppHandle<R>,
    data_dir: &std::path::Path,
    url: &tauri::Url,
) -> Result<(), TrayError> {
    use tauri_plugin_opener::OpenerExt as _;
    let launcher = crate::browser::write_launcher(data_dir, url).map_err(TrayError::Launcher)?;
    app.opener()
        .open_path(launcher.to_string_lossy(), None::<&str>)
        .map_err(|e| TrayError::Open {
            url: launcher.display().to_string(),
            message: e.to_string(),
        })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use tauri::Url;

    /// A stand-in for `weir-tray --dashboard`: logs its arguments, `GDK_GL` and every request,
    /// and exits after a queue request (as if its window had been closed).
    fn fake_dashboard(dir: &std::path::Path) -> (PathBuf, PathBuf) {
        let log = dir.join("log");
        let exe = dir.join("fake-dashboard");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho \"start $* gl=${{GDK_GL-unset}}\" >> {log}\n\
                 while read -r line; do echo \"$line\" >> {log}; \
                 [ \"${{line%% *}}\" = queue ] && exit 0; done\n",
                log = log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        (exe, log)
    }

    fn request(view: View) -> Request {
        Request {
            view,
            url: Url::parse("http://127.0.0.1:9/_weir/#secret=s").unwrap(),
        }
    }

    /// Polls (at most `tries` × 20 ms) until `cond` holds: a bound, not a timing assertion.
    fn eventually(tries: u32, cond: impl Fn() -> bool) -> bool {
        for _ in 0..tries {
            if cond() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        cond()
    }

    #[test]
    fn one_process_per_open_window_requests_on_its_stdin_a_new_one_after_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (exe, log) = fake_dashboard(dir.path());
        let d = Dashboard::new(exe, GlEnv::Restore(Some("x".into())));
        assert_eq!(d.running(), None, "nothing runs until someone opens it");
        d.show(&request(View::Overview)).unwrap();
        let first = d.running().expect("started");
        d.show(&request(View::Queue)).unwrap();
        // The fake exits after a queue request: the slot is freed once it is reaped.
        assert!(eventually(250, || d.running().is_none()), "reaped");
        d.show(&request(View::Overview)).unwrap();
        let second = d.running().expect("started again");
        assert_ne!(first, second);
        let line = request(View::Overview).to_line();
        let expected = format!(
            "start --dashboard gl=x\n{line}{}start --dashboard gl=x\n{line}",
            request(View::Queue).to_line()
        );
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(eventually(250, || read() == expected), "{:?}", read());
    }
}
