//! The dashboard's static files (`ui/`), embedded at build time so `weir serve` is one file.

use crate::body::Body;
use http::Response;
use include_dir::{include_dir, Dir};

pub(super) static UI: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/ui");

/// The file for a path under `/_weir/` (`""` is `index.html`), if there is one.
pub fn file(rel: &str) -> Option<Response<Body>> {
    let rel = if rel.is_empty() { "index.html" } else { rel };
    if rel.contains("..") {
        return None;
    }
    let f = UI.get_file(rel)?;
    let ct = match rel.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        _ => "application/octet-stream",
    };
    let mut r = super::text(ct, f.contents());
    // The dashboard only talks to its own origin.
    if let Ok(v) = http::HeaderValue::from_str("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'") {
        r.headers_mut().insert("content-security-policy", v);
    }
    Some(r)
}
