//! The GitHub Status watcher (crate `weir-status`) wired into the engine: its HTTP goes through
//! Weir's own upstream client (so `upstream_proxy` applies), its snapshot is `github` in the
//! status document, and its changes become [`Event::Github`] for the tray and dashboard.
//! Trouble on a component watched for an upstream (`status_components`) makes that upstream's
//! breaker cautious while it lasts ([`drive_caution`]).

use crate::body::empty;
use crate::events::{Bus, Event, GithubChange};
use crate::upstream::caution::CautionSource;
use crate::upstream::{FetchError as ClientError, Timeouts, UpstreamClient, Upstreams};
use http::Request;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use weir_status::{
    BoxFuture, Fetch, FetchError, FetchResponse, GithubStatus, StatusConfig, StatusEvent,
    StatusHandle, StatusWatcher,
};

/// [`Fetch`] over the engine's client. Sends no credentials.
struct ClientFetch(UpstreamClient);

impl Fetch for ClientFetch {
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: http::HeaderMap,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        Box::pin(async move {
            let mut req = Request::new(empty());
            *req.uri_mut() = url.parse().map_err(FetchError::transport)?;
            *req.headers_mut() = headers;
            req.headers_mut().insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_static(concat!("weir/", env!("CARGO_PKG_VERSION"))),
            );
            let t = Timeouts {
                headers: Duration::from_secs(15),
                body: Duration::from_secs(15),
            };
            match self.0.fetch(req, t, 4 << 20).await {
                Ok(r) => {
                    let (p, body) = r.into_parts();
                    Ok(FetchResponse {
                        status: p.status,
                        headers: p.headers,
                        body,
                    })
                }
                Err(ClientError::Timeout { .. }) => Err(FetchError::Timeout),
                Err(e @ ClientError::Connect { .. }) => Err(FetchError::connect(e)),
                Err(e) => Err(FetchError::transport(e)),
            }
        })
    }
}

/// Starts the watcher and forwards its events; returns its handle.
pub(crate) fn start(client: UpstreamClient, bus: &Bus, config: StatusConfig) -> StatusHandle {
    let handle = StatusWatcher::spawn(config, Arc::new(ClientFetch(client)));
    crate::events::forward(handle.subscribe(), bus, to_event);
    handle
}

/// Keeps every upstream's GitHub Status caution in step with the watcher's snapshot, from now
/// until the engine stops or the watcher ends.
pub(crate) fn drive_caution(
    mut state: watch::Receiver<GithubStatus>,
    upstreams: Arc<Upstreams>,
    bus: &Bus,
) {
    let mut stop = bus.stopping();
    bus.spawn(async move {
        loop {
            let snapshot = state.borrow_and_update().clone();
            apply_caution(&snapshot, &upstreams);
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = stop.changed() => return,
            }
        }
    });
}

fn apply_caution(status: &GithubStatus, upstreams: &Upstreams) {
    for u in &upstreams.list {
        let why = trouble(status, &u.settings.status_components);
        u.gate
            .set_caution_detail(CautionSource::GithubStatus, why.is_some(), why);
    }
}

/// What GitHub Status says against `components` (one upstream's): an unresolved incident that
/// lists one of them, or one of them not operational. `None` when all is well, when nothing is
/// watched, or before the first successful check. Incidents that name no component yet are
/// left out: they may be about anything on github.com.
pub(crate) fn trouble(status: &GithubStatus, components: &[String]) -> Option<String> {
    if !status.has_data() || components.is_empty() {
        return None;
    }
    let ours = |name: &str| components.iter().any(|c| c.eq_ignore_ascii_case(name));
    let incidents: Vec<&str> = status
        .incidents
        .iter()
        .filter(|i| i.components.iter().any(|c| ours(c)))
        .map(|i| i.name.as_str())
        .collect();
    if !incidents.is_empty() {
        return Some(format!("incident: {}", incidents.join("; ")));
    }
    status
        .components
        .iter()
        .find(|c| {
            ours(&c.name) && !matches!(c.status.as_str(), "operational" | "under_maintenance")
        })
        .map(|c| format!("{} is {}", c.name, c.status.replace('_', " ")))
}

fn to_event(e: StatusEvent) -> Event {
    let (change, title, url) = match e {
        StatusEvent::IncidentOpened { incident } => (
            GithubChange::IncidentOpened,
            incident.name,
            incident.shortlink,
        ),
        StatusEvent::IncidentUpdated { incident, .. } => (
            GithubChange::IncidentUpdated,
            format!("{} ({})", incident.name, incident.status),
            incident.shortlink,
        ),
        StatusEvent::IncidentResolved { incident } => (
            GithubChange::IncidentResolved,
            incident.name,
            incident.shortlink,
        ),
        StatusEvent::ComponentChanged { name, from, to } => (
            GithubChange::ComponentChanged,
            format!("{name}: {from} → {to}"),
            None,
        ),
        StatusEvent::ReachabilityChanged { to, error, .. } => {
            let t = match error {
                Some(e) => format!("GitHub Status is {to:?}: {e}"),
                None => format!("GitHub Status is {to:?}"),
            };
            (GithubChange::ReachabilityChanged, t, None)
        }
    };
    Event::Github {
        change,
        title,
        url,
        at: SystemTime::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_status::{ComponentState, Incident, Reachability};

    fn page() -> GithubStatus {
        let mut s = GithubStatus::initial("https://www.githubstatus.com");
        s.reachability = Reachability::Ok;
        s.last_ok_at = Some(SystemTime::now());
        s.components = vec![
            ComponentState {
                name: "Copilot".into(),
                status: "operational".into(),
            },
            ComponentState {
                name: "API Requests".into(),
                status: "operational".into(),
            },
        ];
        s
    }

    fn incident(name: &str, components: &[&str]) -> Incident {
        Incident {
            id: name.into(),
            name: name.into(),
            status: "investigating".into(),
            impact: "minor".into(),
            shortlink: None,
            created_at: None,
            updated_at: None,
            latest_update: None,
            latest_update_at: None,
            components: components.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn only_trouble_on_the_upstreams_own_components_counts() {
        let copilot = ["Copilot".to_string()];
        let mut s = page();
        assert_eq!(trouble(&s, &copilot), None);
        s.incidents.push(incident("Actions delays", &["Actions"]));
        s.incidents.push(incident("Something", &[]));
        assert_eq!(trouble(&s, &copilot), None, "not ours, or naming nothing");
        s.components[1].status = "major_outage".into();
        assert_eq!(trouble(&s, &copilot), None);
        assert_eq!(
            trouble(&s, &["api requests".to_string()]).as_deref(),
            Some("API Requests is major outage")
        );
        s.incidents
            .push(incident("Disruption with Copilot", &["Copilot", "Actions"]));
        assert_eq!(
            trouble(&s, &copilot).as_deref(),
            Some("incident: Disruption with Copilot")
        );
        assert_eq!(trouble(&s, &[]), None, "nothing watched for it");
        assert_eq!(
            trouble(&GithubStatus::initial("u"), &copilot),
            None,
            "no data yet"
        );
        s.incidents.clear();
        s.components[0].status = "under_maintenance".into();
        assert_eq!(trouble(&s, &copilot), None);
    }
}
