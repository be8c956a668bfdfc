//! The companion's poll loop. It never adds a storm:
//!
//! - it runs only while a GitHub token is stored (the keychain is read at start and again
//!   whenever the token API or `weir token` says it changed);
//! - one list request per interval, the `list` class's fresh TTL (at least 5 s), sent through
//!   Weir's own listener, so while an IDE polls the same list it is a cache hit;
//! - while the upstream's breaker is not closed, GitHub Status shows a Copilot incident, or a
//!   poll failed, it waits longer: exponential from the interval up to 10 minutes, full jitter
//!   (`[retry] jitter = false` makes it exact, for tests);
//! - while Weir is paused it sends nothing (a paused Weir would pass the poll upstream uncached);
//! - while Weir is offline (every managed upstream unreachable) it sends nothing and waits for
//!   Weir to be back online, then polls at once: a poll could only be held (a stale copy or an
//!   offline miss), and each one wakes Weir's listener and pipeline for nothing;
//! - after [`MAX_UNAUTHORIZED`] 401s in a row it stops and says so, until a token is stored
//!   again.

use super::loopback::Loopback;
use super::{model, Sessions, LIST_PATH};
use crate::config::{RouteClass, UpstreamIndex};
use crate::events::Event;
use crate::mode::{Behaviour, Hold};
use crate::pipeline::Proxy;
use crate::secrets::Account;
use crate::status::{PollerReason, PollerState};
use bytes::Bytes;
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use weir_resilience::Backoff;
use weir_status::GithubStatus;

/// 401 answers in a row after which the poller stops.
pub const MAX_UNAUTHORIZED: u32 = 3;
/// The shortest interval, whatever `fresh_ttl` says: a zero TTL must not become a busy loop.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// The longest wait while backing off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// How long the poller waits before asking a keychain that did not answer again.
pub const KEYCHAIN_RETRY: Duration = Duration::from_secs(60);

/// The headers `gh agent-task list` sends with its list request besides `Authorization:
/// Bearer` and `User-Agent` (Weir keeps its own, not a key header): go-gh's defaults (cli/go-gh
/// `pkg/api/http_client.go` `setDefaultHeaders`, commit 20cd25e6), then gh's CAPI transport
/// (cli/cli `pkg/cmd/agent-task/capi/client.go`, commit 1b5130e1), which sets the API version
/// and adds the integration id; Go's transport asks for gzip. `Accept`, `Accept-Encoding` and
/// `X-GitHub-Api-Version` are key headers: with any of them different the poll would be a key
/// of its own and never share gh's entry.
pub const GH_HEADERS: [(&str, &str); 5] = [
    (
        "accept",
        "application/vnd.github.merge-info-preview+json, application/vnd.github.nebula-preview",
    ),
    ("content-type", "application/json; charset=utf-8"),
    ("x-github-api-version", "2026-01-09"),
    ("copilot-integration-id", "copilot-4-cli"),
    ("accept-encoding", "gzip"),
];

/// Automatic's offline sub-state, as the request path sees it.
const OFFLINE: Behaviour = Behaviour::Hold(Hold::Offline);

/// The GitHub Status view, read at each poll (the watcher is owned by the control API).
pub(crate) type GithubView = Arc<dyn Fn() -> Option<GithubStatus> + Send + Sync>;

pub(crate) struct Poller {
    pub sessions: Arc<Sessions>,
    pub proxy: Arc<Proxy>,
    pub github: GithubView,
}

/// What one poll got.
enum Polled {
    Listed,
    Unauthorized,
    Failed,
}

/// What the poller waits on: shutdown and token changes.
struct Waits<'a> {
    stop: &'a mut tokio::sync::watch::Receiver<bool>,
    changes: &'a mut tokio::sync::watch::Receiver<u64>,
}

impl Waits<'_> {
    /// Until the token changes (or Weir stops).
    async fn for_token(&mut self) -> RunEnd {
        tokio::select! {
            r = self.changes.changed() => match r {
                Ok(()) => RunEnd::TokenChanged,
                Err(_) => RunEnd::Stopping,
            },
            _ = self.stop.changed() => RunEnd::Stopping,
        }
    }

    /// `delay`, or less when the token changes or Weir stops (then why).
    async fn sleep(&mut self, delay: Duration) -> Option<RunEnd> {
        tokio::select! {
            _ = tokio::time::sleep(delay) => None,
            end = self.for_token() => Some(end),
        }
    }
}

/// How a polling run with one token ended.
enum RunEnd {
    TokenChanged,
    Stopping,
}

impl Poller {
    pub fn spawn(self) {
        let bus = self.proxy.bus.clone();
        bus.spawn(self.run());
    }

    async fn run(self) {
        let mut stop = self.proxy.bus.stopping();
        let mut changes = self.sessions.token_changes();
        loop {
            if *stop.borrow() {
                return;
            }
            // Every change so far is read with the keychain below.
            changes.borrow_and_update();
            // A keychain that is slow to answer must not hold up the engine's shutdown.
            let token = tokio::select! {
                t = self.token() => t,
                _ = stop.wait_for(|s| *s) => return,
            };
            let mut w = Waits {
                stop: &mut stop,
                changes: &mut changes,
            };
            let end = match token.and_then(|t| Ok((self.upstream(&t)?, t))) {
                Ok((up, token)) => {
                    self.sessions.clear();
                    self.poll_with(&token, up, &mut w).await
                }
                Err(reason) => {
                    self.sessions.clear();
                    self.sessions.set_poller(PollerState::Off, Some(reason));
                    if reason == PollerReason::KeychainUnavailable {
                        // A locked keychain unlocks without telling Weir: look again.
                        w.sleep(KEYCHAIN_RETRY)
                            .await
                            .unwrap_or(RunEnd::TokenChanged)
                    } else {
                        w.for_token().await
                    }
                }
            };
            if matches!(end, RunEnd::Stopping) {
                return;
            }
        }
    }

    /// The stored token, or why there is none. Never logged.
    async fn token(&self) -> Result<String, PollerReason> {
        let Some(q) = self.proxy.queue.open() else {
            return Err(PollerReason::NoKeychain);
        };
        if !q.secrets.kind().is_persistent() {
            return Err(PollerReason::NoKeychain);
        }
        match q.secrets.get(Account::GithubToken.as_str()).await {
            Ok(Some(t)) if !t.trim().is_empty() => Ok(t.trim().to_string()),
            Ok(_) => Err(PollerReason::NoToken),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the stored GitHub token now; asking the keychain again in a minute");
                Err(PollerReason::KeychainUnavailable)
            }
        }
    }

    /// The upstream of `token`'s account (see [`super::agents_upstream`]).
    fn upstream(&self, token: &str) -> Result<UpstreamIndex, PollerReason> {
        super::agents_upstream(&self.proxy.upstreams, token).ok_or(PollerReason::NoUpstream)
    }

    /// Polls with `token` until another token (or none) is stored, or Weir stops.
    async fn poll_with(&self, token: &str, up: UpstreamIndex, w: &mut Waits<'_>) -> RunEnd {
        let settings = self.proxy.settings();
        let class = settings.classes.get(RouteClass::List);
        let interval = class.fresh_ttl.max(MIN_INTERVAL);
        let backoff = Backoff::new(interval, MAX_BACKOFF.max(interval));
        let upstream = self.proxy.upstreams.get(up);
        let mut jitter = upstream.gate.jitter();
        let url = format!(
            "{}{LIST_PATH}",
            upstream.settings.origin.to_string().trim_end_matches('/')
        );
        let loopback = super::loopback(&self.proxy, RouteClass::List);
        let (mut attempt, mut unauthorized) = (0u32, 0u32);
        self.sessions.set_poller(PollerState::Polling, None);
        loop {
            if self.proxy.modes.behaviour() == OFFLINE {
                self.sessions
                    .set_poller(PollerState::Polling, Some(PollerReason::Offline));
                if let Some(end) = self.until_online(token, w).await {
                    return end;
                }
                // Back online: poll now, on the interval again (the failures were the network's).
                attempt = 0;
                continue;
            }
            let polled = if self.proxy.is_paused() {
                None
            } else {
                Some(self.poll_once(&loopback, &url, token).await)
            };
            let failed = match polled {
                Some(Polled::Listed) => {
                    unauthorized = 0;
                    None
                }
                Some(Polled::Unauthorized) => {
                    unauthorized += 1;
                    if unauthorized >= MAX_UNAUTHORIZED {
                        tracing::warn!(
                            count = unauthorized,
                            "GitHub refused the stored token; the sessions poller stopped (store a token again to restart it)"
                        );
                        self.sessions.set_poller(
                            PollerState::StoppedUnauthorized,
                            Some(PollerReason::Unauthorized),
                        );
                        return w.for_token().await;
                    }
                    Some(PollerReason::Unauthorized)
                }
                Some(Polled::Failed) => Some(PollerReason::UpstreamError),
                None => None,
            };
            let reason = self.hold_back(up).or(failed);
            let delay = match reason {
                None => {
                    attempt = 0;
                    let reason = self.proxy.is_paused().then_some(PollerReason::Paused);
                    self.sessions.set_poller(PollerState::Polling, reason);
                    interval
                }
                Some(r) => {
                    let d = backoff.delay_with_hint(attempt, Some(interval), jitter.as_mut());
                    attempt = attempt.saturating_add(1);
                    self.sessions.set_poller(PollerState::BackingOff, Some(r));
                    d
                }
            };
            if let Some(end) = self.sleep_keeping(token, delay, w).await {
                return end;
            }
        }
    }

    /// Sleeps `delay`; a token change that leaves the same token stored (stored again, or a
    /// change that raced the first read) keeps the schedule. `Some` when the run must end.
    async fn sleep_keeping(
        &self,
        token: &str,
        delay: Duration,
        w: &mut Waits<'_>,
    ) -> Option<RunEnd> {
        let deadline = tokio::time::Instant::now() + delay;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match w.sleep(left).await {
                None => return None,
                Some(RunEnd::Stopping) => return Some(RunEnd::Stopping),
                Some(RunEnd::TokenChanged) => {
                    w.changes.borrow_and_update();
                    if self.token().await.ok().as_deref() != Some(token) {
                        return Some(RunEnd::TokenChanged);
                    }
                }
            }
        }
    }

    /// Waits while Weir is offline; `Some` when the run must end first (as
    /// [`Self::sleep_keeping`]: the same token stored again keeps waiting).
    async fn until_online(&self, token: &str, w: &mut Waits<'_>) -> Option<RunEnd> {
        let mut modes = self.proxy.modes.watch();
        loop {
            tokio::select! {
                // The guard `wait_for` returns is dropped here: it must not live across an
                // await.
                online = async { modes.wait_for(|b| *b != OFFLINE).await.is_ok() } => {
                    // The sender lives as long as the engine's modes, which `self` holds.
                    return (!online).then_some(RunEnd::Stopping);
                }
                end = w.for_token() => match end {
                    RunEnd::Stopping => return Some(RunEnd::Stopping),
                    RunEnd::TokenChanged => {
                        w.changes.borrow_and_update();
                        if self.token().await.ok().as_deref() != Some(token) {
                            return Some(RunEnd::TokenChanged);
                        }
                    }
                },
            }
        }
    }

    /// Why the next poll should wait longer even after a good answer: the breaker is open or
    /// probing, or GitHub Status shows an unresolved Copilot incident.
    fn hold_back(&self, up: UpstreamIndex) -> Option<PollerReason> {
        let breaker = self.proxy.upstreams.get(up).gate.breaker.state();
        // Degraded still lets calls through (it only warns), so it is not a reason to hold back.
        if matches!(
            breaker,
            weir_resilience::State::Open | weir_resilience::State::HalfOpen
        ) {
            return Some(PollerReason::BreakerOpen);
        }
        (self.github)()
            .is_some_and(|g| copilot_incident(&g))
            .then_some(PollerReason::GithubIncident)
    }

    async fn poll_once(&self, loopback: &Loopback, url: &str, token: &str) -> Polled {
        let at = SystemTime::now();
        self.sessions.polled(at);
        let headers: Vec<(&'static str, String)> = GH_HEADERS
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        let resp = match loopback
            .send(Method::GET, url, token, &headers, Bytes::new())
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "the sessions poll got no answer");
                return Polled::Failed;
            }
        };
        if resp.status() == StatusCode::UNAUTHORIZED {
            return Polled::Unauthorized;
        }
        if !resp.status().is_success() {
            tracing::debug!(status = %resp.status(), "the sessions poll failed");
            return Polled::Failed;
        }
        // Asked with gh's `Accept-Encoding: gzip`, the answer may come compressed.
        let Some(body) = crate::pipeline::decoded_body(resp.headers(), resp.body()) else {
            tracing::warn!("the sessions poll's answer cannot be decoded");
            return Polled::Failed;
        };
        let Some(list) = model::parse_list(&body) else {
            tracing::warn!("the sessions poll's answer is not a session list");
            return Polled::Failed;
        };
        for (change, session) in self.sessions.listed(list, at) {
            self.proxy.bus.emit(Event::Session {
                change,
                session,
                at: SystemTime::now(),
            });
        }
        Polled::Listed
    }
}

/// An unresolved incident that names a Copilot component, or Copilot in its title.
pub fn copilot_incident(g: &GithubStatus) -> bool {
    let copilot = |s: &str| s.to_ascii_lowercase().contains("copilot");
    g.incidents
        .iter()
        .any(|i| copilot(&i.name) || i.components.iter().any(|c| copilot(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(name: &str, components: &[&str]) -> weir_status::Incident {
        weir_status::Incident {
            id: "i".into(),
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

    /// The poller's list request and `gh agent-task list`'s, header for header as gh's source
    /// sends them (go-gh defaults, the CAPI transport, Go's gzip; its own `User-Agent` and
    /// `Time-Zone`), are one cache key; a VS Code-style `Accept` is another.
    #[test]
    fn the_poll_and_ghs_list_are_one_cache_key() {
        use crate::cache::CacheKey;
        let settings = crate::config::Settings::default();
        let id = crate::identity::IdentityKey::new([7; 32]);
        let key = |pq: &str, h: &[(&str, &str)]| {
            let mut m = http::HeaderMap::new();
            for (k, v) in h {
                m.append(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m.insert("authorization", "Bearer gho_x".parse().unwrap());
            let who = id.identify(&m);
            CacheKey::new(
                &settings.upstreams[0],
                &Method::GET,
                pq,
                &who,
                &m,
                &settings.key_headers,
            )
        };
        let mut poll: Vec<(&str, &str)> = GH_HEADERS.to_vec();
        poll.push(("user-agent", super::super::loopback::USER_AGENT));
        let gh = [
            ("User-Agent", "GitHub CLI 2.83.0"),
            ("Time-Zone", "Europe/Paris"),
            ("Content-Type", "application/json; charset=utf-8"),
            (
                "Accept",
                "application/vnd.github.merge-info-preview+json, application/vnd.github.nebula-preview",
            ),
            ("X-GitHub-Api-Version", "2026-01-09"),
            ("Copilot-Integration-Id", "copilot-4-cli"),
            ("Accept-Encoding", "gzip"),
        ];
        let gh_list = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";
        assert_eq!(super::super::LIST_PATH, gh_list);
        assert_eq!(key(super::super::LIST_PATH, &poll), key(gh_list, &gh));
        let vscode_accept = [("accept", "application/json")];
        assert_ne!(key(gh_list, &vscode_accept), key(gh_list, &gh));
    }

    #[test]
    fn only_copilot_incidents_hold_the_poller_back() {
        let mut g = GithubStatus::initial("https://www.githubstatus.com");
        assert!(!copilot_incident(&g));
        g.incidents = vec![incident("Degraded Git operations", &["Git Operations"])];
        assert!(!copilot_incident(&g));
        g.incidents
            .push(incident("Disruption with some services", &["Copilot"]));
        assert!(copilot_incident(&g));
        g.incidents = vec![incident("Copilot coding agent delays", &[])];
        assert!(copilot_incident(&g));
    }
}
