//! Streaming forward: the request body and the response body flow through without being
//! buffered (session logs, SSE, creates for now, and everything Weir does not manage).

use super::headers::strip_hop_by_hop;
use crate::body::{boxed, Body};
use crate::config::RouteClass;
use crate::engine::Shared;
use crate::problem::Problem;
use crate::upstream::{FetchError, Timeouts};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Forwards `req` as is; `managed` is `(upstream index, class)` for counting.
pub async fn stream(shared: &Arc<Shared>, req: Request<Incoming>, managed: Option<(usize, RouteClass)>) -> Result<Response<Body>, Problem> {
    let (mut parts, body) = req.into_parts();
    parts.uri = absolute_uri(&parts.uri)?;
    strip_hop_by_hop(&mut parts.headers);
    if let Some(a) = parts.uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            parts.headers.insert(header::HOST, v);
        }
    }
    let upstream_req = Request::from_parts(parts, boxed(body));
    if let Some((up, class)) = managed {
        shared.upstreams[up].counters.class(class).upstream_requests.fetch_add(1, Relaxed);
    }
    // Streams get no header deadline beyond the default: a long poll is legitimate.
    match shared.client.send(upstream_req, Timeouts::default()).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(parts, boxed(body)))
        }
        Err(e) => {
            let mut p = fetch_problem(&e);
            if let Some((up, class)) = managed {
                let u = &shared.settings.upstreams[up];
                shared.upstreams[up].counters.error(class, e.kind());
                p = p.upstream(&u.name);
            }
            Err(p)
        }
    }
}

/// A problem for a failed upstream exchange.
pub fn fetch_problem(e: &FetchError) -> Problem {
    let status = match e {
        FetchError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    Problem::new(status, e.kind(), e.to_string())
}

fn absolute_uri(uri: &Uri) -> Result<Uri, Problem> {
    if uri.authority().is_some() && uri.scheme().is_some() {
        return Ok(uri.clone());
    }
    Err(Problem::new(StatusCode::BAD_REQUEST, "bad_request", format!("`{uri}` is not an absolute URL; use Weir as an HTTP proxy")))
}
