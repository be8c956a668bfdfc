//! The dashboard window: Weir's own page (`http://127.0.0.1:PORT/_weir/#secret=…`) in a
//! webview, kept on Weir's origin (any other link opens in the default browser).
//!
//! It lives in its own process (see [`crate::dashboard`]): the tray starts `weir-tray
//! --dashboard` when someone opens the dashboard and tells it what to show over its stdin; the
//! window is built from the `main` entry in tauri.conf.json (declared `"create": false`), and
//! closing it ends that process, WebKit's web and network processes with it. The page keeps
//! nothing worth saving: it reads everything from the engine, and the secret comes with the URL.

use crate::engine_task::Engine;
use crate::error::TrayError;
use crate::webkit_memory::{self, Tweak};
use tauri::{AppHandle, Builder, Context, Runtime, Url, WebviewUrl, WebviewWindow};
use tauri::{Manager, WebviewWindowBuilder};
use tauri_plugin_opener::OpenerExt;

/// Label of the dashboard window (tauri.conf.json, capabilities/dashboard.json).
pub const LABEL: &str = "main";

/// Which part of the dashboard to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Overview,
    /// The create queue (fragment `view=queue`).
    Queue,
    /// The agent sessions (fragment `view=sessions`).
    Sessions,
    /// The local-agent offers (fragment `view=handoffs`).
    Handoffs,
    /// One offer's review view (fragment `view=handoffs&offer=<id>`).
    Offer(i64),
    /// The Set up view (fragment `view=setup`): the tray's "Set up…" and the first start.
    Setup,
}

impl View {
    /// The word for a view in the tray → dashboard protocol (see [`Request`]).
    pub fn word(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Queue => "queue",
            View::Sessions => "sessions",
            // The offer travels in the URL's fragment; the word only names the part.
            View::Handoffs | View::Offer(_) => "handoffs",
            View::Setup => "setup",
        }
    }

    fn from_word(word: &str) -> Option<View> {
        [
            View::Overview,
            View::Queue,
            View::Sessions,
            View::Handoffs,
            View::Setup,
        ]
        .into_iter()
        .find(|v| v.word() == word)
    }
}

/// One line the tray writes to the dashboard process: `<view> <url>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub view: View,
    pub url: Url,
}

impl Request {
    pub fn to_line(&self) -> String {
        format!("{} {}\n", self.view.word(), self.url)
    }

    pub fn parse(line: &str) -> Option<Request> {
        let (view, url) = line.trim().split_once(' ')?;
        Some(Request {
            view: View::from_word(view)?,
            url: Url::parse(url).ok()?,
        })
    }
}

/// The URL for a view: the secret travels in the fragment, which is never sent to a server.
pub fn dashboard_url(engine: &Engine, view: View) -> Result<Url, TrayError> {
    let mut text = engine.handle.dashboard_url_with_secret();
    text.push_str(&fragment(view));
    Url::parse(&text).map_err(|e| TrayError::Open {
        url: engine.handle.dashboard_url(),
        message: e.to_string(),
    })
}

/// What a view adds to the dashboard URL's fragment (after `#secret=…`).
fn fragment(view: View) -> String {
    match view {
        View::Overview => String::new(),
        View::Offer(id) => format!("&view={}&offer={id}", view.word()),
        other => format!("&view={}", other.word()),
    }
}

#[test]
fn an_offer_opens_its_own_review_view() {
    assert_eq!(fragment(View::Overview), "");
    assert_eq!(fragment(View::Queue), "&view=queue");
    assert_eq!(fragment(View::Handoffs), "&view=handoffs");
    assert_eq!(fragment(View::Offer(42)), "&view=handoffs&offer=42");
}

/// The dashboard process: no engine, no tray; shows what each stdin line asks for, exits when
/// its window is closed or its stdin ends (the tray quit).
pub fn run_dashboard<R: Runtime>(
    builder: Builder<R>,
    context: Context<R>,
) -> Result<(), TrayError> {
    // Before GTK starts: the environment WebKit's processes inherit.
    let tweaks = webkit_memory::chosen();
    webkit_memory::apply_env(&tweaks);
    let app = builder.plugin(tauri_plugin_opener::init()).build(context)?;
    #[cfg(target_os = "linux")]
    webkit_memory::apply_process(&tweaks);
    let handle = app.handle().clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            let Some(request) = Request::parse(&line) else {
                tracing::warn!("weir-tray dashboard: ignoring a request that does not parse");
                continue;
            };
            if let Err(e) = show(&handle, request, &tweaks) {
                tracing::warn!("weir-tray dashboard: cannot show the dashboard: {e}");
            }
        }
        handle.exit(0);
    });
    // Default exit handling: closing the (only) window ends the process.
    app.run(|_, _| {});
    Ok(())
}

/// Shows (creating it if it is not open) the dashboard window and focuses it. An open window
/// stays where the user is unless another view was asked for.
fn show<R: Runtime>(
    app: &AppHandle<R>,
    request: Request,
    tweaks: &[Tweak],
) -> Result<(), TrayError> {
    let Request { view, url } = request;
    let window = match app.get_webview_window(LABEL) {
        Some(w) => {
            if view != View::Overview || w.url().map_or(true, |u| u.origin() != url.origin()) {
                w.navigate(url)?;
            }
            w
        }
        None => create(app, url, tweaks)?,
    };
    window.show()?;
    window.unminimize()?;
    window.set_focus()?;
    Ok(())
}

fn create<R: Runtime>(
    app: &AppHandle<R>,
    url: Url,
    tweaks: &[Tweak],
) -> Result<WebviewWindow<R>, TrayError> {
    let mut config = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == LABEL)
        .cloned()
        .ok_or(TrayError::NoWindowConfig(LABEL))?;
    // On Linux the window opens blank, WebKit's settings are changed, and then the page loads
    // (see `load` below), so the first load already runs with them.
    config.url = if cfg!(target_os = "linux") {
        WebviewUrl::External(Url::parse("about:blank").map_err(|e| TrayError::Open {
            url: "about:blank".into(),
            message: e.to_string(),
        })?)
    } else {
        WebviewUrl::External(url.clone())
    };
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
    load(&window, &url, tweaks)?;
    Ok(window)
}

/// Applies `tweaks` to the new window's WebKit view and loads `url` in it (Linux).
#[cfg(target_os = "linux")]
fn load<R: Runtime>(
    window: &WebviewWindow<R>,
    url: &Url,
    tweaks: &[Tweak],
) -> Result<(), TrayError> {
    let (url, tweaks) = (url.to_string(), tweaks.to_vec());
    window.with_webview(move |w| webkit_memory::apply_to_webview(&w.inner(), &tweaks, &url))?;
    Ok(())
}

/// Elsewhere the window was built with its URL and the webview is left as it is.
#[cfg(not(target_os = "linux"))]
fn load<R: Runtime>(_: &WebviewWindow<R>, _: &Url, _: &[Tweak]) -> Result<(), TrayError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_junk_is_refused() {
        for view in [View::Overview, View::Queue] {
            let r = Request {
                view,
                url: Url::parse("http://127.0.0.1:9347/_weir/#secret=abc&view=queue").unwrap(),
            };
            assert_eq!(Request::parse(&r.to_line()), Some(r));
        }
        for junk in [
            "",
            "overview",
            "sideways http://127.0.0.1:1/",
            "queue not a url",
        ] {
            assert_eq!(Request::parse(junk), None, "{junk:?}");
        }
    }
}
