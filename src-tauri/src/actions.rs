//! What each tray menu item does when clicked. Failures are logged and, where the user asked
//! for something, reported by notification: a tray app has no other place to say so.

use crate::dashboard;
use crate::engine_task::{self, Engine};
use crate::menu::MenuId;
use crate::notify::{self, Notice};
use crate::tray_state::TrayView;
use crate::window::View;
use tauri::menu::CheckMenuItem;
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_autostart::ManagerExt as _;
use tauri_plugin_clipboard_manager::ClipboardExt as _;
use tauri_plugin_opener::OpenerExt as _;

/// Handles a click. `shown` is what the menu shows right now (the GitHub line's link, the
/// recent sessions' pages); `autostart_item` is re-checked from the real login-item state
/// after a toggle.
pub fn on_click<R: Runtime>(
    app: &AppHandle<R>,
    id: MenuId,
    shown: Option<&TrayView>,
    autostart_item: &CheckMenuItem<R>,
    in_browser_item: &CheckMenuItem<R>,
) {
    let github_url = shown.and_then(|v| v.github_url.clone());
    let result = match id {
        MenuId::Overall | MenuId::Upstream(_) | MenuId::OpenDashboard | MenuId::Team => {
            dashboard::show(app, View::Overview).map_err(|e| e.to_string())
        }
        MenuId::Queue => dashboard::show(app, View::Queue).map_err(|e| e.to_string()),
        MenuId::Sessions => dashboard::show(app, View::Sessions).map_err(|e| e.to_string()),
        MenuId::Handoffs => dashboard::show(app, View::Handoffs).map_err(|e| e.to_string()),
        // The offer's own view: the whole statement and the requesting tool, then Confirm.
        MenuId::HandoffReview(id) => {
            dashboard::show(app, View::Offer(id)).map_err(|e| e.to_string())
        }
        MenuId::Setup => dashboard::show(app, View::Setup).map_err(|e| e.to_string()),
        MenuId::Github => open_github(app, github_url),
        MenuId::RecentSession(i) => match shown.and_then(|v| v.recent_sessions.get(i)) {
            Some(line) => open_url(app, &line.url),
            // The submenu changed between the click and now: show them all instead.
            None => dashboard::show(app, View::Sessions).map_err(|e| e.to_string()),
        },
        MenuId::TogglePause => {
            let engine = app.state::<Engine>();
            engine.handle.set_paused(!engine.handle.is_paused());
            Ok(())
        }
        MenuId::ToggleCacheOnly => {
            use weir::mode::{ChosenBy, Mode};
            let h = &app.state::<Engine>().handle;
            let to = if h.mode().chosen == Mode::CacheOnly {
                Mode::Automatic
            } else {
                Mode::CacheOnly
            };
            h.set_mode(to, ChosenBy::Tray);
            Ok(())
        }
        MenuId::NetworkAuto | MenuId::NetworkMetered | MenuId::NetworkNotMetered => {
            choose_network(app, id)
        }
        MenuId::Restart => engine_task::restart(app),
        MenuId::CopyProxy => copy_proxy_settings(app),
        MenuId::Autostart => toggle_autostart(app, autostart_item),
        MenuId::DashboardInBrowser => toggle_in_browser(app, in_browser_item),
        MenuId::Quit => {
            engine_task::quit(app);
            Ok(())
        }
    };
    if let Err(message) = result {
        tracing::warn!("weir-tray: {id:?}: {message}");
        tell(Notice {
            key: "Weir".into(),
            summary: "Weir could not do that".into(),
            body: message,
            level: crate::notify::Level::Info,
        });
    }
}

/// Sets (or clears) the metered override from the Network submenu. The choice applies at once;
/// if it cannot be kept for the next start, the developer is told.
fn choose_network<R: Runtime>(app: &AppHandle<R>, id: MenuId) -> Result<(), String> {
    let Some(forced) = crate::menu::network_choice(id) else {
        return Ok(());
    };
    let now = app
        .state::<Engine>()
        .handle
        .set_network_metered(forced, weir::mode::ChosenBy::Tray);
    match now.persist_error {
        Some(e) => Err(format!(
            "Network: {} now, but the choice cannot be kept for the next start: {e}",
            now.label
        )),
        None => Ok(()),
    }
}

fn open_github<R: Runtime>(app: &AppHandle<R>, url: Option<String>) -> Result<(), String> {
    let url = url.unwrap_or_else(|| "https://www.githubstatus.com".to_string());
    open_url(app, &url)
}

/// Opens an https page in the default browser (the engine only hands out https links).
fn open_url<R: Runtime>(app: &AppHandle<R>, url: &str) -> Result<(), String> {
    if !url.starts_with("https://") {
        return Err(format!("not opening {url}: only https pages are opened"));
    }
    app.opener()
        .open_url(url, None::<&str>)
        .map_err(|e| format!("cannot open {url}: {e}"))
}

fn copy_proxy_settings<R: Runtime>(app: &AppHandle<R>) -> Result<(), String> {
    let text = app.state::<Engine>().shell_proxy_settings();
    match app.clipboard().write_text(text.clone()) {
        Ok(()) => {
            tell(Notice {
                key: "Weir".into(),
                summary: "Proxy settings copied".into(),
                body: text,
                level: crate::notify::Level::Info,
            });
            Ok(())
        }
        Err(e) => {
            // No clipboard (e.g. a bare X server): the terminal that started us still works.
            println!("{text}");
            Err(format!("no clipboard ({e}); paste this instead:\n{text}"))
        }
    }
}

fn toggle_autostart<R: Runtime>(app: &AppHandle<R>, item: &CheckMenuItem<R>) -> Result<(), String> {
    let autostart = app.autolaunch();
    let was_on = autostart.is_enabled().unwrap_or(false);
    let result = if was_on {
        autostart.disable()
    } else {
        autostart.enable()
    };
    // The check mark flips on click whatever happened; show the real state.
    let now_on = autostart.is_enabled().unwrap_or(was_on);
    if let Err(e) = item.set_checked(now_on) {
        tracing::warn!("weir-tray: cannot update the Start at login check mark: {e}");
    }
    result.map_err(|e| format!("cannot change Start at login: {e}"))
}

/// Flips "Open the dashboard in the browser" (kept in the data dir) and sets the check mark to
/// what is now recorded.
fn toggle_in_browser<R: Runtime>(
    app: &AppHandle<R>,
    item: &CheckMenuItem<R>,
) -> Result<(), String> {
    let engine = app.state::<Engine>();
    let dir = engine.data_dir();
    let result = crate::browser::set_prefers_browser(dir, !crate::browser::prefers_browser(dir));
    if let Err(e) = item.set_checked(crate::browser::prefers_browser(dir)) {
        tracing::warn!("weir-tray: cannot update the browser check mark: {e}");
    }
    result.map_err(|e| {
        format!(
            "cannot record where the dashboard opens ({}): {e}",
            dir.display()
        )
    })
}

/// Shows a notice off the calling thread (a D-Bus round trip must not stall the menu).
pub fn tell(notice: Notice) {
    tauri::async_runtime::spawn_blocking(move || {
        if let Err(e) = notify::send(&notice) {
            tracing::warn!(
                "weir-tray: notification `{}` not shown: {e}",
                notice.summary
            );
        }
    });
}
