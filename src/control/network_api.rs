//! `GET /_weir/api/network`: whether the network counts as metered, from where and why.
//! `PUT /_weir/api/network` (needs the control secret): the override, body
//! `{"metered": true|false|null, "by": "dashboard"}` — `true`/`false` force it, `null` follows
//! the OS again; `by` names the surface for the status's reason (default `api`). Kept in the
//! data dir across restarts. Answers the new `network` status.

use super::{json, read_json, require_secret, Control};
use crate::body::Body;
use crate::mode::ChosenBy;
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
    let bad = |detail: &str| {
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ProblemKind::BadRequest,
            detail.to_string(),
        )
    };
    let metered = match body.get("metered") {
        Some(serde_json::Value::Bool(b)) => Some(*b),
        Some(serde_json::Value::Null) => None,
        Some(_) | None => {
            return Err(bad(
                "body must be {\"metered\": true|false|null} (null follows the OS again)",
            ))
        }
    };
    let by = match body.get("by") {
        None | Some(serde_json::Value::Null) => ChosenBy::Api,
        Some(v) => match serde_json::from_value::<ChosenBy>(v.clone()) {
            Ok(ChosenBy::Default) | Err(_) => {
                return Err(bad(
                    "`by` must be \"dashboard\", \"cli\", \"tray\" or \"api\"",
                ))
            }
            Ok(by) => by,
        },
    };
    Ok(json(&ctl.proxy.network.choose(metered, by)))
}
