//! The tray icon and its refresh loop: on every engine event and every [`TICK`], rebuild the
//! [`TrayView`] from a fresh snapshot and push what changed to the icon, tooltip and menu;
//! turn events into (rate-limited) notifications.

use crate::actions;
use crate::engine_task::Engine;
use crate::error::TrayError;
use crate::icons;
use crate::menu::{self, MenuId, TrayMenu};
use crate::notify::{self, Limiter};
use crate::tray_state::{view_of, Recent, TrayView};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tauri::tray::{TrayIcon, TrayIconBuilder};
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_autostart::ManagerExt as _;
use tokio::sync::broadcast::error::RecvError;
use weir::EngineHandle;

/// How often the tray re-reads the snapshot when no event arrives (counters, "since" times).
pub const TICK: Duration = Duration::from_secs(2);

/// The tray's ID; on Linux the item is exported at `/org/ayatana/NotificationItem/weir`.
pub const TRAY_ID: &str = "weir";

/// "10:02" in local time.
fn local_clock(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Local>::from(t)
        .format("%H:%M")
        .to_string()
}

async fn current_view(engine: &EngineHandle, recent: &Recent) -> TrayView {
    view_of(engine, recent, &local_clock).await
}

/// Creates the tray icon with its menu and starts the refresh loop.
pub fn install<R: Runtime>(app: &AppHandle<R>) -> Result<(), TrayError> {
    let engine = app.state::<Engine>().handle.clone();
    // Called outside the async runtime (from `build_app` on the main thread).
    let view = tauri::async_runtime::block_on(current_view(&engine, &Recent::default()));
    let autostart_on = app.autolaunch().is_enabled().unwrap_or(false);
    let in_browser_on = crate::browser::prefers_browser(app.state::<Engine>().data_dir());
    let menu = TrayMenu::build(app, &view, autostart_on, in_browser_on)?;
    let shown = Arc::new(Mutex::new(view.clone()));
    let for_clicks = shown.clone();
    let autostart_item = menu.autostart_item();
    let in_browser_item = menu.in_browser_item();
    let network_items = menu.network_items();
    let tray = TrayIconBuilder::with_id(TRAY_ID)
        .icon(icons::image(view.overall)?)
        .tooltip(&view.tooltip)
        .menu(&menu.menu)
        .show_menu_on_left_click(true)
        .on_menu_event(move |app, event| {
            let Some(id) = MenuId::from_id(event.id().as_ref()) else {
                tracing::debug!("weir-tray: ignoring menu event {:?}", event.id());
                return;
            };
            let shown = for_clicks.lock().ok().map(|v| v.clone());
            actions::on_click(app, id, shown.as_ref(), &autostart_item, &in_browser_item);
            // The marks follow the engine's answer (clicking the checked choice unchecks it).
            if menu::network_choice(id).is_some() {
                let now = app.state::<Engine>().handle.network().status().state.forced;
                if let Err(e) = menu::mark_network(&network_items, now) {
                    tracing::warn!("weir-tray: cannot mark the network choice: {e}");
                }
            }
        })
        .build(app)?;
    tauri::async_runtime::spawn(refresh_loop(engine, tray, menu, shown));
    Ok(())
}

async fn refresh_loop<R: Runtime>(
    engine: EngineHandle,
    tray: TrayIcon<R>,
    menu: TrayMenu<R>,
    shown: Arc<Mutex<TrayView>>,
) {
    let mut events = engine.subscribe();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut recent = Recent::default();
    let mut limiter = Limiter::new(notify::WINDOW);
    let mut last: Option<TrayView> = shown.lock().ok().map(|v| v.clone());
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    recent.record(&event);
                    if let Some(n) = notify::notice_for(&event).and_then(|n| limiter.offer(n, tokio::time::Instant::now())) {
                        actions::tell(n);
                    }
                }
                // Missed some: the snapshot below still has the current state.
                Err(RecvError::Lagged(n)) => tracing::debug!("weir-tray: skipped {n} events"),
                Err(RecvError::Closed) => break,
            },
            _ = tick.tick() => {
                for n in limiter.due(tokio::time::Instant::now()) {
                    actions::tell(n);
                }
            }
        }
        let view = current_view(&engine, &recent).await;
        if last.as_ref() == Some(&view) {
            continue;
        }
        if let Err(e) = apply(&tray, &menu, last.as_ref(), &view) {
            tracing::warn!("weir-tray: cannot update the tray: {e}");
        }
        if let Ok(mut s) = shown.lock() {
            *s = view.clone();
        }
        last = Some(view);
    }
    tracing::info!("weir-tray: engine event stream ended; tray no longer updates");
}

fn apply<R: Runtime>(
    tray: &TrayIcon<R>,
    menu: &TrayMenu<R>,
    old: Option<&TrayView>,
    new: &TrayView,
) -> tauri::Result<()> {
    if old.is_none_or(|o| o.overall != new.overall) {
        tray.set_icon(Some(icons::image(new.overall)?))?;
    }
    if old.is_none_or(|o| o.tooltip != new.tooltip) {
        tray.set_tooltip(Some(&new.tooltip))?;
    }
    menu.apply(old, new)
}
