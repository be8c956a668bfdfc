//! Tauri commands the dashboard window may call (granted by `capabilities/dashboard.json`).
//! Errors are a serialisable `{code, message}`, so the page can branch on `code`.

use crate::engine_task::Engine;
use serde::Serialize;
use tauri::State;

/// A command's failure as the page receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandError {
    /// Stable, machine-readable: `shutting_down`, `internal`.
    pub code: &'static str,
    pub message: String,
}

impl CommandError {
    fn shutting_down() -> CommandError {
        CommandError {
            code: "shutting_down",
            message: "Weir is shutting down; the proxy no longer accepts changes".into(),
        }
    }
}

/// The engine's status snapshot (the same document as `GET /_weir/api/status`).
#[tauri::command]
pub fn get_status(engine: State<'_, Engine>) -> Result<serde_json::Value, CommandError> {
    serde_json::to_value(engine.handle.status()).map_err(|e| CommandError {
        code: "internal",
        message: format!("cannot serialise the status: {e}"),
    })
}

/// Pauses (everything passes through untouched) or resumes; returns the new state.
#[tauri::command]
pub fn set_paused(engine: State<'_, Engine>, paused: bool) -> Result<bool, CommandError> {
    if engine.is_quitting() {
        return Err(CommandError::shutting_down());
    }
    engine.handle.set_paused(paused);
    Ok(engine.handle.is_paused())
}

/// `http://127.0.0.1:PORT`: where the proxy, the control API and the dashboard live.
#[tauri::command]
pub fn get_dashboard_base(engine: State<'_, Engine>) -> Result<String, CommandError> {
    Ok(engine.handle.base_url().to_string())
}
