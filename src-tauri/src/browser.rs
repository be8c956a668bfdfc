//! The dashboard in the user's own browser instead of the tray's window (the tray menu's
//! "Open the dashboard in the browser" check item). A browser already holds a web engine, so
//! the tray then starts no WebKit processes at all.
//!
//! The page needs the control secret, which the window gets in its URL's fragment. A URL given
//! to the browser is on its command line (`xdg-open URL`, `browser URL`), which every local
//! user can read in `/proc/PID/cmdline`. So the tray writes a small launcher page, readable by
//! the user alone (0600, in the 0700 data dir), that sends the browser on to the dashboard's
//! URL, and opens that file: only its path, which holds no secret, is on a command line. The
//! dashboard takes the secret out of the address bar at once (`ui/api.js`), so it is not kept
//! in the browser's history either.

use std::path::{Path, PathBuf};
use tauri::Url;

/// The launcher page's file name in the data dir.
pub const LAUNCHER_FILE: &str = "dashboard-open.html";
/// The marker file (in the data dir) that says "open the dashboard in the browser".
pub const PREFERENCE_FILE: &str = "dashboard-in-browser";

/// Whether the user chose the browser (the marker file is there).
pub fn prefers_browser(data_dir: &Path) -> bool {
    data_dir.join(PREFERENCE_FILE).exists()
}

/// Records the choice (creates or removes the marker file).
pub fn set_prefers_browser(data_dir: &Path, on: bool) -> std::io::Result<()> {
    let marker = data_dir.join(PREFERENCE_FILE);
    if on {
        std::fs::write(&marker, b"")
    } else {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// The launcher page for `url`: a script and a meta refresh both send the browser on (the
/// script first, so the fragment with the secret is kept by every browser).
pub fn launcher_page(url: &Url) -> String {
    let text = url.as_str();
    // `Url` has already percent-encoded everything but these; escape them for HTML and JS.
    let html = text
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    let js = text
        .replace('\\', "\\\\")
        .replace('\'', "\\'")
        .replace('<', "\\x3c");
    format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<title>Weir</title>\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={html}\">\n\
         <script>location.replace('{js}');</script>\n\
         <p>Opening <a href=\"{html}\">Weir's dashboard</a>…</p>\n"
    )
}

/// Writes the launcher page for `url` into `dir` (the data dir), readable by this user alone,
/// and returns its path. Replaces the previous one atomically (the engine's private-file
/// writer: the page is opened by the browser, never run, so 0600 is all it needs).
pub fn write_launcher(dir: &Path, url: &Url) -> std::io::Result<PathBuf> {
    let path = dir.join(LAUNCHER_FILE);
    weir::paths::write_private(&path, launcher_page(url).as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> Url {
        Url::parse("http://127.0.0.1:9347/_weir/#secret=abc123&view=handoffs&offer=4").unwrap()
    }

    #[test]
    fn the_launcher_sends_the_browser_to_the_url_with_its_fragment() {
        let page = launcher_page(&url());
        assert!(page.contains(
            "location.replace('http://127.0.0.1:9347/_weir/#secret=abc123&view=handoffs&offer=4')"
        ));
        assert!(page.contains(
            "content=\"0;url=http://127.0.0.1:9347/_weir/#secret=abc123&amp;view=handoffs&amp;offer=4\""
        ));
        // A quote or `<` in a URL cannot end the script or the attribute.
        let odd = Url::parse("http://127.0.0.1:1/_weir/#a='</script>\"").unwrap();
        let page = launcher_page(&odd);
        assert!(!page.contains("</script>\""), "{page}");
        assert_eq!(page.matches("</script>").count(), 1, "{page}");
    }

    #[cfg(unix)]
    #[test]
    fn the_launcher_is_the_users_alone_and_its_path_holds_no_secret() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = write_launcher(dir.path(), &url()).unwrap();
        assert_eq!(path, dir.path().join(LAUNCHER_FILE));
        assert!(!path.to_string_lossy().contains("abc123"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(std::fs::read_to_string(&path).unwrap().contains("abc123"));
        // Written again (a second open), still one file, still 0600.
        write_launcher(dir.path(), &url()).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn the_choice_is_kept_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!prefers_browser(dir.path()));
        set_prefers_browser(dir.path(), true).unwrap();
        assert!(prefers_browser(dir.path()));
        set_prefers_browser(dir.path(), false).unwrap();
        set_prefers_browser(dir.path(), false).unwrap();
        assert!(!prefers_browser(dir.path()));
    }
}
