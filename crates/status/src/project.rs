//! Turns the raw Statuspage documents into the watched view: which components and which
//! incidents the tray shows.
//!
//! Incident rule: an unresolved incident is kept when the components it names (its
//! `components` list plus every update's `affected_components`, placeholder row excluded)
//! include a watched one, or when it names none at all. GitHub often opens an incident
//! ("Investigating reports of degraded performance") before attaching components, and a
//! recorded 2020 outage listed only the "Visit www.githubstatus.com…" placeholder; hiding
//! those would hide exactly the early warning the tray is for.

use crate::model::{ComponentState, Incident};
use crate::wire;

/// Prefix of the non-service row githubstatus.com lists among its components.
const PLACEHOLDER_PREFIX: &str = "visit www.githubstatus.com";

/// Incident statuses that mean "over"; such incidents are dropped from the view.
const FINISHED: [&str; 3] = ["resolved", "postmortem", "completed"];

/// The data part of a snapshot, derived from one pair of documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub indicator: String,
    pub description: String,
    pub page_url: Option<String>,
    pub components: Vec<ComponentState>,
    pub incidents: Vec<Incident>,
}

/// True for the placeholder component that is not a service.
pub fn is_placeholder(name: &str) -> bool {
    name.trim().to_lowercase().starts_with(PLACEHOLDER_PREFIX)
}

/// Builds the watched view; `watched` holds the configured names, any case.
pub fn project(summary: &wire::Summary, unresolved: &wire::Unresolved, watched: &[String]) -> View {
    let watched_lc: Vec<String> = watched.iter().map(|w| w.trim().to_lowercase()).collect();

    // Configured order keeps the tray's list stable; names missing from the page are skipped.
    let components = watched_lc
        .iter()
        .filter_map(|w| {
            summary
                .components
                .iter()
                .find(|c| !is_placeholder(&c.name) && c.name.trim().to_lowercase() == *w)
        })
        .map(|c| ComponentState {
            name: c.name.clone(),
            status: c.status.clone(),
        })
        .collect();

    let incidents = unresolved
        .incidents
        .iter()
        .filter(|i| !FINISHED.contains(&i.status.to_lowercase().as_str()))
        .map(incident)
        .filter(|i| {
            i.components.is_empty()
                || i.components
                    .iter()
                    .any(|c| watched_lc.contains(&c.to_lowercase()))
        })
        .collect();

    View {
        indicator: summary.status.indicator.clone(),
        description: summary.status.description.clone(),
        page_url: summary.page.as_ref().and_then(|p| p.url.clone()),
        components,
        incidents,
    }
}

fn incident(i: &wire::Incident) -> Incident {
    let latest = i.incident_updates.first();
    Incident {
        id: i.id.clone(),
        name: i.name.clone(),
        status: i.status.clone(),
        impact: i.impact.clone(),
        shortlink: i.shortlink.clone(),
        created_at: i.created_at.clone(),
        updated_at: i.updated_at.clone(),
        latest_update: latest.and_then(|u| u.body.clone()),
        latest_update_at: latest.and_then(|u| u.display_at.clone().or(u.created_at.clone())),
        components: named_components(i),
    }
}

/// Names the incident lists, de-duplicated case-insensitively, placeholder excluded.
fn named_components(i: &wire::Incident) -> Vec<String> {
    let listed = i.components.iter().map(|c| c.name.as_str());
    let affected = i
        .incident_updates
        .iter()
        .flat_map(|u| u.affected_components.iter().map(|c| c.name.as_str()));
    let mut names: Vec<String> = Vec::new();
    for name in listed.chain(affected) {
        let name = name.trim();
        if name.is_empty() || is_placeholder(name) {
            continue;
        }
        if !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            names.push(name.to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(components: &[(&str, &str)]) -> wire::Summary {
        let comps: Vec<_> = components
            .iter()
            .map(|(n, s)| serde_json::json!({"name": n, "status": s}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "page": {"url": "https://www.githubstatus.com"},
            "status": {"indicator": "minor", "description": "Minor Service Outage"},
            "components": comps,
        }))
        .unwrap()
    }

    fn unresolved(incidents: serde_json::Value) -> wire::Unresolved {
        serde_json::from_value(serde_json::json!({ "incidents": incidents })).unwrap()
    }

    fn watched() -> Vec<String> {
        ["copilot", "API Requests"].map(String::from).to_vec()
    }

    #[test]
    fn keeps_watched_components_in_configured_order_case_insensitively() {
        let s = summary(&[
            ("API Requests", "operational"),
            (
                "Visit www.githubstatus.com for more information",
                "major_outage",
            ),
            ("Actions", "major_outage"),
            ("Copilot", "degraded_performance"),
        ]);
        let v = project(&s, &unresolved(serde_json::json!([])), &watched());
        let names: Vec<_> = v.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Copilot", "API Requests"]);
        assert_eq!(v.components[0].status, "degraded_performance");
        assert_eq!(v.indicator, "minor");
    }

    #[test]
    fn placeholder_is_never_watched_even_if_configured() {
        let s = summary(&[(
            "Visit www.githubstatus.com for more information",
            "major_outage",
        )]);
        let w = vec!["Visit www.githubstatus.com for more information".to_owned()];
        let v = project(&s, &unresolved(serde_json::json!([])), &w);
        assert!(v.components.is_empty());
    }

    #[test]
    fn incident_rule_watched_or_unnamed() {
        let s = summary(&[]);
        let u = unresolved(serde_json::json!([
            {"id": "a", "name": "Copilot slow", "status": "investigating",
             "components": [{"name": "Copilot", "status": "degraded_performance"}]},
            {"id": "b", "name": "Actions delayed", "status": "investigating",
             "components": [{"name": "Actions", "status": "partial_outage"}]},
            {"id": "c", "name": "Investigating reports", "status": "investigating",
             "components": []},
            {"id": "d", "name": "Only the placeholder", "status": "investigating",
             "components": [{"name": "Visit www.githubstatus.com for more information",
                             "status": "operational"}]},
            {"id": "e", "name": "Named in an update only", "status": "identified",
             "components": [],
             "incident_updates": [{"body": "x", "affected_components":
                 [{"code": "brv1bkgrwx7q", "name": "API Requests"}]}]},
            {"id": "f", "name": "Over", "status": "resolved", "components": []}
        ]));
        let v = project(&s, &u, &watched());
        let ids: Vec<_> = v.incidents.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "d", "e"]);
        assert!(
            v.incidents[2].components.is_empty(),
            "placeholder is not a component"
        );
        assert_eq!(v.incidents[3].components, ["API Requests"]);
    }

    #[test]
    fn latest_update_is_the_first_listed() {
        let u = unresolved(serde_json::json!([
            {"id": "a", "name": "n", "status": "identified", "impact": "minor",
             "incident_updates": [
                {"body": "newest", "created_at": "2025-01-01T01:00:00Z"},
                {"body": "oldest", "created_at": "2025-01-01T00:00:00Z"}]}
        ]));
        let v = project(&summary(&[]), &u, &watched());
        assert_eq!(v.incidents[0].latest_update.as_deref(), Some("newest"));
        assert_eq!(
            v.incidents[0].latest_update_at.as_deref(),
            Some("2025-01-01T01:00:00Z")
        );
        assert_eq!(v.incidents[0].impact, "minor");
    }
}
