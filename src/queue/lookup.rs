//! The in-doubt lookup (see [`super::replay`]'s in-doubt rule): before an item that may already
//! have reached the upstream is sent again, the repository's sessions are listed with the item's
//! credential and searched for its problem statement.

use super::replay::{scope_of, set_credential, Replayer};
use crate::config::RouteClass;
use crate::problem::Problem;
use crate::upstream::{AttemptPolicy, Replayable};
use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use weir_store::Item;

impl Replayer {
    /// Looks an in-doubt item up upstream (see the module's in-doubt rule), through the same
    /// admission and attempt phases as any list call.
    pub(super) async fn lookup(
        &self,
        up: usize,
        item: &Item,
        credential: &serde_json::Value,
    ) -> Lookup {
        let (Some(repo), Some(statement)) = (&item.repo, &item.problem_statement) else {
            return Lookup::Unverifiable;
        };
        let uri: Uri = match format!("/agents/sessions?repo_nwo={repo}&sort=created_at").parse() {
            Ok(u) => u,
            Err(e) => return Lookup::Unknown(e.to_string()),
        };
        let mut headers = HeaderMap::new();
        set_credential(&mut headers, credential);
        let req = Replayable {
            method: &Method::GET,
            uri: &uri,
            headers: &headers,
            body: Bytes::new(),
            identity: scope_of(item),
        };
        let policy = AttemptPolicy::for_request(&Method::GET, true);
        let resp = match self
            .upstreams
            .call_buffered(up, RouteClass::List, req, policy, None)
            .await
        {
            Ok(a) if a.response.status().is_success() => a.response,
            Ok(a) => {
                return Lookup::Unknown(format!("session list answered {}", a.response.status()))
            }
            Err(p) if is_closed(&p) => return Lookup::NotNow,
            Err(p) => return Lookup::Unknown(p.detail),
        };
        let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
        let since = item.last_attempt_at.unwrap_or(item.created_at) - 60_000;
        match find_session(&v, statement, since) {
            Some(s) => Lookup::Found(serde_json::json!({"found_by_lookup": true, "session": s})),
            None => Lookup::NotFound,
        }
    }
}

/// The gate refused the attempt (nothing was sent).
fn is_closed(p: &Problem) -> bool {
    use crate::problem::ProblemKind;
    !p.maybe_sent
        && matches!(
            p.kind,
            ProblemKind::BreakerOpen | ProblemKind::RateLimited | ProblemKind::Overloaded
        )
}

/// What the lookup found.
pub(super) enum Lookup {
    Found(serde_json::Value),
    NotFound,
    Unverifiable,
    /// The upstream's gate is closed; nothing was asked.
    NotNow,
    Unknown(String),
}

/// Any object in the list whose `problem_statement` (or `name`/`title`/`prompt`) equals the
/// statement and whose `created_at` (RFC 3339 or unix seconds) is at or after `since_ms`.
fn find_session(
    v: &serde_json::Value,
    statement: &str,
    since_ms: i64,
) -> Option<serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_session(x, statement, since_ms)),
        serde_json::Value::Object(o) => {
            let text_matches = ["problem_statement", "name", "title", "prompt"]
                .iter()
                .any(|k| o.get(*k).and_then(|s| s.as_str()) == Some(statement));
            let created = o.get("created_at").and_then(|c| {
                c.as_str()
                    .and_then(crate::time_fmt::parse_rfc3339_ms)
                    .or_else(|| c.as_i64().map(|s| s * 1000))
            });
            if text_matches && created.is_some_and(|c| c >= since_ms) {
                return Some(v.clone());
            }
            o.values()
                .find_map(|x| find_session(x, statement, since_ms))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_matching_recent_session_only() {
        let list = serde_json::json!({"sessions": [
            {"id": "old", "problem_statement": "fix it", "created_at": "2026-11-30T07:00:00Z"},
            {"id": "new", "problem_statement": "fix it", "created_at": "2026-11-30T08:00:00Z"},
        ]});
        let at = crate::time_fmt::parse_rfc3339_ms("2026-11-30T07:59:30Z").unwrap();
        assert_eq!(
            find_session(&list, "fix it", at - 60_000).unwrap()["id"],
            "new"
        );
        assert!(find_session(&list, "other", 0).is_none());
        assert!(find_session(&list, "fix it", at + 3_600_000).is_none());
    }
}
