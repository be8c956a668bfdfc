//! `POST /_weir/api/cache/clear` (control secret): empties the cache in memory and on disk, and
//! answers what is left (`entries`, and the persistence status).

use super::{json, require_secret, Control};
use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

pub(crate) async fn clear(
    ctl: &Control,
    req: &Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, req)?;
    let cache = &ctl.proxy.cache;
    let before = cache.entry_count();
    cache.clear().await.map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Internal,
            format!("the cache was emptied in memory, but not on disk: {e}"),
        )
    })?;
    tracing::info!(entries = before, "cache cleared by the user");
    Ok(json(&serde_json::json!({
        "cleared": before,
        "entries": cache.entry_count(),
        "persistence": cache.persistence(),
    })))
}
