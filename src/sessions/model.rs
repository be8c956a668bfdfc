//! Reading the agents API's session list into [`SessionSummary`]s: the group each state
//! belongs to, the repository, title, times and links, every field bounded and every link
//! checked, because the list is upstream input shown in the dashboard and the tray.

use crate::status::{SessionCounts, SessionGroup, SessionSummary};
use serde_json::Value;

/// GitHub's page of the cloud agent's sessions: where a session without a pull request opens.
pub const AGENTS_HOME: &str = "https://github.com/copilot/agents";

/// The longest title kept (the problem statement can be pages long).
const MAX_TITLE: usize = 200;
/// The longest id, state, repository or time kept.
const MAX_SHORT: usize = 120;
/// The most sessions read from one list answer.
const MAX_SESSIONS: usize = 500;

/// The sessions of one list answer (`{"sessions": [...]}` or a bare array), in the upstream's
/// order (the list is asked for newest first); `None` when the answer has no such list.
pub fn parse_list(body: &[u8]) -> Option<Vec<SessionSummary>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let items = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o.get("sessions")?.as_array()?,
        _ => return None,
    };
    Some(
        items
            .iter()
            .take(MAX_SESSIONS)
            .filter_map(session)
            .collect(),
    )
}

/// The group of an agents-API state; `has_pr`: the session has a pull request.
pub fn group_of(state: &str, has_pr: bool) -> SessionGroup {
    match state.to_ascii_lowercase().as_str() {
        "queued" | "pending" | "in_progress" | "running" => SessionGroup::Running,
        "waiting_for_user" => SessionGroup::ReadyForReview,
        "completed" | "succeeded" if has_pr => SessionGroup::ReadyForReview,
        "completed" | "succeeded" | "cancelled" | "canceled" => SessionGroup::Finished,
        "failed" | "timed_out" | "error" | "errored" => SessionGroup::Failed,
        _ => SessionGroup::Other,
    }
}

/// Counts by group.
pub fn counts(sessions: &[SessionSummary]) -> SessionCounts {
    let mut c = SessionCounts::default();
    for s in sessions {
        match s.group {
            SessionGroup::Running => c.running += 1,
            SessionGroup::ReadyForReview => c.ready_for_review += 1,
            SessionGroup::Failed => c.failed += 1,
            SessionGroup::Finished => c.finished += 1,
            SessionGroup::Other => {}
        }
        c.total += 1;
    }
    c
}

fn session(v: &Value) -> Option<SessionSummary> {
    let o = v.as_object()?;
    let id = short(o.get("id")?)?;
    let state = o.get("state").and_then(short).unwrap_or_default();
    let repository = repository(o);
    let pr = o.get("pull_request");
    let pr_number = pr
        .and_then(|p| p.get("number"))
        .and_then(Value::as_u64)
        .or_else(|| o.get("pull_request_number").and_then(Value::as_u64));
    let pull_request_url = pr
        .and_then(|p| p.get("html_url").or_else(|| p.get("url")))
        .or_else(|| o.get("pull_request_url"))
        .and_then(Value::as_str)
        .and_then(https)
        .or_else(|| {
            let (repo, n) = (repository.as_deref()?, pr_number?);
            Some(format!("https://github.com/{repo}/pull/{n}"))
        });
    let has_pr = pull_request_url.is_some()
        || o.get("resource_type").and_then(Value::as_str) == Some("pull");
    let url = o
        .get("html_url")
        .and_then(Value::as_str)
        .and_then(https)
        .or_else(|| {
            let pr = pull_request_url.as_deref()?;
            is_safe_segment(&id).then(|| format!("{pr}/agent-sessions/{id}"))
        })
        .unwrap_or_else(|| AGENTS_HOME.to_string());
    let title = ["name", "title", "problem_statement", "prompt"]
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_str))
        .map(|t| clean(t, MAX_TITLE))
        .filter(|t| !t.is_empty());
    Some(SessionSummary {
        group: group_of(&state, has_pr),
        id,
        state,
        repository,
        title,
        created_at: o.get("created_at").and_then(time),
        updated_at: o
            .get("last_updated_at")
            .or_else(|| o.get("updated_at"))
            .and_then(time),
        pull_request_url,
        url,
    })
}

/// `owner/repo` from `repository` (a string, or an object with `full_name`/`name_with_owner`),
/// `repo_nwo` or `repo`; only a well-formed name is kept.
fn repository(o: &serde_json::Map<String, Value>) -> Option<String> {
    let candidates = [
        o.get("repository").and_then(|r| {
            r.as_str()
                .or_else(|| r.get("full_name").and_then(Value::as_str))
                .or_else(|| r.get("name_with_owner").and_then(Value::as_str))
        }),
        o.get("repo_nwo").and_then(Value::as_str),
        o.get("repo").and_then(Value::as_str),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|r| is_repository(r))
        .map(str::to_string)
}

/// `owner/repo` with GitHub's name characters only.
pub fn is_repository(s: &str) -> bool {
    let mut parts = s.split('/');
    let (Some(owner), Some(repo), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    is_safe_segment(owner) && is_safe_segment(repo) && s.len() <= MAX_SHORT
}

fn is_safe_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= MAX_SHORT
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An `https://` URL without spaces or control characters; anything else (`javascript:`,
/// `http:`) is dropped.
fn https(s: &str) -> Option<String> {
    let ok = s.len() <= 2048
        && s.starts_with("https://")
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && s.parse::<http::Uri>().is_ok();
    ok.then(|| s.to_string())
}

/// A short string field, or a number shown as one.
fn short(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(clean(s, MAX_SHORT)).filter(|s| !s.is_empty()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A time as RFC 3339: kept when it parses as one, or converted from unix seconds.
fn time(v: &Value) -> Option<String> {
    let ms = match v {
        Value::String(s) => crate::time_fmt::parse_rfc3339_ms(s)?,
        Value::Number(n) => n.as_i64()?.checked_mul(1000)?,
        _ => return None,
    };
    let t = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_millis(u64::try_from(ms).ok()?))?;
    Some(crate::time_fmt::rfc3339(t))
}

/// Control characters removed, whitespace runs folded, at most `max` characters.
fn clean(s: &str, max: usize) -> String {
    let folded: String = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match folded.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &folded[..i]),
        None => folded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_agents_list_shape() {
        let body = serde_json::json!({"sessions": [
            {"id": "a1", "state": "in_progress", "name": "Fix the\nlogin  bug",
             "repository": "octo/app", "created_at": "2026-11-30T08:00:00Z",
             "last_updated_at": 1764489600},
            {"id": "b2", "state": "completed", "resource_type": "pull",
             "repository": {"full_name": "octo/app"}, "pull_request": {"number": 7},
             "problem_statement": "Add tests"},
            {"id": "c3", "state": "completed", "repo_nwo": "octo/lib"},
            {"id": "d4", "state": "failed", "html_url": "javascript:alert(1)",
             "repository": "../etc"},
            {"id": "e5", "state": "something_new"},
            {"no_id": true}
        ]});
        let s = parse_list(body.to_string().as_bytes()).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].group, SessionGroup::Running);
        assert_eq!(s[0].title.as_deref(), Some("Fix the login bug"));
        assert_eq!(s[0].created_at.as_deref(), Some("2026-11-30T08:00:00.000Z"));
        assert_eq!(s[0].updated_at.as_deref(), Some("2025-11-30T08:00:00.000Z"));
        assert_eq!(s[0].url, AGENTS_HOME);
        assert_eq!(s[1].group, SessionGroup::ReadyForReview);
        assert_eq!(
            s[1].pull_request_url.as_deref(),
            Some("https://github.com/octo/app/pull/7")
        );
        assert_eq!(
            s[1].url,
            "https://github.com/octo/app/pull/7/agent-sessions/b2"
        );
        assert_eq!(s[2].group, SessionGroup::Finished);
        assert_eq!(s[2].repository.as_deref(), Some("octo/lib"));
        assert_eq!(s[3].group, SessionGroup::Failed);
        assert_eq!(s[3].url, AGENTS_HOME, "a non-https link is dropped");
        assert_eq!(s[3].repository, None);
        assert_eq!(s[4].group, SessionGroup::Other);
        let c = counts(&s);
        assert_eq!(
            (c.running, c.ready_for_review, c.failed, c.finished, c.total),
            (1, 1, 1, 1, 5)
        );
        assert_eq!(c.summary(), "1 running, 1 ready for review, 1 failed");
        assert_eq!(SessionCounts::default().summary(), "No active sessions");
    }

    #[test]
    fn other_shapes_are_not_a_list() {
        assert!(parse_list(b"{\"path\":\"/x\"}").is_none());
        assert!(parse_list(b"not json").is_none());
        assert_eq!(parse_list(b"[]").unwrap().len(), 0);
        let long = "x".repeat(1000);
        let body = serde_json::json!([{"id": 5, "state": "queued", "title": long}]);
        let s = parse_list(body.to_string().as_bytes()).unwrap();
        assert_eq!(s[0].id, "5");
        assert_eq!(s[0].title.as_ref().unwrap().chars().count(), MAX_TITLE + 1);
    }
}
