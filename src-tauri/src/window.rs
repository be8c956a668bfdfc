//! The dashboard window: Weir's own page (`http://127.0.0.1:PORT/_weir/#secret=…`) in a
//! webview, created on first use from the hidden `main` window in tauri.conf.json (so no
//! WebKit process runs until someone looks), hidden instead of closed, and kept on Weir's
//! origin: any other link opens in the default browser.

use crate::engine_task::Engine;
use crate::error::TrayError;
use tauri::{
    AppHandle, Manager, Runtime, Url, WebviewUrl, WebviewWindow, WebviewWindowBuilder, WindowEvent,
};
use tauri_plugin_opener::OpenerExt;

/// Label of the dashboard window (tauri.conf.json, capabilities/dashboard.json).
pub const LABEL: &str = "main";

/// Which part of the dashboard to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Overview,
    /// The create queue (fragment `view=queue`).
    Queue,
}

/// The URL for a view: the secret travels in the fragment, which is never sent to a server.
pub fn dashboard_url(engine: &Engine, view: View) -> Result<Url, TrayError> {
    let mut text = engine.handle.dashboard_url_with_secret();
    if view == View::Queue {
        text.push_str("&view=queue");
    }
    Url::parse(&text).map_err(|e| TrayError::Open {
        url: engine.handle.dashboard_url(),
        message: e.to_string(),
    })
}

/// Shows (creating if needed) the dashboard window at `view` and focuses it.
pub fn show<R: Runtime>(app: &AppHandle<R>, view: View) -> Result<(), TrayError> {
    let engine = app.state::<Engine>();
    let url = dashboard_url(&engine, view)?;
    let window = match app.get_webview_window(LABEL) {
        Some(w) => {
            if view != View::Overview || w.url().map_or(true, |u| u.origin() != url.origin()) {
                w.navigate(url)?;
            }
            w
        }
        None => create(app, url)?,
    };
    window.show()?;
    window.unminimize()?;
    window.set_focus()?;
    Ok(())
}

fn create<R: Runtime>(app: &AppHandle<R>, url: Url) -> Result<WebviewWindow<R>, TrayError> {
    let mut config = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == LABEL)
        .cloned()
        .ok_or(TrayError::NoWindowConfig(LABEL))?;
    config.url = WebviewUrl::External(url.clone());
    let origin = url.origin();
    let opener = app.clone();
    let window = WebviewWindowBuilder::from_config(app, &config)?
        .on_navigation(move |to| {
            if to.origin() == origin {
                return true;
            }
            if matches!(to.scheme(), "http" | "https") {
                if let Err(e) = opener.opener().open_url(to.as_str(), None::<&str>) {
                    tracing::warn!("weir-tray: cannot open {to} in the browser: {e}");
                }
            }
            false
        })
        .build()?;
    let hide = window.clone();
    window.on_window_event(move |event| {
        if let WindowEvent::CloseRequested { api, .. } = event {
            // A tray app lives on after its window: hide, keep the page (and its state).
            api.prevent_close();
            if let Err(e) = hide.hide() {
                tracing::warn!("weir-tray: cannot hide the dashboard window: {e}");
            }
        }
    });
    Ok(window)
}
