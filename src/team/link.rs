//! The running team link: a NATS client that reconnects by itself through the first seconds of
//! an outage and, past them, is replaced after a growing wait ([`keep_linked`]: an idle Weir
//! away from the team's network is asleep, not retrying every 4 s), a task that publishes this
//! Weir's facts (on change, and as a heartbeat), and a task that checks and applies teammates'
//! facts. Neither touches the request path: they set
//! the admission gate's caution, trip its breaker or hold its upstream-wide cooldown, all
//! cheap, lock-short operations. The subscription's buffer is bounded (a slow consumer loses
//! messages, which the heartbeat makes up for); a publish waits at most [`PUBLISH_TIMEOUT`].

use super::fact::{self, Cause, Fact, FactState, Indicator, Pause, PauseKind};
use super::peers::{Decision, Holds, Peers, UNVERIFIED};
use super::seal::{TeamKey, HEADER};
use super::TeamSecrets;
use crate::config::{TeamAction, TeamSettings, UpstreamIndex};
use crate::events::{Bus, Event, TeamChange};
use crate::status::{TeamLink, TeamStatus, TeamUpstreamStatus};
use crate::upstream::{CautionSource, Upstreams};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use weir_resilience::Kind;

/// How often the gates are looked at while something moves (calls in a breaker's window, a
/// breaker not closed, a pause, teammates' failing reports, a hold): a change is published
/// within this long. Quiet, the publish loop sleeps until something is due ([`next_wake`]).
const TICK: Duration = Duration::from_millis(250);
/// A teammate's pause is honoured for at most this long (a fact is not a licence to stop a
/// team for a day).
const MAX_PEER_PAUSE: Duration = Duration::from_secs(600);
/// Teammates' reports hold an upstream (opened, re-opened, paused) for at most this long in
/// total while this Weir's own calls bring no evidence; then its own probes go out.
const MAX_PEER_HOLD: Duration = Duration::from_secs(600);
/// How long a probe of the server's publish permissions waits for its own message.
const PROBE_WAIT: Duration = Duration::from_secs(2);
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a failing link is diagnosed (see [`super::tls::diagnose`]).
const DIAGNOSE_EVERY: Duration = Duration::from_secs(30);
/// Messages buffered by the subscription before a slow consumer starts losing them.
const SUBSCRIPTION_CAPACITY: usize = 1024;
/// Connection attempts a client makes with async-nats's own delays (at once, then 2 ms doubling
/// to its 4 s cap) before it gives up: ~20 s, through which a NATS restart or a network blip
/// ends with the link back within 4 s, as before (#32 item 4).
const QUICK_ATTEMPTS: usize = 16;
/// Past that, one attempt (a new client) after each wait, doubling from this...
const SLOW_FIRST: Duration = Duration::from_secs(15);
/// ...to this: an idle Weir away from the team's network tries once a minute (async-nats alone
/// would try every 4 s, ~50 wake-ups a minute).
const SLOW_CAP: Duration = Duration::from_secs(60);
/// A sign that the network may be back (a recorded call, an engine event) brings the next
/// attempt forward, but never closer than this to the one before.
const RETRY_FLOOR: Duration = Duration::from_secs(4);

/// What the team link needs from the engine.
pub(crate) struct TeamParts {
    pub settings: TeamSettings,
    pub secrets: TeamSecrets,
    /// This install's anonymous id (its name on the team when its NATS login has no user).
    pub me: String,
    pub upstreams: Arc<Upstreams>,
    pub bus: Bus,
    /// GitHub Status's page-wide indicator, when the watcher runs.
    pub indicator: Box<dyn Fn() -> Option<Indicator> + Send + Sync>,
}

/// The team link of one engine. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Team {
    shared: Arc<Shared>,
}

struct Shared {
    settings: TeamSettings,
    key: Option<TeamKey>,
    /// This Weir's name on the team: the last token of the subjects it publishes on (its NATS
    /// user, or its install id without one).
    me: String,
    /// This install's anonymous id: the `peer` field of its facts, by which it knows its own.
    install_id: String,
    /// The server refused this Weir's publish on a subject of another name: senders' names are
    /// the server's to give, and teammates are counted by them.
    enforced: std::sync::atomic::AtomicBool,
    /// The identity probe has its answer (refused, or echoed): a later client does not ask again.
    probed: std::sync::atomic::AtomicBool,
    /// The subject of that probe: a name that is not this Weir's (`weir.v1._probe.breaker.<random>`).
    probe: String,
    /// How long teammates' reports have held each upstream without local evidence.
    holds: Mutex<Holds>,
    upstreams: Arc<Upstreams>,
    bus: Bus,
    indicator: Box<dyn Fn() -> Option<Indicator> + Send + Sync>,
    peers: Mutex<Peers>,
    client: Mutex<Option<async_nats::Client>>,
    /// Woken at each connection (the client's `Connected` event): what waits for the link
    /// waits here, not on a timer (#32 item 4).
    connected: tokio::sync::Notify,
    /// Woken when a teammate's new fact was taken in: the publish loop, asleep, starts
    /// ticking to see it age out (a permit is kept: never lost to a race).
    heard: tokio::sync::Notify,
    /// Woken (waiters only, no permit kept) by a call recorded while the link is down: a
    /// client waiting between attempts tries again soon ([`RETRY_FLOOR`]).
    retry: tokio::sync::Notify,
    error: Mutex<Option<String>>,
    /// The TLS client configuration (OS roots plus `ca_file`), shared with the diagnosis.
    tls: Arc<rustls::ClientConfig>,
    /// When the last TLS diagnosis started (at most one per [`DIAGNOSE_EVERY`]).
    diagnosed: Mutex<Option<Instant>>,
    /// Per upstream: the end of the latest teammate's pause.
    pauses: Mutex<HashMap<String, SystemTime>>,
    /// Per upstream: the breaker's `opens_total` right after teammates' reports opened it
    /// (while it still matches, the breaker is open on their evidence, not this Weir's).
    tripped: Mutex<HashMap<String, u64>>,
    published: AtomicU64,
    received: AtomicU64,
    rejected: AtomicU64,
    stood_in: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain maps and options: a panic elsewhere cannot leave them torn.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Team {
    /// Starts the link (in the background; a server that is down is retried forever). Without
    /// a team key nothing starts and the status says why.
    pub fn start(parts: TeamParts) -> Team {
        let me = match &parts.secrets.auth {
            Some(super::NatsAuth::UserPassword { user, .. }) if fact::valid_sender(user) => {
                user.clone()
            }
            Some(super::NatsAuth::UserPassword { .. }) => {
                tracing::warn!("the NATS user name is not letters, digits, - and _ only: it cannot name this Weir's facts, so teammates cannot tell it apart (docs/team.md)");
                parts.me.clone()
            }
            _ => parts.me.clone(),
        };
        let peers = Peers::new(&me, parts.settings.peers_needed, parts.settings.window);
        let tls = Arc::new(super::tls::client_config(&parts.settings.extra_roots));
        let shared = Arc::new(Shared {
            key: parts.secrets.key.clone(),
            settings: parts.settings,
            me,
            install_id: parts.me,
            enforced: std::sync::atomic::AtomicBool::new(false),
            probed: std::sync::atomic::AtomicBool::new(false),
            probe: fact::subject(
                fact::PROBE_UPSTREAM,
                &hex::encode(rand::random::<[u8; 8]>()),
            ),
            holds: Mutex::new(Holds::new(MAX_PEER_HOLD)),
            upstreams: parts.upstreams,
            bus: parts.bus,
            indicator: parts.indicator,
            peers: Mutex::new(peers),
            client: Mutex::new(None),
            connected: tokio::sync::Notify::new(),
            heard: tokio::sync::Notify::new(),
            retry: tokio::sync::Notify::new(),
            error: Mutex::new(None),
            tls,
            diagnosed: Mutex::new(None),
            pauses: Mutex::new(HashMap::new()),
            tripped: Mutex::new(HashMap::new()),
            published: AtomicU64::new(0),
            received: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            stood_in: AtomicU64::new(0),
        });
        match shared.key.clone() {
            None => {
                tracing::warn!("[team] is set but there is no team key in the keychain: team signals are off (run `weir team set-key`)");
                *lock(&shared.error) = Some(
                    "no team key in the keychain: run `weir team set-key` with the team's key"
                        .into(),
                );
            }
            Some(key) => {
                shared
                    .bus
                    .spawn(run(shared.clone(), key, parts.secrets.auth));
            }
        }
        Team { shared }
    }

    /// `team` in the status document.
    pub fn status(&self) -> TeamStatus {
        let s = &self.shared;
        let now = Instant::now();
        let link = if s.key.is_none() {
            TeamLink::NoKey
        } else {
            match lock(&s.client).as_ref().map(|c| c.connection_state()) {
                Some(async_nats::connection::State::Connected) => TeamLink::Connected,
                _ => TeamLink::Disconnected,
            }
        };
        let error = match (link, lock(&s.error).clone()) {
            (TeamLink::Connected, _) => None,
            (_, Some(e)) => Some(e),
            (_, None) => Some(format!(
                "cannot reach {} yet; Weir works alone and keeps trying",
                s.settings.nats_url
            )),
        };
        let peers = lock(&s.peers);
        let pauses = lock(&s.pauses).clone();
        let upstreams: Vec<TeamUpstreamStatus> = s
            .upstreams
            .list
            .iter()
            .map(|u| {
                let name = &u.settings.name;
                let ep = peers.episode(name);
                TeamUpstreamStatus {
                    name: name.clone(),
                    peers_failing: peers.failing(name, now),
                    acting: ep.acting,
                    overruled: ep.overruled,
                    pause_until: pauses
                        .get(name)
                        .filter(|t| **t > SystemTime::now())
                        .map(|t| crate::time_fmt::rfc3339(*t)),
                }
            })
            .collect();
        let summary = summary(&upstreams);
        TeamStatus {
            link,
            connected: link == TeamLink::Connected,
            server: s.settings.nats_url.clone(),
            error,
            action: s.settings.action,
            peers_needed: s.settings.peers_needed,
            window_s: s.settings.window.as_secs_f64(),
            peers_seen: peers.seen(now),
            published: s.published.load(Relaxed),
            received: s.received.load(Relaxed),
            rejected: s.rejected.load(Relaxed),
            probes_stood_in: s.stood_in.load(Relaxed),
            upstreams,
            summary,
        }
    }
}

/// The tray's line: "3 teammates see copilot-api failing" (upstreams joined by "; ").
fn summary(ups: &[TeamUpstreamStatus]) -> Option<String> {
    let parts: Vec<String> = ups
        .iter()
        .filter(|u| u.peers_failing > 0)
        .map(|u| match u.peers_failing {
            1 => format!("1 teammate sees {} failing", u.name),
            n => format!("{n} teammates see {} failing", u.name),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// What every connection to the team's server shares: TLS, the login.
fn base_options(shared: &Shared, auth: Option<super::NatsAuth>) -> async_nats::ConnectOptions {
    let o = async_nats::ConnectOptions::new()
        .name("weir")
        .connection_timeout(Duration::from_secs(5))
        .require_tls(shared.settings.tls)
        // Always ours (OS roots plus `ca_file`, ring): also used when a `nats://` server asks
        // for TLS and async-nats upgrades the connection.
        .tls_client_config((*shared.tls).clone());
    match auth {
        Some(super::NatsAuth::Token { token }) => o.token(token),
        Some(super::NatsAuth::UserPassword { user, password }) => {
            o.user_and_password(user, password)
        }
        None => o,
    }
}

/// The link's client; it makes at most `attempts` connection attempts in a row (counted
/// afresh after each connection) before it gives up and [`keep_linked`] takes over. Without
/// echo: the server does not send this Weir's own facts back (each heartbeat was read and
/// dropped, a wake-up for nothing; #32 item 4). The identity probe, which needs its own
/// message back, has its own connection ([`identity_enforced`]).
fn connect_options(
    shared: &Arc<Shared>,
    auth: Option<super::NatsAuth>,
    attempts: usize,
) -> async_nats::ConnectOptions {
    let o = base_options(shared, auth)
        .retry_on_initial_connect()
        .max_reconnects(attempts)
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .no_echo();
    let weak = Arc::downgrade(shared);
    o.event_callback(move |ev| {
        let weak = weak.clone();
        async move {
            let Some(s) = weak.upgrade() else { return };
            if matches!(
                ev,
                async_nats::Event::ClientError(async_nats::ClientError::MaxReconnects)
            ) {
                return; // this client gave up as planned: `keep_linked` tries again later
            }
            let (change, message) = match &ev {
                async_nats::Event::Connected => {
                    *lock(&s.error) = None;
                    s.connected.notify_waiters();
                    (
                        Some(TeamChange::Connected),
                        format!("connected to {}", s.settings.nats_url),
                    )
                }
                async_nats::Event::Disconnected => (
                    Some(TeamChange::Disconnected),
                    format!(
                        "lost {}; Weir works alone and keeps trying",
                        s.settings.nats_url
                    ),
                ),
                other => {
                    {
                        let mut error = lock(&s.error);
                        // Keep a diagnosis already made; "IO error" alone says nothing.
                        if !error.as_deref().is_some_and(|e| e.starts_with("team: ")) {
                            *error = Some(format!("NATS: {other}"));
                        }
                    }
                    if matches!(other, async_nats::Event::ClientError(_)) {
                        diagnose(&s);
                    }
                    (None, String::new())
                }
            };
            if let Some(change) = change {
                tracing::info!(%message, "team link");
                s.bus.emit(Event::Team {
                    change,
                    upstream: None,
                    peers_failing: 0,
                    at: SystemTime::now(),
                    message,
                });
            } else {
                tracing::warn!(event = %ev, "team link");
            }
        }
    })
}

/// A connection attempt failed: find out (in the background) whether TLS is why, and say so
/// in the status (`team.error`) and the log.
fn diagnose(s: &Arc<Shared>) {
    // At most one look per DIAGNOSE_EVERY while the link keeps failing (each look is a
    // connection to the server; a look takes at most three 3 s steps, so one at a time). A
    // time compared, not a timer: no wake-up 30 s after each failed attempt (#32 item 4).
    {
        let now = Instant::now();
        let mut last = lock(&s.diagnosed);
        if last.is_some_and(|at| now.saturating_duration_since(at) < DIAGNOSE_EVERY) {
            return;
        }
        *last = Some(now);
    }
    let s = s.clone();
    s.bus.clone().spawn(async move {
        let found = super::tls::diagnose(&s.settings.nats_url, s.settings.tls, s.tls.clone()).await;
        let connected = matches!(
            lock(&s.client).as_ref().map(|c| c.connection_state()),
            Some(async_nats::connection::State::Connected)
        );
        if let (Some(why), false) = (found, connected) {
            let mut error = lock(&s.error);
            if error.as_deref() != Some(why.as_str()) {
                tracing::warn!(%why, "team link");
                *error = Some(why);
            }
        }
    });
}

/// Runs the link until the engine stops: the publish loop, and the clients one after another
/// ([`keep_linked`]).
async fn run(shared: Arc<Shared>, key: TeamKey, auth: Option<super::NatsAuth>) {
    let mut stop = shared.bus.stopping();
    let mut stop_keeper = stop.clone();
    tokio::join!(
        publish_loop(&shared, &key, &mut stop),
        keep_linked(&shared, &key, auth, &mut stop_keeper),
    );
    let client = lock(&shared.client).take();
    if let Some(client) = client {
        let _ = tokio::time::timeout(Duration::from_secs(1), client.flush()).await;
    }
}

/// Keeps a client linked to the server, until the engine stops. A client reconnects by itself
/// [`QUICK_ATTEMPTS`] times in a row (async-nats's delays: at once, then up to 4 s apart),
/// which covers a server restart or a network blip; then it gives up, and a new client makes
/// one attempt after a wait that doubles from [`SLOW_FIRST`] to [`SLOW_CAP`], or sooner (at
/// least [`RETRY_FLOOR`] after the last) when something says the network may be back: a call
/// recorded by a breaker, or any engine event but the link's own. async-nats's delay cannot be
/// cut short (its sleep runs in the connection task; `force_reconnect` waits in a queue until
/// a connection is made), hence clients that give up and a wait of our own.
async fn keep_linked(
    shared: &Arc<Shared>,
    key: &TeamKey,
    auth: Option<super::NatsAuth>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let mut attempts = QUICK_ATTEMPTS;
    let mut pause = SLOW_FIRST;
    loop {
        let client = match connect_options(shared, auth.clone(), attempts)
            .connect(shared.settings.nats_url.as_str())
            .await
        {
            Ok(c) => c,
            Err(e) => {
                // Only a malformed address fails here (connecting is retried in the background).
                tracing::warn!(error = %e, "team signals are off");
                *lock(&shared.error) =
                    Some(format!("cannot use {}: {e}", shared.settings.nats_url));
                return;
            }
        };
        *lock(&shared.client) = Some(client.clone());
        if !linked(shared, key, &client, &auth, stop).await {
            return;
        }
        let gave_up = Instant::now();
        let was_connected = client.statistics().connects.load(Relaxed) > 0;
        drop(client);
        if was_connected {
            pause = SLOW_FIRST;
            if attempts == 1 {
                // A connection of the slow phase was lost: a new outage, quick attempts first.
                attempts = QUICK_ATTEMPTS;
                continue;
            }
        }
        attempts = 1;
        let mut events = shared.bus.subscribe();
        let hint = async {
            network_may_be_back(shared, &mut events).await;
            tokio::time::sleep_until(gave_up + RETRY_FLOOR).await;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(gave_up + pause) => {}
            _ = hint => {}
            _ = stop.changed() => return,
        }
        pause = (pause * 2).min(SLOW_CAP);
    }
}

/// Until something says the network may be back: a call recorded while the link is down (the
/// publish loop wakes [`Shared::retry`]) or an engine event (a breaker's or the mode's change,
/// the network's, GitHub Status, a queued create, settings...), the link's own news aside.
async fn network_may_be_back(
    shared: &Shared,
    events: &mut tokio::sync::broadcast::Receiver<Event>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let event = async {
        loop {
            match events.recv().await {
                Ok(Event::Team { .. }) => {}
                Ok(_) | Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::select! {
        _ = shared.retry.notified() => {}
        _ = event => {}
    }
}

/// One client's life: subscribes, takes teammates' facts in and probes the server's
/// permissions, until the client gives up (`true`) or the engine stops (`false`).
async fn linked(
    shared: &Arc<Shared>,
    key: &TeamKey,
    client: &async_nats::Client,
    auth: &Option<super::NatsAuth>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    // The subscription ends when the client does (its connection task ends when it gives up,
    // and with it the subscription's sender, or the queued request to subscribe).
    let Ok(sub) = client.subscribe(fact::SUBSCRIBE_SUBJECT).await else {
        return !*stop.borrow(); // gave up already
    };
    let mut receiving = shared.bus.spawn(receive(shared.clone(), key.clone(), sub));
    let probing = (!shared.probed.load(Relaxed) && !shared.enforced.load(Relaxed)).then(|| {
        shared
            .bus
            .spawn(identity_enforced(shared.clone(), auth.clone()))
    });
    let gave_up = tokio::select! {
        _ = &mut receiving => true,
        _ = stop.changed() => false,
    };
    receiving.abort();
    if let Some(probing) = probing {
        probing.abort();
    }
    gave_up
}

/// Whether a server error is nats-server's refusal of a publish to exactly `subject`
/// (`Permissions Violation for Publish to "<subject>"`).
fn refuses_publish_to(error: &str, subject: &str) -> bool {
    const REFUSED: &str = "permissions violation for publish to ";
    error
        .get(..REFUSED.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(REFUSED))
        && error[REFUSED.len()..].trim() == format!("\"{subject}\"")
}

/// The probe's own connection (echo on, unlike the link's), made only once the link is up
/// (the server is reachable), for as long as the probe asks. Its events say one thing that
/// matters: the refusal of the probe's publish, the answer we hoped for, not a fault. Only that
/// refusal: a refused subscription (to the probe or anything else) says nothing about what
/// this Weir may publish.
fn probe_options(
    shared: &Arc<Shared>,
    auth: Option<super::NatsAuth>,
) -> async_nats::ConnectOptions {
    let weak = Arc::downgrade(shared);
    // One reconnect at most: a probe connection lost with the server must not go on trying
    // every 4 s in the background (the probe makes a new one when the link is back).
    base_options(shared, auth).max_reconnects(1).event_callback(move |ev| {
        let weak = weak.clone();
        async move {
            let Some(s) = weak.upgrade() else { return };
            match &ev {
                async_nats::Event::ServerError(async_nats::ServerError::Other(text))
                    if refuses_publish_to(text, &s.probe) =>
                {
                    if !s.enforced.swap(true, Relaxed) {
                        // Reports taken in before this was known start again under their
                        // senders' names.
                        lock(&s.peers).forget_unverified();
                        tracing::info!("the NATS server gives each teammate its own name: teammates are counted by their NATS users");
                    }
                }
                other => tracing::debug!(event = %other, "team link: identity probe"),
            }
        }
    })
}

/// Finds out, once connected, whether the server lets this Weir publish under a name that is
/// not its own: it publishes on `weir.v1._probe.breaker.<random>` and listens there. A server
/// with per-user publish permissions (docs/team.md) refuses it, and then the subject's last
/// token is an identity the sender cannot choose. Until the refusal is seen (or when the probe
/// comes back), all teammates together count as one reporter ([`UNVERIFIED`]), so K > 1 teammates
/// cannot be posed by one key holder. This sees this Weir's own permissions, which a team's
/// server config gives every user alike.
/// It asks on a connection of its own with the same login (so the same permissions), echo on:
/// the link's connection has none, and without echo a server that lets the probe through would
/// never send it back (the probe would ask forever, and never warn).
async fn identity_enforced(shared: Arc<Shared>, auth: Option<super::NatsAuth>) {
    let probe = shared.probe.clone();
    let mut own: Option<async_nats::Client> = None;
    loop {
        until_connected(&shared).await;
        // Its own connection: the link's has no echo, and the probe needs its message back.
        // Kept while it asks again (a new one only when that one is lost).
        if !own.as_ref().is_some_and(is_connected) {
            own = probe_options(&shared, auth.clone())
                .connect(shared.settings.nats_url.as_str())
                .await
                .ok();
        }
        let Some(client) = own.as_ref() else {
            tokio::time::sleep(PROBE_WAIT).await;
            continue;
        };
        let Ok(mut sub) = client.subscribe(probe.clone()).await else {
            tokio::time::sleep(PROBE_WAIT).await;
            continue;
        };
        if client.publish(probe.clone(), "".into()).await.is_err()
            || tokio::time::timeout(PROBE_WAIT, client.flush())
                .await
                .is_err()
        {
            continue;
        }
        let echoed = tokio::time::timeout(PROBE_WAIT, sub.next()).await;
        let _ = sub.unsubscribe().await;
        match echoed {
            Ok(Some(_)) => {
                shared.enforced.store(false, Relaxed);
                shared.probed.store(true, Relaxed);
                tracing::warn!("the NATS server lets this Weir publish under any name: teammates cannot be told apart, so they count as one (peers_needed > 1 is never reached; docs/team.md, \"Security model\")");
                return;
            }
            // The connection closed under it: ask again on a new one.
            Ok(None) => tokio::time::sleep(PROBE_WAIT).await,
            // Not delivered: refused (the error event sets `enforced`) or lost; either way no
            // name but our own is ours to use. Ask again only if the refusal was not seen.
            Err(_) if shared.enforced.load(Relaxed) => return,
            Err(_) => tokio::time::sleep(PROBE_WAIT).await,
        }
    }
}

fn is_connected(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

/// The client of the moment (none before the first; [`keep_linked`] replaces one that gave up).
fn current(shared: &Shared) -> Option<async_nats::Client> {
    lock(&shared.client).clone()
}

/// Until the link is connected: woken by a client's connection event, not by a timer (it was
/// a look every [`TICK`] while the server was unreachable).
async fn until_connected(shared: &Shared) {
    let up = || current(shared).is_some_and(|c| is_connected(&c));
    loop {
        // Enabled before the state is read: a connection in between is not missed.
        let woken = shared.connected.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if up() {
            return;
        }
        woken.await;
        // async-nats sends the event a moment before its state says so: look a few times.
        for _ in 0..100 {
            if up() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// While the link is down the tick has nothing to do once no teammate has been heard from
/// within the window, none of their decisions is being acted on and nothing holds an
/// upstream: nothing can be published, and nothing of theirs can age out or be released.
fn nothing_to_tick(shared: &Shared) -> bool {
    let now = Instant::now();
    if !lock(&shared.holds).is_empty() {
        return false;
    }
    let peers = lock(&shared.peers);
    peers.seen(now) == 0
        && shared.upstreams.configured().all(|idx| {
            !peers
                .episode(&shared.upstreams.get(idx).settings.name)
                .acting
        })
}

/// Checks and applies every message on the subscription.
async fn receive(shared: Arc<Shared>, key: TeamKey, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        if fact::parse_subject(msg.subject.as_str()).is_some_and(|(u, _)| u == fact::PROBE_UPSTREAM)
        {
            continue;
        }
        shared.received.fetch_add(1, Relaxed);
        match accept(&shared, &key, &msg) {
            Ok(Some(up)) => {
                evaluate(&shared, up);
                shared.heard.notify_one();
            }
            Ok(None) => {} // our own, or a newer fact was already seen
            Err(why) => {
                shared.rejected.fetch_add(1, Relaxed);
                tracing::debug!(subject = %msg.subject, why, "team fact ignored");
            }
        }
    }
}

/// Verifies a message and takes its fact in; `Some(upstream index)` when it was new.
fn accept(
    shared: &Shared,
    key: &TeamKey,
    msg: &async_nats::Message,
) -> Result<Option<UpstreamIndex>, &'static str> {
    let subject = msg.subject.as_str();
    let (upstream, sender) = fact::parse_subject(subject).ok_or("not a fact subject")?;
    let sig = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(HEADER))
        .map(|v| v.as_str())
        .ok_or("unsigned")?;
    if !key.verify(subject, &msg.payload, sig) {
        return Err("bad signature");
    }
    let f: Fact = serde_json::from_slice(&msg.payload).map_err(|_| "malformed")?;
    let max_age = shared.settings.window + Duration::from_millis(fact::CLOCK_SKEW_MS);
    f.check(upstream, fact::unix_ms(SystemTime::now()), max_age)?;
    let Some((idx, _)) = shared
        .upstreams
        .configured_with()
        .find(|(_, u)| u.settings.name == f.upstream)
    else {
        return Ok(None); // an upstream this Weir does not manage
    };
    if f.peer == shared.install_id {
        return Ok(None); // our own, back from the server
    }
    // Teammates count under the name the server let them publish with, or all together as one
    // while that is not known to be enforced.
    let from = if shared.enforced.load(Relaxed) {
        sender.to_owned()
    } else {
        format!("{UNVERIFIED}{}", f.peer)
    };
    let now = Instant::now();
    let agreed = {
        let mut peers = lock(&shared.peers);
        if !peers.observe(&f, &from, now) {
            return Ok(None);
        }
        peers.pause(&f.upstream, fact::unix_ms(SystemTime::now()), now)
    };
    if let Some(p) = agreed {
        honour_pause(shared, idx, p);
    }
    Ok(Some(idx))
}

/// This Weir's own calls to upstream `idx` so far (local evidence for [`Holds`]).
fn own_calls(shared: &Shared, idx: UpstreamIndex) -> u64 {
    shared
        .upstreams
        .get(idx)
        .counters
        .totals()
        .upstream_requests
}

/// How much longer teammates' reports may hold upstream `idx` (see [`MAX_PEER_HOLD`]).
fn hold_left(shared: &Shared, idx: UpstreamIndex) -> Duration {
    let name = &shared.upstreams.get(idx).settings.name;
    lock(&shared.holds).left(name, own_calls(shared, idx), Instant::now())
}

/// A pause K teammates agree on (see `Peers::pause`), within what is left of the hold budget.
fn honour_pause(shared: &Shared, idx: UpstreamIndex, p: Pause) {
    let now_ms = fact::unix_ms(SystemTime::now());
    if p.until_ms <= now_ms {
        return;
    }
    let wait = Duration::from_millis(p.until_ms - now_ms)
        .min(MAX_PEER_PAUSE)
        .min(hold_left(shared, idx));
    if wait.is_zero() {
        return;
    }
    let kind = match p.kind {
        PauseKind::RateLimited => Kind::RateLimited,
        PauseKind::Overloaded => Kind::Overloaded,
    };
    let u = shared.upstreams.get(idx);
    u.gate.honour_peer_cooldown(wait, kind);
    let until = SystemTime::now() + wait;
    let mut pauses = lock(&shared.pauses);
    let e = pauses.entry(u.settings.name.clone()).or_insert(until);
    *e = (*e).max(until);
}

/// Decides for one upstream and applies the decision to its gate.
fn evaluate(shared: &Shared, idx: UpstreamIndex) {
    let u = shared.upstreams.get(idx);
    let name = &u.settings.name;
    let now = Instant::now();
    let (decision, failing) = {
        let mut p = lock(&shared.peers);
        (
            p.decide(name, u.gate.successes(), now),
            p.failing(name, now),
        )
    };
    let (change, message) = match decision {
        Decision::Nothing => return,
        Decision::Act => {
            let why = format!("{failing} teammates' Weirs see {name} failing");
            match shared.settings.action {
                TeamAction::Cautious => u.gate.set_caution(CautionSource::Peers, true),
                TeamAction::Open => {
                    let closed = matches!(
                        u.gate.breaker.state(),
                        weir_resilience::State::Closed | weir_resilience::State::Degraded
                    );
                    if closed && !hold_left(shared, idx).is_zero() && u.gate.breaker.trip(&why) {
                        let opens = u.gate.breaker.snapshot().opens_total;
                        lock(&shared.tripped).insert(name.clone(), opens);
                    }
                }
            }
            (TeamChange::Acting, why)
        }
        Decision::Release { overruled } => {
            u.gate.set_caution(CautionSource::Peers, false);
            lock(&shared.tripped).remove(name);
            if overruled {
                (
                    TeamChange::Overruled,
                    format!("calls to {name} succeed here; teammates' reports are ignored until they change"),
                )
            } else {
                (
                    TeamChange::Released,
                    format!(
                        "fewer than {} teammates see {name} failing now",
                        shared.settings.peers_needed
                    ),
                )
            }
        }
    };
    tracing::warn!(upstream = %name, %message, "team signals");
    shared.bus.emit(Event::Team {
        change,
        upstream: Some(name.clone()),
        peers_failing: failing,
        at: SystemTime::now(),
        message,
    });
}

/// When this Weir's open breaker is about to let probes through and K teammates' own calls
/// confirmed the failure after it opened, its probes would only repeat their evidence: the
/// breaker starts its next (longer) wait instead. Bounded: such a re-opening is published as
/// the teammates' doing (cause `peers`), never as a confirmation, so when nobody probes the
/// confirmations age out and everybody probes again.
fn stand_in_for_probes(shared: &Shared, idx: UpstreamIndex) {
    let u = shared.upstreams.get(idx);
    let snap = u.gate.breaker.snapshot();
    let Some(rem) = snap
        .retry_after
        .filter(|_| snap.state == weir_resilience::State::Open)
    else {
        return;
    };
    if rem > TICK * 2 {
        return;
    }
    let name = &u.settings.name;
    let n =
        lock(&shared.peers).confirmations_since(name, fact::unix_ms(snap.since), Instant::now());
    if n < shared.settings.peers_needed || hold_left(shared, idx).is_zero() {
        return;
    }
    let why = format!("{n} teammates' Weirs saw {name} fail since this breaker opened; their calls stand in for its probes");
    if u.gate.breaker.trip(&why) {
        let opens = u.gate.breaker.snapshot().opens_total;
        lock(&shared.tripped).insert(name.clone(), opens);
        shared.stood_in.fetch_add(1, Relaxed);
    }
}

/// Calls in the breaker's window before a closed breaker's failure rate says "degraded".
const DEGRADED_MIN_CALLS: u64 = 5;

/// The breaker's own degraded state (calls flow, but recent ones failed or were slow more than
/// usual), or a closed breaker whose window already fails at the opening rate with fewer calls
/// than it needs to open: this Weir sees the upstream failing and will likely open soon.
/// Teammates may act on it at once (K teammates agreeing guards against one laptop's noise).
fn degraded(snap: &weir_resilience::BreakerSnapshot, cfg: &weir_resilience::BreakerConfig) -> bool {
    use weir_resilience::State;
    snap.state == State::Degraded
        || (snap.state == State::Closed
            && snap.calls_in_window >= DEGRADED_MIN_CALLS
            && snap.failure_rate >= cfg.failure_rate_threshold)
}

/// What this Weir would publish about upstream `idx` now.
fn fact_for(shared: &Shared, idx: UpstreamIndex) -> Fact {
    let u = shared.upstreams.get(idx);
    let snap = u.gate.breaker.snapshot();
    let state = FactState::from(snap.state);
    let by_peers = state != FactState::Closed
        && lock(&shared.tripped).get(&u.settings.name) == Some(&snap.opens_total);
    let pause = u.gate.local_cooldown().map(|(until, kind)| Pause {
        until_ms: fact::unix_ms(until),
        kind: if kind == Kind::Overloaded {
            PauseKind::Overloaded
        } else {
            PauseKind::RateLimited
        },
    });
    Fact {
        v: fact::VERSION,
        peer: shared.install_id.clone(),
        upstream: u.settings.name.clone(),
        state,
        degraded: degraded(&snap, &u.gate.breaker.config()),
        cause: if by_peers { Cause::Peers } else { Cause::Local },
        since_ms: fact::unix_ms(snap.since),
        pause,
        github: (shared.indicator)(),
        at_ms: fact::unix_ms(SystemTime::now()),
    }
}

/// Publishes a fact when what it says changes, and every heartbeat; re-evaluates decisions
/// every tick while something moves (reports age out of the window; local successes
/// overrule). Quiet, it sleeps until the next heartbeat or a change ([`sleep`]; #32 item 4).
async fn publish_loop(
    shared: &Arc<Shared>,
    key: &TeamKey,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let heartbeat =
        (shared.settings.window / 3).clamp(Duration::from_secs(1), Duration::from_secs(20));
    let n = shared.upstreams.list.len();
    // What was last published per upstream (the fact without its time) and when.
    let mut last: Vec<Option<(Fact, Instant)>> = vec![None; n];
    // Engine events: settings applied, breaker transitions, GitHub Status changes.
    let mut events = Some(shared.bus.subscribe());
    let mut first = true;
    loop {
        if !first && !sleep(shared, &last, heartbeat, &mut events, stop).await {
            return;
        }
        first = false;
        // The client of the moment ([`keep_linked`] replaces one that gave up).
        let client = current(shared).filter(is_connected);
        {
            let now = Instant::now();
            lock(&shared.peers).prune(now);
        }
        for (idx, prev) in shared.upstreams.configured().zip(last.iter_mut()) {
            release_if_free(shared, idx);
            evaluate(shared, idx);
            stand_in_for_probes(shared, idx);
            let f = fact_for(shared, idx);
            let now = Instant::now();
            let due = match prev {
                None => true,
                Some((p, at)) => {
                    !same_content(p, &f) || now.saturating_duration_since(*at) >= heartbeat
                }
            };
            let Some(client) = client.as_ref().filter(|c| due && is_connected(c)) else {
                continue;
            };
            if publish(shared, key, client, &f).await {
                *prev = Some((f, now));
            }
        }
    }
}

/// Sleeps until the publish loop has something to do; `false` when the engine stops.
/// While something moves ([`moving`]) that is the next [`TICK`]. Quiet, it is the next
/// heartbeat ([`next_wake`]), or sooner: a recorded call (the breakers' `arm_activity`: the
/// first outcome after quiet, whose window, failure rate or pause the fact may carry), an
/// engine event (a breaker transition, new settings, GitHub Status), a teammate's new fact,
/// or, down, the link coming back.
async fn sleep(
    shared: &Shared,
    last: &[Option<(Fact, Instant)>],
    heartbeat: Duration,
    events: &mut Option<tokio::sync::broadcast::Receiver<Event>>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let connected = current(shared).is_some_and(|c| is_connected(&c));
    let breakers: Vec<weir_resilience::Breaker> = shared
        .upstreams
        .configured()
        .map(|idx| shared.upstreams.get(idx).gate.breaker.clone())
        .collect();
    // Never empty (`select_all` wants one): a pending future stands in for no upstream.
    type Wait<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    let activity = || {
        futures_util::future::select_all(
            breakers
                .iter()
                .map(|b| Box::pin(b.activity()) as Wait<'_>)
                .chain(std::iter::once(Box::pin(std::future::pending()) as Wait<'_>)),
        )
    };
    // Down, with nothing to tick for: asleep until the link is back, then every fact is due
    // again as it was (changed, or past its heartbeat). A call recorded meanwhile says the
    // network may be back: a client waiting between attempts tries again soon.
    if !connected && nothing_to_tick(shared) {
        breakers.iter().for_each(|b| b.arm_activity());
        return tokio::select! {
            _ = until_connected(shared) => true,
            _ = activity() => {
                shared.retry.notify_waiters();
                true
            }
            _ = stop.changed() => false,
        };
    }
    let mut quiet = !moving(shared);
    if quiet {
        // Armed before looking again: a call recorded in between wakes the sleep below.
        breakers.iter().for_each(|b| b.arm_activity());
        quiet = !moving(shared);
    }
    let published = last.iter().map(|l| l.as_ref().map(|(_, at)| *at));
    let wake = next_wake(
        Instant::now(),
        !quiet,
        connected,
        published,
        heartbeat,
        shared.settings.window,
    );
    let activity = activity();
    let event = async {
        match events {
            Some(rx) => {
                use tokio::sync::broadcast::error::{RecvError, TryRecvError};
                let mut closed = matches!(rx.recv().await, Err(RecvError::Closed));
                // One look for a burst: what queued up while the loop was busy is read now,
                // not one wake-up each.
                while !closed {
                    match rx.try_recv() {
                        Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Closed) => closed = true,
                    }
                }
                if closed {
                    *events = None; // no more events: never wake on a closed bus again
                }
            }
            None => std::future::pending().await,
        }
    };
    let back = async {
        if connected {
            std::future::pending().await
        } else {
            until_connected(shared).await
        }
    };
    tokio::select! {
        _ = tokio::time::sleep_until(wake) => {}
        _ = activity, if quiet => {}
        _ = event => {}
        _ = shared.heard.notified() => {}
        _ = back => {}
        _ = stop.changed() => return false,
    }
    true
}

/// Whether something can change the facts or decisions with time or with each call, so the
/// loop looks every [`TICK`] as it always did: calls in a breaker's window (its failure rate,
/// the `degraded` flag), a breaker not closed (open waits run out, probes), a pause running,
/// teammates' failing reports or decisions (they age out; local successes overrule), a hold.
fn moving(shared: &Shared) -> bool {
    if !lock(&shared.holds).is_empty() {
        return true;
    }
    let now = Instant::now();
    shared.upstreams.configured().any(|idx| {
        let u = shared.upstreams.get(idx);
        let snap = u.gate.breaker.snapshot();
        if snap.state != weir_resilience::State::Closed
            || snap.calls_in_window > 0
            || u.gate.cooling(None)
        {
            return true;
        }
        let peers = lock(&shared.peers);
        let name = &u.settings.name;
        peers.failing(name, now) > 0 || peers.episode(name).acting
    })
}

/// When the publish loop looks next: the next [`TICK`] while something moves; quiet and
/// connected, when the first fact is due as a heartbeat (one never published is due now,
/// one that failed to go out is retried a [`TICK`] later); quiet and down, only a change or
/// the link coming back can give it work, so the window is a safety net.
fn next_wake(
    now: Instant,
    moving: bool,
    connected: bool,
    published: impl Iterator<Item = Option<Instant>>,
    heartbeat: Duration,
    window: Duration,
) -> Instant {
    if moving {
        return now + TICK;
    }
    if !connected {
        return now + window.max(TICK);
    }
    let due = published
        .map(|at| at.map_or(now, |at| at + heartbeat))
        .min()
        .unwrap_or(now + heartbeat);
    due.max(now + TICK)
}

/// An upstream whose breaker is back on the closed side with no pause running is held by
/// nothing: the next hold starts with the whole budget.
fn release_if_free(shared: &Shared, idx: UpstreamIndex) {
    let u = shared.upstreams.get(idx);
    let closed = matches!(
        u.gate.breaker.state(),
        weir_resilience::State::Closed | weir_resilience::State::Degraded
    );
    if closed && !u.gate.cooling(None) {
        lock(&shared.holds).release(&u.settings.name);
    }
}

/// Two facts say the same thing (ignoring when they were made).
fn same_content(a: &Fact, b: &Fact) -> bool {
    Fact {
        at_ms: 0,
        ..a.clone()
    } == Fact {
        at_ms: 0,
        ..b.clone()
    }
}

async fn publish(shared: &Shared, key: &TeamKey, client: &async_nats::Client, f: &Fact) -> bool {
    let Ok(payload) = serde_json::to_vec(f) else {
        return false;
    };
    let subject = fact::subject(&f.upstream, &shared.me);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(HEADER, key.sign(&subject, &payload).as_str());
    let sent = tokio::time::timeout(
        PUBLISH_TIMEOUT,
        client.publish_with_headers(subject, headers, payload.into()),
    )
    .await;
    match sent {
        Ok(Ok(())) => {
            shared.published.fetch_add(1, Relaxed);
            true
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "team fact not published");
            false
        }
        Err(_) => {
            tracing::debug!("team fact not published: the NATS client is busy");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #32 item 4: quiet and connected, the publish loop sleeps until the next heartbeat, not
    /// a [`TICK`]; with a fact never published it looks at once, and a fact that failed to go
    /// out is retried a tick later (never a busy loop); moving, it ticks as before; down and
    /// quiet, only the window's safety net is a due time.
    #[test]
    fn the_publish_loop_sleeps_until_something_is_due() {
        let now = Instant::now();
        let hb = Duration::from_secs(20);
        let window = Duration::from_secs(60);
        let wake = |moving, connected, published: &[Option<Instant>]| {
            next_wake(
                now,
                moving,
                connected,
                published.iter().copied(),
                hb,
                window,
            ) - now
        };
        // Quiet: the oldest heartbeat decides (published 5 s and 15 s ago: due in 5 s).
        let ago = |s| now - Duration::from_secs(s);
        assert_eq!(
            wake(false, true, &[Some(ago(5)), Some(ago(15))]),
            Duration::from_secs(5)
        );
        assert_eq!(wake(false, true, &[Some(now)]), hb);
        // Over a quiet minute: 3 looks, not 240.
        let mut t = now;
        let mut looks = 0;
        while t < now + Duration::from_secs(60) {
            t = next_wake(t, false, true, std::iter::once(Some(t)), hb, window);
            looks += 1;
        }
        assert_eq!(looks, 3);
        // Never published, or not published last time: at the tick floor, not a spin.
        assert_eq!(wake(false, true, &[Some(now), None]), TICK);
        assert_eq!(wake(false, true, &[]), hb);
        // Moving: every tick, as before.
        assert_eq!(wake(true, true, &[Some(now)]), TICK);
        assert_eq!(wake(true, false, &[]), TICK);
        // Down and quiet: the link's return or a change wakes it; the window is the net.
        assert_eq!(wake(false, false, &[None]), window);
    }

    /// The breaker's activity signal: armed, the next recorded outcome wakes the watcher once
    /// (kept if nobody waits yet); unarmed, outcomes wake nobody.
    #[tokio::test(start_paused = true)]
    async fn a_recorded_call_wakes_a_quiet_link_once() {
        let b = weir_resilience::Breaker::new(
            "up",
            weir_resilience::BreakerConfig::default(),
            weir_resilience::NoJitter,
        )
        .unwrap();
        let woke = |b: &weir_resilience::Breaker| {
            let b = b.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(60), b.activity())
                    .await
                    .is_ok()
            }
        };
        b.try_acquire().unwrap().record(false, false);
        assert!(!woke(&b).await, "not armed: no wake-up");
        b.arm_activity();
        b.try_acquire().unwrap().record(false, false);
        b.try_acquire().unwrap().record(true, false);
        assert!(woke(&b).await, "armed: the first outcome wakes");
        assert!(!woke(&b).await, "once per arming");
    }

    /// Issue 31, item 4: only the refusal of the probe's own publish counts; a refused
    /// subscription to the probe, or another subject's refusal, does not.
    #[test]
    fn only_the_probes_refused_publish_shows_names_are_enforced() {
        let probe = "weir.v1._probe.breaker.0011223344556677";
        assert!(refuses_publish_to(
            &format!("Permissions Violation for Publish to \"{probe}\""),
            probe
        ));
        for other in [
            format!("Permissions Violation for Subscription to \"{probe}\""),
            format!("Permissions Violation for Publish to \"{probe}.x\""),
            "Permissions Violation for Publish to \"weir.v1._probe.breaker.other\"".to_string(),
            format!("something about {probe}"),
            String::new(),
        ] {
            assert!(!refuses_publish_to(&other, probe), "{other}");
        }
    }
}
