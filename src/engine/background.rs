//! The background work, one hook per part: each starts its part when it is configured (or
//! waits on an event until it has something to do), and none delays start.
//!
//! Idle means asleep (#32): every task here runs only when configured, waits on an event, or
//! wakes no more often than once a minute unless something is due.

use super::{team, EngineOptions, Parts};
use crate::control::Control;
use crate::events::Event;
use crate::queue::replay::Replayer;
use std::sync::Arc;

/// Starts every background part (`team` is the team link's secrets, with `[team]`).
pub(super) fn start(
    opts: &EngineOptions,
    parts: &Parts,
    control: &Arc<Control>,
    team: Option<crate::team::TeamSecrets>,
) {
    replay_workers(parts);
    offline_detector(parts);
    github_status(parts, control);
    breaker_events(parts);
    team::start(opts, parts, control, team);
    sessions_poller(parts, control);
}

/// Replay workers and the queue's expiry sleep until something is due or the queue changes
/// (`queue::housekeeping`).
fn replay_workers(parts: &Parts) {
    Replayer {
        queue: parts.queue.clone(),
        accounts: parts.accounts.clone(),
        upstreams: parts.upstreams.clone(),
        bus: parts.bus.clone(),
        modes: parts.modes.clone(),
        lookups: Default::default(),
    }
    .spawn_workers();
}

/// The offline detector waits for an upstream to turn unreachable and probes only while
/// offline.
fn offline_detector(parts: &Parts) {
    crate::mode::spawn_detector(
        parts.modes.clone(),
        parts.upstreams.clone(),
        parts.settings.offline.clone(),
        &parts.bus,
    );
}

/// On by default (`watch_github_status = false` turns it off): one check a minute, longer
/// while failing.
fn github_status(parts: &Parts, control: &Arc<Control>) {
    let Some(cfg) = parts.settings.github_status.clone() else {
        return;
    };
    let (upstreams, bus) = (&parts.upstreams, &parts.bus);
    let watcher = crate::github_status::start(upstreams.client.clone(), bus, cfg);
    crate::github_status::drive_caution(watcher.watch(), upstreams.clone(), bus);
    if let Ok(mut g) = control.github.lock() {
        *g = Some(watcher);
    }
}

/// Turns every breaker transition into an engine [`Event::Breaker`] (tray, dashboard, logs).
fn breaker_events(parts: &Parts) {
    for u in &parts.upstreams.list {
        crate::events::forward(u.gate.breaker.subscribe(), &parts.bus, |e| {
            tracing::warn!(upstream = %e.breaker, from = %e.from, to = %e.to, reason = %e.reason, "circuit breaker changed");
            Event::Breaker {
                upstream: e.breaker,
                from: e.from,
                to: e.to,
                at: e.at,
                reason: e.reason,
            }
        });
    }
}

/// The sessions poller waits for a token change while none is stored (no timer, no request);
/// it reads the keychain once at start, since a locked keychain reads as "no token" to
/// `token_stored` and is asked again once a minute.
fn sessions_poller(parts: &Parts, control: &Arc<Control>) {
    let watcher_view = control.clone();
    crate::sessions::poller::Poller {
        sessions: control.sessions.clone(),
        proxy: parts.proxy.clone(),
        github: Arc::new(move || watcher_view.github_snapshot()),
    }
    .spawn();
}
