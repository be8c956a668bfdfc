//! The request path. Every request passes, in order:
//! size check → target (control API, CONNECT, managed upstream, anything else) →
//! class → cache/coalesce (cacheable classes) or streaming forward → response headers.

mod cached;
mod forward;
mod headers;
mod limit;
mod tunnel;

pub use forward::fetch_problem;
pub use headers::{strip_hop_by_hop, CACHE_STATUS, REQUEST_ID};
pub use limit::Caller;

use crate::body::Body;
use crate::config::{classify, RouteClass};
use crate::engine::Shared;
use crate::problem::{Problem, ProblemKind};
use crate::surface::Surface;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Where a request is going.
enum Target {
    /// Weir's own control API / dashboard (origin-form, or absolute-form naming Weir itself).
    Control,
    /// A managed upstream, by index.
    Managed(usize),
    /// Anything else: passed through untouched.
    Unmanaged,
}

/// The hyper service entry point: never fails, every error becomes a problem response.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let rid = headers::request_id(req.headers());
    let mut resp = match dispatch(&shared, req, &rid).await {
        Ok(r) => r,
        Err(p) => {
            shared.global.rejected.fetch_add(1, Relaxed);
            p.with_base(&shared.base_url)
                .into_response(rid.to_str().ok())
        }
    };
    resp.headers_mut().insert(REQUEST_ID, rid);
    Ok(resp)
}

async fn dispatch(
    shared: &Arc<Shared>,
    mut req: Request<Incoming>,
    rid: &HeaderValue,
) -> Result<Response<Body>, Problem> {
    let limits = &shared.settings.limits;
    let size = headers::header_bytes(req.headers());
    if size > limits.max_header_bytes {
        return Err(Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProblemKind::HeaderTooLarge,
            format!("the request headers are {size} bytes; Weir accepts at most {} (limits.max_header_bytes)", limits.max_header_bytes),
        ));
    }
    let surface = Surface::from_user_agent(
        req.headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
    );

    if req.method() == Method::CONNECT {
        shared.global.surface(surface);
        return tunnel::connect(shared, req).await;
    }

    match target_of(shared, &req) {
        Target::Control => crate::control::handle(shared, req).await,
        Target::Unmanaged => {
            shared.global.surface(surface);
            shared.global.passthrough_requests.fetch_add(1, Relaxed);
            forward::stream(shared, req).await
        }
        Target::Managed(up) => {
            shared.global.surface(surface);
            let class = classify(&shared.settings.routes, req.method(), req.uri().path());
            let counters = &shared.upstreams[up].counters;
            counters.class(class).client_requests.fetch_add(1, Relaxed);
            if shared.is_paused() {
                return forward::stream(shared, req).await;
            }
            req.headers_mut().insert(REQUEST_ID, rid.clone());
            let who = Caller {
                surface,
                identity: shared.identity_key.identify(req.headers()),
            };
            if class.is_cacheable() && req.method() == Method::GET {
                cached::serve(shared, up, class, req, who).await
            } else if class == RouteClass::Create {
                limit::check(shared, who)?;
                crate::queue::create::serve(shared, up, req, who).await
            } else {
                forward::managed(shared, up, class, req, who).await
            }
        }
    }
}

fn target_of(shared: &Shared, req: &Request<Incoming>) -> Target {
    let uri = req.uri();
    let Some(authority) = uri.authority() else {
        return Target::Control;
    };
    let scheme = uri.scheme_str().unwrap_or("http");
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let port = authority.port_u16().unwrap_or(default_port);
    let host = authority.host();
    if port == shared.port && crate::control::is_own_host_name(host) {
        return Target::Control;
    }
    match shared.settings.upstream_for(scheme, host, port) {
        Some(i) => Target::Managed(i),
        None => Target::Unmanaged,
    }
}

/// The class a managed request falls in (exposed for benchmarks).
pub fn class_of(shared: &Shared, method: &Method, path: &str) -> RouteClass {
    classify(&shared.settings.routes, method, path)
}
