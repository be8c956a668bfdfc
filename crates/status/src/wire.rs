//! Serde shapes of the Statuspage v2 documents the watcher reads (`summary.json`,
//! `incidents/unresolved.json`), modelled on recorded githubstatus.com responses.
//!
//! Only the fields Weir uses are declared; unknown fields are ignored and optional ones
//! default, so Statuspage adding a field never turns into "unreachable". Enumerations
//! (component status, indicator, impact) stay strings for the same reason.

use serde::Deserialize;

/// `GET /api/v2/summary.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    #[serde(default)]
    pub page: Option<Page>,
    pub status: PageStatus,
    /// (The summary's own `incidents` list is ignored: incidents come from
    /// `unresolved.json`.)
    pub components: Vec<Component>,
}

/// `GET /api/v2/incidents/unresolved.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Unresolved {
    pub incidents: Vec<Incident>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Page {
    #[serde(default)]
    pub url: Option<String>,
}

/// The page-wide roll-up: `indicator` is `none|minor|major|critical` (plus `maintenance`).
#[derive(Debug, Clone, Deserialize)]
pub struct PageStatus {
    pub indicator: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Component {
    pub name: String,
    /// `operational|degraded_performance|partial_outage|major_outage|under_maintenance`.
    pub status: String,
}

/// A component as an incident lists it; only the name matters there.
#[derive(Debug, Clone, Deserialize)]
pub struct NamedComponent {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Incident {
    pub id: String,
    pub name: String,
    /// `investigating|identified|monitoring|resolved|postmortem`.
    pub status: String,
    #[serde(default = "impact_none")]
    pub impact: String,
    #[serde(default)]
    pub shortlink: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Newest first, as Statuspage returns them (seen in every recorded response).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub incident_updates: Vec<IncidentUpdate>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub components: Vec<NamedComponent>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IncidentUpdate {
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub display_at: Option<String>,
    /// `null` when an update does not touch components.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub affected_components: Vec<NamedComponent>,
}

fn impact_none() -> String {
    "none".to_owned()
}

/// Statuspage writes `null` where it means "no items" (`affected_components: null`).
fn null_as_empty<'de, D, T>(de: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(de)?.unwrap_or_default())
}
