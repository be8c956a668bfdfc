//! Weir's control API, metrics and dashboard, on the proxy's own listener.
//!
//! Only requests whose `Host` is one of Weir's own loopback names get an answer (a page using
//! DNS rebinding sends its own name and gets nothing); a foreign `Origin` is refused; no CORS
//! header is ever sent, so other origins cannot read anything.

mod metrics;
mod pages;
mod status;

pub use status::{snapshot, StatusSnapshot};

use crate::body::{full, Body};
use crate::engine::Shared;
use crate::problem::Problem;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::net::IpAddr;
use std::sync::Arc;

/// The names a browser uses for Weir itself.
pub fn is_own_host_name(host: &str) -> bool {
    let h = host.trim_matches(['[', ']']);
    h.eq_ignore_ascii_case("localhost") || h == "127.0.0.1" || h == "::1"
}

/// `host:port` for Weir's own address (brackets around IPv6).
pub fn host_for(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        IpAddr::V4(v4) => format!("{v4}:{port}"),
    }
}

/// Whether a `Host` (or `Origin` authority) is exactly one of Weir's own names with its port.
fn is_own_authority(shared: &Shared, value: &str) -> bool {
    let Ok(a) = value.parse::<http::uri::Authority>() else { return false };
    a.port_u16() == Some(shared.port) && is_own_host_name(a.host())
}

pub async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Problem> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    if !is_own_authority(shared, &host) {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!("Host `{host}` is not Weir's own address; use {}/_weir/", shared.base_url),
        ));
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|a| is_own_authority(shared, a));
        if !own {
            return Err(Problem::new(StatusCode::FORBIDDEN, "forbidden_origin", "requests from other web origins are refused"));
        }
    }
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/_weir/api/status") => Ok(json(&snapshot(shared))),
        (&Method::GET, "/_weir/api/health") => Ok(json(&serde_json::json!({"ok": true}))),
        (&Method::GET, "/metrics") => Ok(text("text/plain; version=0.0.4; charset=utf-8", metrics::render(shared))),
        (&Method::GET, p) if p.starts_with("/_weir/problems/") => pages::problem_page(&p["/_weir/problems/".len()..]),
        (&Method::GET, "/_weir" | "/_weir/") => Ok(text("text/html; charset=utf-8", pages::index(shared))),
        _ => Err(Problem::new(StatusCode::NOT_FOUND, "not_found", format!("no control endpoint at {} {path}", req.method()))),
    }
}

pub fn json<T: serde::Serialize>(v: &T) -> Response<Body> {
    let body = serde_json::to_vec_pretty(v).unwrap_or_else(|_| b"{}".to_vec());
    text("application/json", body)
}

pub fn text(content_type: &'static str, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    r
}
