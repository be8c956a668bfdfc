//! Tauri commands the dashboard window may call (granted by `capabilities/dashboard.json`).
//! Errors are a serialisable `{code, message}`, so the page can branch on `code`.

use crate::engine_task::Engine;
use serde::Serialize;
use tauri::State;
use weir::status::StatusSnapshot;

/// A command's failure as the page receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandError {
    /// Stable, machine-readable: `shutting_down`.
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

/// The engine's whole status snapshot, queue counts included (the same document as
/// `GET /_weir/api/status`); serialised to JSON only here, at the boundary with the page.
#[tauri::command]
pub async fn get_status(engine: State<'_, Engine>) -> Result<StatusSnapshot, CommandError> {
    Ok(engine.handle.status().await)
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
