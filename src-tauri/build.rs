//! Tauri's build step: embeds tauri.conf.json, the capabilities and the icons, and generates
//! `allow-<command>` permissions for the app's own commands (so a capability can grant them to
//! the dashboard window, which loads Weir's page from http://127.0.0.1:PORT, a remote origin
//! to Tauri's ACL).

fn main() {
    let attributes =
        tauri_build::Attributes::new().app_manifest(tauri_build::AppManifest::new().commands(&[
            "get_status",
            "set_paused",
            "get_dashboard_base",
        ]));
    if let Err(e) = tauri_build::try_build(attributes) {
        // A build script has no caller to return to; the message is what the user needs.
        eprintln!("tauri-build failed: {e:#}");
        std::process::exit(1);
    }
}
