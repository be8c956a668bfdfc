//! Weir's control API, metrics and dashboard, on the proxy's own listener.
//!
//! Only requests whose `Host` is one of Weir's own loopback names get an answer (a page using
//! DNS rebinding sends its own name and gets nothing); a foreign `Origin` is refused; no CORS
//! header is ever sent, so other origins cannot read anything.

mod cache_api;
mod events;
mod handoffs_api;
mod metrics;
mod mode_api;
mod network_api;
mod pac;
pub(crate) mod pages;
mod policy_api;
mod queue_api;
mod saved;
mod sessions_api;
mod settings_api;
mod setup_api;
mod setup_files;
mod setup_steps;
mod snapshot;
mod token_api;
mod ui;
#[cfg(test)]
mod ui_words;

pub(crate) use saved::SavedWindow;
pub(crate) use snapshot::{snapshot, snapshot_full};
pub(crate) use token_api::is_stored as token_stored_in_keychain;

use crate::body::{full, Body};
use crate::pipeline::Proxy;
use crate::problem::{Problem, ProblemKind};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What the control API owns: the secret, where settings are saved, the GitHub Status
/// watcher; and the request path's state it reports on and steers (the mode).
pub(crate) struct Control {
    pub proxy: Arc<Proxy>,
    /// The agent-sessions companion's state (its poller runs on its own).
    pub sessions: Arc<crate::sessions::Sessions>,
    /// Secret that mutating control calls must carry (`X-Weir-Secret`).
    pub secret: String,
    /// This install's id (not a secret), answered by `/_weir/api/health`.
    pub install_id: String,
    /// Where the dashboard's settings panel saves changes (`None`: read-only), and how
    /// changes are put in force.
    pub reload: Arc<crate::reload::Reloader>,
    /// Whether a GitHub token is in the keychain (read at start, kept current by the token
    /// API) so status calls never wait on the keychain.
    pub token_stored: AtomicBool,
    /// The GitHub Status watcher, once started.
    pub github: Mutex<Option<weir_status::StatusHandle>>,
    /// The team link (`[team]`), once started.
    #[cfg(feature = "team")]
    pub team: std::sync::OnceLock<crate::team::Team>,
    pub started_at: SystemTime,
    /// Samples of the running totals behind the status's `saved` (the last hour).
    pub saved: saved::SavedWindow,
    /// Set in team gateway mode.
    pub gateway: Option<crate::status::GatewayStatus>,
}

impl Control {
    /// The GitHub Status watcher's current view, when it runs.
    pub fn github_snapshot(&self) -> Option<weir_status::GithubStatus> {
        self.github
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|h| h.snapshot()))
    }
}

/// Marks a request the team gateway's admin listener let in (it showed the admin token): the
/// loopback `Host`/`Origin` checks and the control secret do not apply to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminAccess;

/// Whether a `Host` (or `Origin` authority) is exactly one of Weir's own names with its port.
fn is_own_authority(ctl: &Control, value: &str) -> bool {
    let Ok(a) = value.parse::<http::uri::Authority>() else {
        return false;
    };
    a.port_u16() == Some(ctl.proxy.port) && crate::pipeline::is_own_host_name(a.host())
}

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    // The gateway's admin listener checked the admin token instead (`gateway::admin`).
    let admin = req.extensions().get::<AdminAccess>().is_some();
    if !admin && !is_own_authority(ctl, &host) {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            ProblemKind::ForbiddenHost,
            format!(
                "Host `{host}` is not Weir's own address; use {}/_weir/",
                ctl.proxy.base_url
            ),
        ));
    }
    if let Some(origin) = req.headers().get(header::ORIGIN).filter(|_| !admin) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|a| is_own_authority(ctl, a));
        if !own {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                ProblemKind::ForbiddenOrigin,
                "requests from other web origins are refused",
            ));
        }
    }
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/_weir/api/status") => {
            let mut s = snapshot_full(ctl).await;
            if !has_secret(ctl, &req) {
                snapshot::redact_private(&mut s);
            }
            Ok(json(&s))
        }
        (&Method::GET, "/proxy.pac") => Ok(pac::response(&ctl.proxy.settings(), ctl.proxy.port)),
        (&Method::GET, "/_weir/api/health") => Ok(json(&health(ctl, req.uri().query()))),
        (&Method::GET, "/metrics") => Ok(text(
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::render(ctl, has_secret(ctl, &req)),
        )),
        (&Method::GET, p) if p.starts_with("/_weir/problems/") => {
            pages::problem_page(&p["/_weir/problems/".len()..])
        }
        (&Method::GET, "/_weir/api/events") => {
            Ok(events::stream_response(ctl, has_secret(ctl, &req)))
        }
        (&Method::POST, "/_weir/api/pause") => {
            require_secret(ctl, &req)?;
            let body = read_json(req).await?;
            let paused = body
                .get("paused")
                .and_then(|v| v.as_bool())
                .ok_or_else(|| {
                    Problem::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        ProblemKind::BadRequest,
                        "body must be {\"paused\": true|false}",
                    )
                })?;
            ctl.proxy.set_paused(paused, crate::mode::ChosenBy::Api);
            Ok(json(&serde_json::json!({"paused": ctl.proxy.is_paused()})))
        }
        (&Method::GET, "/_weir/api/policy") => {
            // Repository globs and the org file's path: not for any local process.
            require_secret(ctl, &req)?;
            Ok(json(&policy_api::table(ctl, req.uri().query())?))
        }
        (&Method::GET, "/_weir/api/mode") => Ok(json(&ctl.proxy.modes.status())),
        (&Method::PUT | &Method::POST, "/_weir/api/mode") => mode_api::choose(ctl, req).await,
        (&Method::GET, "/_weir/api/network") => Ok(json(&ctl.proxy.network.status())),
        (&Method::PUT, "/_weir/api/network") => network_api::choose(ctl, req).await,
        (&Method::POST, "/_weir/api/cache/clear") => cache_api::clear(ctl, &req).await,
        (_, p) if p == "/_weir/api/queue" || p.starts_with("/_weir/api/queue/") => {
            queue_api::handle(ctl, &req, &p["/_weir/api/queue".len()..]).await
        }
        (_, p) if p == "/_weir/api/handoffs" || p.starts_with("/_weir/api/handoffs/") => {
            let rest = p["/_weir/api/handoffs".len()..].to_string();
            handoffs_api::handle(ctl, req, &rest).await
        }
        (&Method::GET | &Method::PUT, "/_weir/api/settings") => {
            settings_api::handle(ctl, req).await
        }
        (_, p) if p == "/_weir/api/setup" || p.starts_with("/_weir/api/setup/") => {
            let rest = p["/_weir/api/setup".len()..].to_string();
            setup_api::handle(ctl, req, &rest).await
        }
        (&Method::PUT | &Method::DELETE, "/_weir/api/token") => token_api::handle(ctl, req).await,
        (&Method::POST, "/_weir/api/token/reload") => token_api::reload(ctl, &req).await,
        (&Method::GET | &Method::POST, "/_weir/api/sessions") => {
            sessions_api::handle(ctl, req).await
        }
        (&Method::GET, "/_weir") => Ok(redirect("/_weir/")),
        (&Method::GET, p) if p.starts_with("/_weir/") => ui::file(&p["/_weir/".len()..])
            .ok_or_else(|| {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    ProblemKind::NotFound,
                    format!("no dashboard file at {p}"),
                )
            }),
        _ => Err(Problem::new(
            StatusCode::NOT_FOUND,
            ProblemKind::NotFound,
            format!("no control endpoint at {} {path}", req.method()),
        )),
    }
}

/// `/_weir/api/health`: open to anyone; with `?challenge=<hex>` it also proves this Weir holds
/// the control secret ([`crate::control_proof`]), so the CLI never sends the secret to a
/// program that only copied the public install id.
fn health(ctl: &Control, query: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::json!({"ok": true, "install_id": ctl.install_id});
    let challenge = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("challenge="));
    if let Some(c) = challenge {
        let address = crate::config::host_for(ctl.proxy.settings().listen.ip(), ctl.proxy.port);
        if let Some(p) = crate::control_proof::answer(&ctl.secret, &address, c) {
            v["proof"] = p.into();
        }
    }
    v
}

/// Mutating calls, and reads of the queue and settings, need the per-install control secret in `X-Weir-Secret`. A custom header also
/// makes every cross-site attempt a CORS preflight, which Weir never approves (CSRF).
pub(crate) fn require_secret(ctl: &Control, req: &Request<Incoming>) -> Result<(), Problem> {
    if has_secret(ctl, req) {
        Ok(())
    } else {
        Err(Problem::new(StatusCode::UNAUTHORIZED, ProblemKind::Unauthorized, "this call changes Weir's state or reads private data, and needs the control secret in the X-Weir-Secret header"))
    }
}

/// Whether the caller holds the control secret (or is the gateway's admin). Reads that are
/// open to anyone use it to leave private data (logins, repository names) out.
pub(crate) fn has_secret(ctl: &Control, req: &Request<Incoming>) -> bool {
    if req.extensions().get::<AdminAccess>().is_some() {
        return true;
    }
    let given = req
        .headers()
        .get("x-weir-secret")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    constant_time_eq(given, ctl.secret.as_bytes())
}

pub(crate) use crate::identity::constant_time_eq;

/// Reads a small JSON request body (control calls only).
pub(crate) async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, Problem> {
    let limit = 64 * 1024;
    // Copied frame by frame: a body sent a byte per packet pins no read buffer per byte.
    let bytes = crate::body::read_whole(req.into_body(), limit)
        .await
        .map_err(|_| {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemKind::BodyTooLarge,
                format!("control calls take at most {limit} bytes"),
            )
        })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("body is not JSON: {e}"),
        )
    })
}

fn redirect(to: &'static str) -> Response<Body> {
    let mut r = Response::new(crate::body::empty());
    *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    r
}

pub(crate) fn json<T: serde::Serialize>(v: &T) -> Response<Body> {
    let body = serde_json::to_vec_pretty(v).unwrap_or_else(|_| b"{}".to_vec());
    text("application/json", body)
}

pub(crate) fn text(content_type: &'static str, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    r
}
