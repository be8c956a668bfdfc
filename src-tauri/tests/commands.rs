//! The shell on Tauri's mock runtime (no display, no D-Bus): a real engine on 127.0.0.1:0 with a
//! temp data dir, and the window's commands invoked through Tauri's IPC path, ACL included.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use tauri::ipc::{CallbackFn, InvokeBody};
use tauri::test::{
    get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY,
};
use tauri::webview::InvokeRequest;
use tauri::{App, Manager, WebviewUrl, WebviewWindow, WebviewWindowBuilder};
use weir_tray::{build_app, AppOptions, Engine};

fn settings() -> weir::config::Settings {
    let toml = "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n[queue]\ncredentials = \"memory\"\n";
    weir::config::parse_str(toml, "test.toml").unwrap()
}

fn app_with(context: tauri::Context<MockRuntime>, data: &tempfile::TempDir) -> App<MockRuntime> {
    build_app(
        mock_builder(),
        context,
        AppOptions::headless(settings(), data.path().join("data")),
    )
    .unwrap()
}

/// A window whose webview data stays in `data` (by default Tauri creates
/// ~/.local/share/<identifier> for it).
fn window(
    app: &App<MockRuntime>,
    label: &str,
    data: &tempfile::TempDir,
) -> WebviewWindow<MockRuntime> {
    WebviewWindowBuilder::new(app, label, WebviewUrl::default())
        .data_directory(data.path().join("webview"))
        .build()
        .unwrap()
}

/// Invokes `cmd` as a page at `origin` would.
fn invoke(
    w: &WebviewWindow<MockRuntime>,
    origin: &str,
    cmd: &str,
    args: Value,
) -> Result<Value, Value> {
    let request = InvokeRequest {
        cmd: cmd.into(),
        callback: CallbackFn(0),
        error: CallbackFn(1),
        url: origin.parse().unwrap(),
        body: InvokeBody::Json(args),
        headers: Default::default(),
        invoke_key: INVOKE_KEY.to_string(),
    };
    get_ipc_response(w, request).map(|b| b.deserialize::<Value>().unwrap())
}

/// The bundled origin on Linux/macOS (`http://tauri.localhost` is Windows/Android only).
const LOCAL: &str = "tauri://localhost";

fn http_get(base: &str, path: &str) -> String {
    let authority = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(authority).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn commands_drive_the_real_engine() {
    let data = tempfile::tempdir().unwrap();
    let app = app_with(mock_context(noop_assets()), &data);
    let w = window(&app, "main", &data);

    let base = invoke(&w, LOCAL, "get_dashboard_base", json!({})).unwrap();
    let base = base.as_str().unwrap().to_string();
    assert!(
        base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"),
        "{base}"
    );
    // The engine is really listening there, and it is the app's engine.
    assert!(http_get(&base, "/_weir/api/health").starts_with("HTTP/1.1 200"));
    assert_eq!(app.state::<Engine>().handle.base_url(), base);
    assert!(
        data.path().join("data").is_dir(),
        "engine created its data dir"
    );

    let status = invoke(&w, LOCAL, "get_status", json!({})).unwrap();
    assert_eq!(status["paused"], json!(false));
    assert_eq!(status["upstreams"][0]["name"], json!("copilot-api"));
    assert_eq!(status["dashboard"], json!(format!("{base}/_weir/")));
    // The whole snapshot, queue counts included (a status without them read as "nothing
    // queued" in the tray and the page).
    assert_eq!(status["queue"]["available"], json!(true), "{status}");
    assert_eq!(status["queue"]["queued"], json!(0), "{status}");
    assert_eq!(status["upstreams"][0]["breaker"]["state"], json!("closed"));

    assert_eq!(
        invoke(&w, LOCAL, "set_paused", json!({"paused": true})),
        Ok(json!(true))
    );
    assert!(app.state::<Engine>().handle.is_paused());
    assert_eq!(
        invoke(&w, LOCAL, "get_status", json!({})).unwrap()["paused"],
        json!(true)
    );
    // The HTTP control API sees the same engine state.
    assert!(http_get(&base, "/_weir/api/status").contains("\"paused\": true"));
    assert_eq!(
        invoke(&w, LOCAL, "set_paused", json!({"paused": false})),
        Ok(json!(false))
    );

    // A malformed call is refused by Tauri's argument parsing, not half-applied.
    assert!(invoke(&w, LOCAL, "set_paused", json!({"paused": "yes"})).is_err());
    assert!(!app.state::<Engine>().handle.is_paused());

    // Once Quit has begun, changes are refused with a typed error.
    weir_tray::engine_task::quit(app.handle());
    let err = invoke(&w, LOCAL, "set_paused", json!({"paused": true})).unwrap_err();
    assert_eq!(err["code"], json!("shutting_down"), "{err}");
    assert!(err["message"].as_str().unwrap().contains("shutting down"));
    assert!(!app.state::<Engine>().handle.is_paused());
}

#[test]
fn the_real_capability_admits_only_the_dashboard_window_and_weirs_origin() {
    let data = tempfile::tempdir().unwrap();
    let app = app_with(weir_tray::context(), &data);
    let main = window(&app, "main", &data);
    let base = invoke(&main, LOCAL, "get_dashboard_base", json!({})).unwrap();
    let dashboard = format!("{}/_weir/", base.as_str().unwrap());

    // Weir's own dashboard page (a remote origin to Tauri) may call the commands…
    let status = invoke(&main, &dashboard, "get_status", json!({})).unwrap();
    assert_eq!(status["upstreams"][0]["name"], json!("copilot-api"));
    assert_eq!(
        invoke(
            &main,
            "http://localhost:1234/_weir/",
            "get_dashboard_base",
            json!({})
        ),
        Ok(base.clone())
    );
    // …other pages may not, even in the dashboard window.
    for foreign in ["https://evil.example/", "http://127.0.0.1:1234/other/"] {
        let refused = invoke(&main, foreign, "set_paused", json!({"paused": true}));
        assert!(refused.is_err(), "{foreign} was allowed: {refused:?}");
    }
    assert!(!app.state::<Engine>().handle.is_paused());
    // Another window is not in the capability at all.
    let other = window(&app, "other", &data);
    assert!(invoke(&other, LOCAL, "get_status", json!({})).is_err());
}
