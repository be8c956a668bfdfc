//! The snapshot the tray and dashboard read: [`GithubStatus`] and its parts, serialised as
//! the dashboard's JSON.

use std::time::SystemTime;

use serde::{Serialize, Serializer};

/// Whether the last check reached the status page and understood its answer.
///
/// There is deliberately no "down" value: a status page we cannot reach says nothing about
/// GitHub, so failures are `Unknown`, never an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reachability {
    Ok,
    Unknown,
}

/// One watched component as the status page reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentState {
    /// The page's spelling of the name (matching is case-insensitive).
    pub name: String,
    /// `operational|degraded_performance|partial_outage|major_outage|under_maintenance`,
    /// or whatever new value Statuspage introduces.
    pub status: String,
}

/// One unresolved incident relevant to the watched components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incident {
    pub id: String,
    pub name: String,
    /// `investigating|identified|monitoring` (resolved incidents are dropped).
    pub status: String,
    /// `none|minor|major|critical`.
    pub impact: String,
    pub shortlink: Option<String>,
    /// RFC 3339 strings exactly as the status page wrote them.
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// Body of the newest incident update.
    pub latest_update: Option<String>,
    /// When the newest update was posted; lets the diff notice a repeated update text.
    pub latest_update_at: Option<String>,
    /// Component names the incident lists (empty: the incident names none yet).
    pub components: Vec<String>,
}

/// Everything Weir knows about GitHub's status, as of `checked_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GithubStatus {
    pub reachability: Reachability,
    /// True when the data below is from an earlier check because the last one failed.
    pub stale: bool,
    /// When the last check finished (successful or not); `None` before the first one.
    #[serde(serialize_with = "rfc3339")]
    pub checked_at: Option<SystemTime>,
    /// When a check last succeeded; `None` until one does.
    #[serde(serialize_with = "rfc3339")]
    pub last_ok_at: Option<SystemTime>,
    /// Why the last check failed, for display; `None` when it succeeded.
    pub error: Option<String>,
    /// Page-wide indicator `none|minor|major|critical|maintenance`; `None` before any data.
    pub indicator: Option<String>,
    /// Page-wide description, e.g. "All Systems Operational".
    pub description: Option<String>,
    /// Human link to the status page.
    pub page_url: String,
    /// Watched components found on the page, in the configured order.
    pub components: Vec<ComponentState>,
    /// Unresolved incidents touching a watched component or naming no component.
    pub incidents: Vec<Incident>,
}

impl GithubStatus {
    /// The state before the first check: unknown, no data, no error yet.
    pub fn initial(page_url: impl Into<String>) -> Self {
        Self {
            reachability: Reachability::Unknown,
            stale: false,
            checked_at: None,
            last_ok_at: None,
            error: None,
            indicator: None,
            description: None,
            page_url: page_url.into(),
            components: Vec::new(),
            incidents: Vec::new(),
        }
    }

    /// True once any check has succeeded, i.e. the data fields hold real page data.
    pub fn has_data(&self) -> bool {
        self.last_ok_at.is_some()
    }

    /// The state after a failed check: previous data kept, marked stale, reachability unknown.
    pub fn failed(&self, error: String, at: SystemTime) -> Self {
        Self {
            reachability: Reachability::Unknown,
            stale: self.has_data(),
            checked_at: Some(at),
            error: Some(error),
            ..self.clone()
        }
    }
}

/// Serialises a time as an RFC 3339 UTC string (`null` when absent).
fn rfc3339<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        None => s.serialize_none(),
        Some(t) => {
            let text = time::OffsetDateTime::from(*t)
                .format(&time::format_description::well_known::Rfc3339)
                .map_err(serde::ser::Error::custom)?;
            s.serialize_str(&text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn serialises_for_the_dashboard() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut s = GithubStatus::initial("https://www.githubstatus.com");
        s.reachability = Reachability::Ok;
        s.checked_at = Some(at);
        s.last_ok_at = Some(at);
        s.indicator = Some("minor".into());
        s.components.push(ComponentState {
            name: "Copilot".into(),
            status: "degraded_performance".into(),
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["reachability"], "ok");
        assert_eq!(v["checked_at"], "2023-11-14T22:13:20Z");
        assert_eq!(v["error"], serde_json::Value::Null);
        assert_eq!(v["components"][0]["status"], "degraded_performance");
    }

    #[test]
    fn failure_keeps_data_and_marks_it_stale() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut ok = GithubStatus::initial("u");
        ok.reachability = Reachability::Ok;
        ok.last_ok_at = Some(at);
        ok.indicator = Some("none".into());
        let failed = ok.failed("HTTP 503".into(), at + Duration::from_secs(60));
        assert_eq!(failed.reachability, Reachability::Unknown);
        assert!(failed.stale);
        assert_eq!(failed.indicator.as_deref(), Some("none"));
        assert_eq!(failed.last_ok_at, Some(at));
        let v = serde_json::to_value(&failed).unwrap();
        assert_eq!(v["reachability"], "unknown");

        let never = GithubStatus::initial("u").failed("refused".into(), at);
        assert!(!never.stale, "no data is not stale data");
    }
}
