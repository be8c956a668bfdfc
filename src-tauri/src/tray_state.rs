//! What the tray shows, as a pure function of the engine's typed status snapshot and the events
//! seen recently: [`tray_view`] → [`TrayView`]. No Tauri here, so it is unit-tested against a
//! real engine's output. [`view_of`] is the one place the tray reads the engine.

use serde::Serialize;
use std::time::SystemTime;
use weir::events::{BreakerState, Event, GithubChange, QueueState};
use weir::status::{QueueStatus, StatusSnapshot, UpstreamStatus};
use weir::EngineHandle;

/// The one-word state behind the tray icon, worst first: `Paused` wins because while paused
/// Weir protects nothing, whatever its breakers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overall {
    Paused,
    BreakerOpen,
    Degraded,
    Unknown,
    Healthy,
}

/// Everything the tray icon, tooltip and menu show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrayView {
    pub overall: Overall,
    pub overall_line: String,
    pub tooltip: String,
    /// One per configured upstream, in config order: "copilot-api: closed since 10:02".
    pub upstream_lines: Vec<String>,
    pub queue_line: String,
    pub github_line: String,
    /// The incident (or status page) the GitHub line opens.
    pub github_url: Option<String>,
    pub paused: bool,
    /// Cache only is the chosen mode.
    pub cache_only: bool,
    /// "Agent sessions: 2 running, 1 ready for review" (or why there are none).
    pub sessions_line: String,
    /// "Restart engine", naming the changed settings that wait for it.
    pub restart_line: String,
    /// The submenu of recent agent sessions, newest first; a click opens `url`.
    pub recent_sessions: Vec<SessionLine>,
    /// "3 teammates see copilot-api failing" (or that none do / the link is down); `None` when
    /// `[team]` is not configured.
    pub team_line: Option<String>,
    /// Offers of creates to the local agent, waiting for Confirm / Decline; `None` when no
    /// `[local_agent]` is configured.
    pub handoffs: Option<HandoffLines>,
    /// "Network: metered (forced)": the title of the network submenu.
    pub network_line: String,
    /// The developer's override, for the submenu's check marks: `None` follows the OS.
    pub network_forced: Option<bool>,
}

/// The "Local agent offers" submenu: its title and one entry per waiting offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandoffLines {
    /// "Local agent: 1 offer waiting" / "Local agent: no offers waiting".
    pub title: String,
    pub offers: Vec<HandoffLine>,
}

/// One waiting offer: its id (its menu line opens its review view) and what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandoffLine {
    pub id: i64,
    /// "octo/app: Fix the login bug" (statement cut to 40 characters).
    pub label: String,
}

/// How many offers the submenu lists (the dashboard lists them all).
pub const SUBMENU_OFFERS: usize = 5;

/// One line of the recent-sessions submenu and the page its click opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionLine {
    pub label: String,
    pub url: String,
}

/// How many recent sessions the submenu shows (the engine keeps a few more for the dashboard).
pub const SUBMENU_SESSIONS: usize = 8;

/// GitHub Status' page-wide indicator. The engine carries Statuspage's word as a string
/// (`weir_status::GithubStatus::indicator`); it is turned into this enum here, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indicator {
    None,
    Maintenance,
    Minor,
    Major,
    Critical,
    /// A value Statuspage introduced after this was written.
    Other,
}

impl Indicator {
    pub fn from_statuspage(word: &str) -> Indicator {
        match word {
            "none" => Indicator::None,
            "maintenance" => Indicator::Maintenance,
            "minor" => Indicator::Minor,
            "major" => Indicator::Major,
            "critical" => Indicator::Critical,
            _ => Indicator::Other,
        }
    }

    /// GitHub itself reports trouble.
    pub fn is_trouble(self) -> bool {
        matches!(
            self,
            Indicator::Minor | Indicator::Major | Indicator::Critical
        )
    }
}

fn breaker_word(state: BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::Open => "OPEN",
        BreakerState::HalfOpen => "half-open (probing)",
        BreakerState::Degraded => "degraded",
    }
}

#[derive(Debug, Clone)]
struct BreakerSeen {
    upstream: String,
    state: BreakerState,
    at: SystemTime,
}

#[derive(Debug, Clone)]
struct GithubSeen {
    change: GithubChange,
    title: String,
    url: Option<String>,
}

/// What the event stream adds to the snapshot: the time of each upstream's last breaker
/// transition (used when the snapshot's `since` cannot be read) and the last GitHub incident
/// change (a resolved incident is gone from the snapshot, but worth a line until GitHub reports
/// something else).
#[derive(Debug, Clone, Default)]
pub struct Recent {
    breakers: Vec<BreakerSeen>,
    github: Option<GithubSeen>,
}

impl Recent {
    pub fn record(&mut self, event: &Event) {
        match event {
            Event::Breaker {
                upstream, to, at, ..
            } => {
                let seen = BreakerSeen {
                    upstream: upstream.clone(),
                    state: *to,
                    at: *at,
                };
                match self.breakers.iter_mut().find(|b| &b.upstream == upstream) {
                    Some(b) => *b = seen,
                    None => self.breakers.push(seen),
                }
            }
            Event::Github {
                change, title, url, ..
            } if change.is_incident() => {
                self.github = Some(GithubSeen {
                    change: *change,
                    title: title.clone(),
                    url: url.clone(),
                });
            }
            Event::Github { .. }
            | Event::Paused { .. }
            | Event::Queue { .. }
            | Event::ModeChanged { .. }
            | Event::Team { .. }
            | Event::SettingsApplied { .. }
            | Event::SettingsRejected { .. }
            | Event::Session { .. }
            | Event::ModelFallback { .. }
            | Event::Network { .. }
            | Event::Handoff { .. } => {}
        }
    }

    fn breaker(&self, upstream: &str) -> Option<&BreakerSeen> {
        self.breakers.iter().find(|b| b.upstream == upstream)
    }
}

/// Reads the engine's whole snapshot (queue counts included) and builds the view: what the
/// tray shows, read the way the tray reads it.
pub async fn view_of(
    engine: &EngineHandle,
    recent: &Recent,
    clock: &(dyn Fn(SystemTime) -> String + Sync),
) -> TrayView {
    tray_view(&engine.status().await, recent, clock)
}

/// Builds the view. `clock` formats an instant for display ("10:02" in local time in the app).
pub fn tray_view(
    status: &StatusSnapshot,
    recent: &Recent,
    clock: &dyn Fn(SystemTime) -> String,
) -> TrayView {
    let mut open = Vec::new();
    let mut degraded = Vec::new();
    let mut upstream_lines = Vec::new();
    for up in &status.upstreams {
        let (state, since) = breaker_of(up, recent);
        match state {
            BreakerState::Open => open.push(up.name.clone()),
            BreakerState::HalfOpen => degraded.push(format!("{} probing", up.name)),
            BreakerState::Degraded => degraded.push(format!("{} degraded", up.name)),
            BreakerState::Closed => {}
        }
        let since = since
            .map(|t| format!(" since {}", clock(t)))
            .unwrap_or_default();
        upstream_lines.push(format!("{}: {}{since}", up.name, breaker_word(state)));
    }
    let (queue_line, queue_trouble, queue_unknown) = queue_line(&status.queue);
    if let Some(t) = queue_trouble {
        degraded.push(t);
    }
    let (github_line, github_url, github_trouble) = github_line(status, recent.github.as_ref());
    if github_trouble {
        degraded.push("GitHub incident".to_string());
    }
    // Cache only and offline: Weir answers from its cache and sends nothing upstream.
    let held = match status.mode.mode {
        // The reason (long: every upstream's error) goes to the tooltip, not the menu line.
        weir::mode::ModeKind::Offline => {
            Some("Weir: offline — answering from cache, probing the upstreams".to_string())
        }
        weir::mode::ModeKind::CacheOnly => {
            Some("Weir: cache only (nothing sent upstream)".to_string())
        }
        weir::mode::ModeKind::Automatic | weir::mode::ModeKind::PassThrough => None,
    };
    let (overall, overall_line) = if status.paused {
        (
            Overall::Paused,
            "Weir: paused (passing traffic through)".to_string(),
        )
    } else if let Some(line) = held {
        (Overall::Degraded, line)
    } else if !open.is_empty() {
        (
            Overall::BreakerOpen,
            format!("Weir: circuit open for {}", open.join(", ")),
        )
    } else if !degraded.is_empty() {
        (
            Overall::Degraded,
            format!("Weir: degraded ({})", degraded.join(", ")),
        )
    } else if queue_unknown {
        (Overall::Unknown, "Weir: state unknown".to_string())
    } else {
        (Overall::Healthy, "Weir: healthy".to_string())
    };
    let mut tooltip = vec![overall_line.clone()];
    if status.mode.mode == weir::mode::ModeKind::Offline {
        tooltip.push(status.mode.reason.clone());
    }
    tooltip.extend(upstream_lines.iter().cloned());
    tooltip.push(queue_line.clone());
    tooltip.push(github_line.clone());
    // The agent-sessions companion, while a token is stored; teammates' signals, when any.
    if status.sessions.poller != weir::status::PollerState::Off {
        tooltip.push(format!("Agent sessions: {}", status.sessions.summary));
    }
    if let Some(team) = status.team.as_ref().and_then(|t| t.summary.clone()) {
        tooltip.push(team);
    }
    // Model fallback episodes: a different failure from the agent-sessions control plane's,
    // so their own lines, never the sessions line.
    for m in &status.models {
        if let Some(ep) = &m.episode {
            let n = ep.fallbacks;
            let s = if n == 1 { "" } else { "s" };
            tooltip.push(format!("Models: {} → {} ({n} fallback{s})", m.model, ep.to));
        }
    }
    if let Some(h) = status.handoffs.configured.then_some(&status.handoffs) {
        if !h.pending.is_empty() {
            tooltip.push(handoff_lines(h).title);
        }
    }
    // Metered changes what policy does (lists may come from the cache only): worth a line.
    if status.network.state.metered {
        tooltip.push(format!("Network: {}", status.network.label));
    }
    // A developer's rule the organisation's policy overrides: say so where they look first.
    match status.policy.refused.as_slice() {
        [] => {}
        [one] => tooltip.push(format!("Policy: {}", one.message)),
        many => tooltip.push(format!(
            "Policy: {} of your rules are overridden by the organisation's policy (see the dashboard)",
            many.len()
        )),
    }
    TrayView {
        overall,
        overall_line,
        tooltip: tooltip.join("\n"),
        upstream_lines,
        queue_line,
        github_line,
        github_url,
        paused: status.paused,
        cache_only: status.mode.chosen == weir::mode::Mode::CacheOnly,
        sessions_line: sessions_line(&status.sessions),
        restart_line: restart_line(&status.settings.restart_required),
        recent_sessions: status
            .sessions
            .recent
            .iter()
            .take(SUBMENU_SESSIONS)
            .map(session_line)
            .collect(),
        team_line: status.team.as_ref().map(team_line),
        handoffs: status
            .handoffs
            .configured
            .then(|| handoff_lines(&status.handoffs)),
        network_line: format!("Network: {}", status.network.label),
        network_forced: status.network.state.forced,
    }
}

fn handoff_lines(h: &weir::status::HandoffsStatus) -> HandoffLines {
    let title = match h.pending.len() {
        0 => "Local agent: no offers waiting".to_string(),
        1 => "Local agent: 1 offer waiting".to_string(),
        n => format!("Local agent: {n} offers waiting"),
    };
    let offers = h
        .pending
        .iter()
        .take(SUBMENU_OFFERS)
        .map(|p| HandoffLine {
            id: p.id,
            label: format!("{}: {}", p.repo, shorten(&p.excerpt, 40)),
        })
        .collect();
    HandoffLines { title, offers }
}

/// "Running · octo/app: Fix the login bug": the group first (what the developer scans for),
/// then where and what. Long titles are cut so the menu stays narrow.
fn session_line(s: &weir::status::SessionSummary) -> SessionLine {
    use weir::status::SessionGroup;
    let group = match s.group {
        SessionGroup::Running => "Running",
        SessionGroup::ReadyForReview => "Ready for review",
        SessionGroup::Failed => "Failed",
        SessionGroup::Finished => "Finished",
        SessionGroup::Other => s.state.as_str(),
    };
    let what = s.title.as_deref().unwrap_or(&s.id);
    let what = shorten(what, 60);
    let label = match &s.repository {
        Some(repo) => format!("{group} · {repo}: {what}"),
        None => format!("{group} · {what}"),
    };
    SessionLine {
        label,
        url: s.url.clone(),
    }
}

/// At most `max` characters, ending in "…" when cut (never splits a character).
fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= max && !text.trim().contains('\n') {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// The teammates line: what peers report, else whether the link works.
fn team_line(t: &weir::status::TeamStatus) -> String {
    if let Some(summary) = &t.summary {
        return summary.clone();
    }
    if !t.connected {
        let why = t.error.as_deref().unwrap_or("not connected");
        return format!("Team signals: {why}");
    }
    match t.peers_seen {
        0 => "Team signals: connected, no teammate heard yet".to_string(),
        1 => "Teammates: 1 heard, no one sees trouble".to_string(),
        n => format!("Teammates: {n} heard, no one sees trouble"),
    }
}

/// The agent-sessions companion's line: its summary while it polls, else why it does not.
fn sessions_line(s: &weir::status::SessionsStatus) -> String {
    use weir::status::PollerState;
    match s.poller {
        PollerState::Off => "Agent sessions: store a GitHub token to see them".to_string(),
        PollerState::Polling => format!("Agent sessions: {}", s.summary),
        PollerState::BackingOff => format!("Agent sessions: {} (checking less often)", s.summary),
        PollerState::StoppedUnauthorized => {
            "Agent sessions: GitHub refused the stored token".to_string()
        }
    }
}

/// "Restart engine", naming the changed settings that only a restart puts in force.
fn restart_line(pending: &[weir::config::RestartKey]) -> String {
    if pending.is_empty() {
        return "Restart engine".to_string();
    }
    let keys: Vec<&str> = pending.iter().map(|k| k.as_str()).collect();
    format!("Restart engine (to apply {})", keys.join(", "))
}

/// The snapshot's breaker state, and since when: the snapshot's time, else the last event's if
/// it reported the same state.
fn breaker_of(up: &UpstreamStatus, recent: &Recent) -> (BreakerState, Option<SystemTime>) {
    let b = &up.guard.breaker;
    let since = parse_time(&b.since).or_else(|| {
        recent
            .breaker(&up.name)
            .filter(|seen| seen.state == b.state)
            .map(|seen| seen.at)
    });
    (b.state, since)
}

fn parse_time(s: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(SystemTime::from)
}

/// "3 creates queued, 1 in doubt", then trouble worth a degraded state, then whether the counts
/// are unknown. Failed creates are final (each was notified) and stay in the dashboard's
/// history, so they neither degrade the tray nor clutter the line.
fn queue_line(queue: &QueueStatus) -> (String, Option<String>, bool) {
    if !queue.available {
        let why = queue.error.as_deref().unwrap_or("no details");
        return (
            format!("Create queue unavailable: {why}"),
            Some("create queue unavailable".to_string()),
            false,
        );
    }
    let Some(counts) = queue.counts else {
        // The queue is there but its database did not answer this time.
        return ("Create queue: counts unknown".to_string(), None, true);
    };
    let waiting = counts.get(QueueState::Queued) + counts.get(QueueState::Replaying);
    let in_doubt = counts.get(QueueState::InDoubt);
    let mut line = match waiting {
        0 => "No creates queued".to_string(),
        1 => "1 create queued".to_string(),
        n => format!("{n} creates queued"),
    };
    if in_doubt > 0 {
        line.push_str(&format!(", {in_doubt} in doubt"));
    }
    let trouble = (in_doubt > 0).then(|| "creates in doubt".to_string());
    (line, trouble, false)
}

/// The GitHub Status line, the URL it opens, and whether GitHub reports trouble.
fn github_line(
    status: &StatusSnapshot,
    seen: Option<&GithubSeen>,
) -> (String, Option<String>, bool) {
    let Some(g) = &status.github else {
        // The watcher is off in the config.
        return ("GitHub Status: not watched".to_string(), None, false);
    };
    let page = Some(g.page_url.clone());
    if let Some(inc) = g.incidents.first() {
        let url = inc.shortlink.clone().or(page);
        return (format!("GitHub incident: {}", inc.name), url, true);
    }
    let Some(indicator) = g.indicator.as_deref() else {
        // No check has succeeded yet.
        return ("GitHub Status: unknown".to_string(), page, false);
    };
    let indicator = Indicator::from_statuspage(indicator);
    if let Some(s) = seen.filter(|s| s.change == GithubChange::IncidentResolved) {
        if !indicator.is_trouble() {
            return (
                format!("GitHub: resolved: {}", s.title),
                s.url.clone().or(page),
                false,
            );
        }
    }
    let words = g
        .description
        .clone()
        .or_else(|| g.indicator.clone())
        .unwrap_or_default();
    (
        format!("GitHub Status: {words}"),
        page,
        indicator.is_trouble(),
    )
}

#[cfg(test)]
#[path = "tray_state_tests.rs"]
mod tests;
