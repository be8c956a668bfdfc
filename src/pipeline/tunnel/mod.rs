//! `CONNECT` tunnels: a blind byte pipe to the target. Weir never looks inside a tunnel to a
//! host it does not manage (managed https upstreams are TLS-terminated by [`super::intercepted`],
//! which the driver starts: it re-enters the pipeline, so it needs the whole `Proxy`).
//!
//! - this file: the CONNECT itself (target, slot, intercept or not, connecting);
//! - [`pipe`]: moving the bytes (half-close, idle timeout, counts), by
//! - [`splice`] on Linux when both ends are plain sockets: the kernel moves them, never
//!   copied through Weir's memory; else with large buffers.

mod pipe;
#[cfg(target_os = "linux")]
mod splice;

use crate::body::{empty, Body};
use crate::config::Settings;
use crate::events::Bus;
use crate::intercept::Interceptor;
use crate::problem::{Problem, ProblemKind};
use crate::stats::GlobalCounters;
use crate::upstream::{RoutingConnector, Upstreams};
use http::uri::Authority;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a CONNECT needs: its slot, what is managed, how to connect, where to count, and the
/// bus its pipe runs on.
#[derive(Clone, Copy)]
pub(super) struct Tunnels<'a> {
    pub settings: &'a Settings,
    pub slots: &'a Arc<Semaphore>,
    pub upstreams: &'a Upstreams,
    pub intercept: Option<&'a Arc<Interceptor>>,
    pub connector: &'a RoutingConnector,
    pub global: &'a GlobalCounters,
    pub bus: &'a Bus,
}

/// A CONNECT's outcome: answered here (a blind tunnel, or refused), or one for a managed https
/// host that the driver hands to [`super::intercepted::accept`].
pub(super) enum Opened {
    Answered(Response<Body>),
    Intercept {
        interceptor: Arc<Interceptor>,
        req: Request<Incoming>,
        authority: Authority,
        slot: OwnedSemaphorePermit,
    },
}

pub(super) async fn connect(t: Tunnels<'_>, req: Request<Incoming>) -> Result<Opened, Problem> {
    let Some(authority) = req.uri().authority().cloned() else {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            "CONNECT needs a host:port target",
        ));
    };
    // `user:pass@host:port` parses as an authority, but a CONNECT target has no user info
    // (RFC 9110 9.3.6). Refused, and never repeated: it may be a password, and this
    // problem's text and the log would otherwise carry it.
    if authority.as_str().contains('@') {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            "a CONNECT target is `host:port`, with no user info (`user:password@`): credentials for a proxy go in Proxy-Authorization",
        ));
    }
    let Some(port) = authority.port_u16() else {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("CONNECT target `{authority}` has no port"),
        ));
    };
    // Nothing listens on port 0 and an empty host names nothing: the client's mistake (400),
    // not an upstream that cannot be reached (502).
    if port == 0 || authority.host().is_empty() {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("CONNECT target `{authority}` needs a host and a port from 1 to 65535"),
        ));
    }
    // A tunnel outlives its HTTP connection (which ends at the upgrade), so tunnels hold a
    // slot of their own against limits.max_connections.
    let Ok(slot) = t.slots.clone().try_acquire_owned() else {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::TooManyConnections,
            format!(
                "Weir already has {} tunnels open (limits.max_connections)",
                t.settings.limits.max_connections
            ),
        )
        .retry_after(Duration::from_secs(1)));
    };
    let settings = t.settings;
    let managed = |scheme: &str, host: &str, port: u16| {
        t.upstreams.find(settings, scheme, host, port).is_some()
    };
    if let Some(i) = t.intercept {
        let https = |host: &str, port: u16| managed("https", host, port);
        if crate::intercept::should_intercept(i, settings, &authority, https) {
            return Ok(Opened::Intercept {
                interceptor: i.clone(),
                req,
                authority,
                slot,
            });
        }
    }
    let host = authority.host().trim_matches(['[', ']']).to_string();
    let managed =
        managed("https", authority.host(), port) || managed("http", authority.host(), port);
    let allow = settings.allow_private_targets;
    let connecting = async {
        if !managed && settings.upstream_proxy.is_none() {
            // Weir connects itself: one lookup, and the checked addresses are the ones used.
            return super::private_target::connect(allow, &host, port).await;
        }
        if !managed {
            super::private_target::check_before_proxy(allow, authority.host(), port).await?;
        }
        match t.connector.connect_tunnel(&host, port).await {
            Ok(s) => Ok(s.into_inner()),
            Err(e) => Err(Problem::new(
                StatusCode::BAD_GATEWAY,
                ProblemKind::Connection,
                format!("could not connect to {authority}: {e}"),
            )),
        }
    };
    let upstream = match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                ProblemKind::Timeout,
                format!("connecting to {authority} took longer than 10s"),
            ));
        }
    };
    let _ = upstream.set_nodelay(true);
    t.global.tunnels.fetch_add(1, Relaxed);
    let meter = pipe::Meter::new(t.global.tunnel_bytes.clone());
    let idle = settings.limits.tunnel_idle_timeout;
    let mut stop = t.bus.stopping();
    let (mark, life) = crate::server::TunnelOpened::new();
    t.bus.clone().spawn(async move {
        let _slot = slot;
        // Held while the tunnel runs: its HTTP/2 stream counts as open until then.
        let _life = life;
        let pipe = async {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => match pipe::run(upgraded, upstream, &meter, idle).await {
                    Ok(pipe::Ended::Closed) => {}
                    Ok(pipe::Ended::Idle) => {
                        tracing::debug!(target = %authority, ?idle, "tunnel idle; closed");
                    }
                    Err(e) => {
                        tracing::debug!(target = %authority, error = %e, "tunnel closed with error");
                    }
                },
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
        };
        // Shutdown closes tunnels too; they are not requests a drain would finish.
        tokio::select! {
            _ = pipe => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    });
    let mut resp = Response::new(empty());
    resp.extensions_mut().insert(mark);
    Ok(Opened::Answered(resp))
}
