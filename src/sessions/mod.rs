//! The agent-sessions companion: while a GitHub token is stored in the keychain, Weir polls
//! that token's agent-session list through its own pipeline and keeps the result for the
//! dashboard's **Agent sessions** view and the tray (counts line, recent sessions, and a
//! notification when a session finishes, fails or needs review).
//!
//! - [`model`]: the list answer → [`SessionSummary`]s, groups and counts;
//! - [`changes`]: two lists → finished / failed / needs-review changes (pure);
//! - [`loopback`]: requests to Weir's own listener, so the poll and the dashboard's new task
//!   pass the normal request path (cache, coalescing, breaker, create dedupe and queue);
//! - [`poller`]: the loop — only while a token is stored, at the list class's fresh TTL, backing
//!   off with jitter while the breaker is open or GitHub Status shows a Copilot incident, and
//!   stopping after repeated 401s;
//! - [`create`]: the dashboard's new task, sent through the create path.

pub(crate) mod changes;
pub(crate) mod create;
pub(crate) mod loopback;
pub(crate) mod model;
pub(crate) mod poller;

use crate::status::{PollerReason, PollerState, SessionSummary, SessionsStatus};
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::watch;

/// The list path the companion polls: page 1 of the viewer's sessions, newest first, byte for
/// byte as `gh agent-task list` asks for it (Go's `url.Values.Encode`: sorted, `,` as `%2C`;
/// cli/cli `pkg/cmd/agent-task/capi/sessions.go`, commit 10db3894), sent with gh's key headers
/// ([`poller::GH_HEADERS`]), so its answers and the CLI's are one cache entry.
pub const LIST_PATH: &str =
    "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";

/// The upstream that serves the agents API for the stored GitHub token `token`: the Copilot
/// API host a trusted token answer (or gh's GraphQL answer) announced to that token or to
/// another credential of its account in the last day, the account's per-plan host where gh
/// and VS Code send its calls; else `copilot-api`, else the first one configured. What another
/// account was told is never used.
pub(crate) fn agents_upstream(
    upstreams: &crate::upstream::Upstreams,
    token: &str,
) -> Option<crate::config::UpstreamIndex> {
    if let Some(up) = upstreams.announced_to_token(token) {
        return Some(up);
    }
    upstreams
        .configured_with()
        .find(|(_, u)| u.settings.name == "copilot-api")
        .map(|(up, _)| up)
        .or_else(|| upstreams.configured().next())
}

/// A loopback client to Weir's own listener, bounded by `class`'s deadline plus a margin.
pub(crate) fn loopback(
    proxy: &crate::pipeline::Proxy,
    class: crate::config::RouteClass,
) -> loopback::Loopback {
    let s = proxy.settings();
    loopback::Loopback {
        addr: std::net::SocketAddr::new(s.listen.ip(), proxy.port),
        timeout: s.classes.get(class).deadline + std::time::Duration::from_secs(10),
        max_body_bytes: s.limits.max_body_bytes,
    }
}

/// The companion's shared state: what the poller last saw, read by the status and the API.
pub(crate) struct Sessions {
    state: Mutex<State>,
    /// Bumped when a token is stored or removed, so the poller re-reads the keychain at once.
    /// A counter, not a one-shot signal: a change the poller read with the token already is
    /// not a second change (no extra poll).
    token_generation: watch::Sender<u64>,
}

struct State {
    status: SessionsStatus,
    known: changes::Known,
}

impl Sessions {
    pub fn new() -> Sessions {
        Sessions {
            state: Mutex::new(State {
                status: SessionsStatus {
                    poller: PollerState::Off,
                    reason: Some(PollerReason::NoToken),
                    counts: Default::default(),
                    summary: Default::default(),
                    polls: 0,
                    revision: 0,
                    last_polled_at: None,
                    last_ok_at: None,
                    recent: Vec::new(),
                },
                known: Default::default(),
            }),
            token_generation: watch::channel(0).0,
        }
    }

    /// The status part of the status document.
    pub fn status(&self) -> SessionsStatus {
        let mut s = self.with(|st| st.status.clone());
        s.summary = s.counts.summary();
        s
    }

    /// Tells the poller a token was stored or removed.
    pub fn token_changed(&self) {
        self.token_generation
            .send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Watches token changes (the poller marks each one seen before it reads the keychain).
    fn token_changes(&self) -> watch::Receiver<u64> {
        self.token_generation.subscribe()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic while holding the lock leaves plain data behind: keep using it.
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    fn set_poller(&self, poller: PollerState, reason: Option<PollerReason>) {
        self.with(|st| {
            st.status.poller = poller;
            st.status.reason = reason;
        });
    }

    /// Forgets the sessions of a token that is gone (or replaced).
    fn clear(&self) {
        self.with(|st| {
            if !st.status.recent.is_empty() || st.status.counts.total > 0 {
                st.status.revision += 1;
            }
            st.status.recent.clear();
            st.status.counts = Default::default();
            st.status.last_ok_at = None;
            st.known.reset();
        });
    }

    fn polled(&self, at: SystemTime) {
        self.with(|st| {
            st.status.polls += 1;
            st.status.last_polled_at = Some(crate::time_fmt::rfc3339(at));
        });
    }

    /// Takes a fresh list; returns the changes to announce.
    fn listed(
        &self,
        list: Vec<SessionSummary>,
        at: SystemTime,
    ) -> Vec<(crate::events::SessionChange, SessionSummary)> {
        self.with(|st| {
            let changes = st.known.update(&list);
            let counts = model::counts(&list);
            let mut recent = list;
            recent.truncate(crate::status::RECENT_SESSIONS);
            if recent != st.status.recent || counts != st.status.counts {
                st.status.revision += 1;
            }
            st.status.recent = recent;
            st.status.counts = counts;
            st.status.last_ok_at = Some(crate::time_fmt::rfc3339(at));
            changes
        })
    }
}
