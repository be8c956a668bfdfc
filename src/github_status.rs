//! The GitHub Status watcher (crate `weir-status`) wired into the engine: its HTTP goes through
//! Weir's own upstream client (so `upstream_proxy` applies), its snapshot is `github` in the
//! status document, and its changes become [`Event::Github`] for the tray and dashboard.

use crate::body::empty;
use crate::events::{Bus, Event, GithubChange};
use crate::upstream::{FetchError as ClientError, Timeouts, UpstreamClient};
use http::Request;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use weir_status::{
    BoxFuture, Fetch, FetchError, FetchResponse, StatusConfig, StatusEvent, StatusHandle,
    StatusWatcher,
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
