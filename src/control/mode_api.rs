//! `PUT /_weir/api/mode` (needs the control secret): choose automatic, cache only or
//! pass-through. The body is `{"mode": "cache_only", "by": "cli"}` (`cache-only` is accepted
//! too; `by` names the surface for the status's reason and defaults to `api`). Answers the new
//! `mode` status; `GET /_weir/api/mode` reads it.

use super::{json, read_json, require_secret, Control};
use crate::body::Body;
use crate::mode::{ChosenBy, Mode};
use crate::problem::{Problem, ProblemKind};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

pub(super) async fn choose(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, &req)?;
    let body = read_json(req).await?;
    let allowed = || {
        Mode::ALL
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mode = match body.get("mode").and_then(|v| v.as_str()) {
        Some(s) => Mode::parse(s).ok_or_else(|| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ProblemKind::BadRequest,
                format!("`{s}` is not a mode; use one of {}", allowed()),
            )
        })?,
        None => {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ProblemKind::BadRequest,
                format!("body must be {{\"mode\": …}} with one of {}", allowed()),
            ))
        }
    };
    let by = match body.get("by") {
        None | Some(serde_json::Value::Null) => ChosenBy::Api,
        Some(v) => match serde_json::from_value::<ChosenBy>(v.clone()) {
            Ok(ChosenBy::Default) | Err(_) => {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemKind::BadRequest,
                    "`by` must be \"dashboard\", \"cli\", \"tray\" or \"api\"",
                ))
            }
            Ok(by) => by,
        },
    };
    Ok(json(&ctl.proxy.modes.choose(mode, by)))
}
