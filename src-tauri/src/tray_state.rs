//! What the tray shows, as a pure function of the engine's status snapshot (as JSON) and the
//! events seen recently: [`tray_view`] → [`TrayView`]. No Tauri here, so it is unit-tested.
//!
//! The snapshot is read as `serde_json::Value` on purpose: fields the engine has not grown yet
//! (`upstreams[].breaker`, `queue`, `github`) read as "unknown" instead of failing to compile or
//! parse, and events fill the gap where they can.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;
use weir::events::Event;

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

/// A circuit breaker's state as the engine spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
    Unknown,
}

impl BreakerState {
    pub fn parse(s: &str) -> BreakerState {
        match s {
            "closed" => BreakerState::Closed,
            "open" => BreakerState::Open,
            "half_open" => BreakerState::HalfOpen,
            _ => BreakerState::Unknown,
        }
    }

    fn word(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "OPEN",
            BreakerState::HalfOpen => "half-open (probing)",
            BreakerState::Unknown => "state unknown",
        }
    }
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
}

#[derive(Debug, Clone)]
struct BreakerSeen {
    state: BreakerState,
    at: SystemTime,
}

#[derive(Debug, Clone)]
struct GithubSeen {
    change: String,
    title: String,
    url: Option<String>,
}

/// The last breaker transition per upstream and the last GitHub change, from the event stream.
#[derive(Debug, Clone, Default)]
pub struct Recent {
    breakers: BTreeMap<String, BreakerSeen>,
    github: Option<GithubSeen>,
}

impl Recent {
    pub fn record(&mut self, event: &Event) {
        match event {
            Event::Breaker {
                upstream, to, at, ..
            } => {
                self.breakers.insert(
                    upstream.clone(),
                    BreakerSeen {
                        state: BreakerState::parse(to),
                        at: *at,
                    },
                );
            }
            Event::Github {
                change, title, url, ..
            } => {
                if matches!(
                    change.as_str(),
                    "incident_opened" | "incident_updated" | "incident_resolved"
                ) {
                    self.github = Some(GithubSeen {
                        change: change.clone(),
                        title: title.clone(),
                        url: url.clone(),
                    });
                }
            }
            Event::Paused { .. } | Event::Queue { .. } => {}
        }
    }
}

/// Builds the view. `clock` formats an instant for display ("10:02" in local time in the app).
pub fn tray_view(
    status: &Value,
    recent: &Recent,
    clock: &dyn Fn(SystemTime) -> String,
) -> TrayView {
    let paused = status
        .get("paused")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut open = Vec::new();
    let mut degraded = Vec::new();
    let mut any_unknown = false;
    let mut upstream_lines = Vec::new();
    for up in status
        .get("upstreams")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = up.get("name").and_then(Value::as_str).unwrap_or("upstream");
        let (state, since) = breaker_of(up, recent.breakers.get(name));
        match state {
            BreakerState::Open => open.push(name.to_string()),
            BreakerState::HalfOpen => degraded.push(format!("{name} probing")),
            BreakerState::Unknown => any_unknown = true,
            BreakerState::Closed => {}
        }
        let since = since
            .map(|t| format!(" since {}", clock(t)))
            .unwrap_or_default();
        upstream_lines.push(format!("{name}: {}{since}", state.word()));
    }
    let (queue_line, queue_trouble) = queue_line(status.get("queue"));
    if let Some(t) = queue_trouble {
        degraded.push(t);
    }
    let (github_line, github_url, github_trouble) =
        github_line(status.get("github"), recent.github.as_ref());
    if github_trouble {
        degraded.push("GitHub incident".to_string());
    }
    let (overall, overall_line) = if paused {
        (
            Overall::Paused,
            "Weir: paused (passing traffic through)".to_string(),
        )
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
    } else if any_unknown {
        (Overall::Unknown, "Weir: state unknown".to_string())
    } else {
        (Overall::Healthy, "Weir: healthy".to_string())
    };
    let mut tooltip = vec![overall_line.clone()];
    tooltip.extend(upstream_lines.iter().cloned());
    tooltip.push(queue_line.clone());
    tooltip.push(github_line.clone());
    TrayView {
        overall,
        overall_line,
        tooltip: tooltip.join("\n"),
        upstream_lines,
        queue_line,
        github_line,
        github_url,
        paused,
    }
}

/// The snapshot's breaker if it has one, else the last event, else unknown.
fn breaker_of(up: &Value, seen: Option<&BreakerSeen>) -> (BreakerState, Option<SystemTime>) {
    if let Some(b) = up.get("breaker").filter(|b| b.is_object()) {
        let state = b
            .get("state")
            .and_then(Value::as_str)
            .map_or(BreakerState::Unknown, BreakerState::parse);
        let since = b.get("since").and_then(Value::as_str).and_then(parse_time);
        return (state, since);
    }
    match seen {
        Some(s) => (s.state, Some(s.at)),
        None => (BreakerState::Unknown, None),
    }
}

fn parse_time(s: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(SystemTime::from)
}

fn count(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// "3 creates queued, 1 in doubt"; the second value names trouble worth a degraded state.
/// Failed creates are final (each was notified) and stay in the dashboard's history, so they
/// neither degrade the tray nor clutter the line.
fn queue_line(queue: Option<&Value>) -> (String, Option<String>) {
    let Some(q) = queue.filter(|q| q.is_object()) else {
        return ("Create queue: unknown".to_string(), None);
    };
    if q.get("available").and_then(Value::as_bool) == Some(false) {
        let why = q
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no details");
        return (
            format!("Create queue unavailable: {why}"),
            Some("create queue unavailable".to_string()),
        );
    }
    let waiting = count(q, "queued") + count(q, "replaying");
    let in_doubt = count(q, "in_doubt");
    let mut line = match waiting {
        0 => "No creates queued".to_string(),
        1 => "1 create queued".to_string(),
        n => format!("{n} creates queued"),
    };
    if in_doubt > 0 {
        line.push_str(&format!(", {in_doubt} in doubt"));
    }
    let trouble = (in_doubt > 0).then(|| "creates in doubt".to_string());
    (line, trouble)
}

/// The GitHub Status line, the URL it opens, and whether GitHub reports trouble.
fn github_line(
    github: Option<&Value>,
    seen: Option<&GithubSeen>,
) -> (String, Option<String>, bool) {
    if github.is_some_and(Value::is_null) {
        // The engine says so explicitly: the watcher is off in the config.
        return ("GitHub Status: not watched".to_string(), None, false);
    }
    if let Some(g) = github.filter(|g| g.is_object()) {
        let page = g
            .get("page_url")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(inc) = g
            .get("incidents")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            let name = inc
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("incident");
            let url = inc
                .get("shortlink")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(page);
            return (format!("GitHub incident: {name}"), url, true);
        }
        let indicator = g.get("indicator").and_then(Value::as_str);
        let description = g.get("description").and_then(Value::as_str);
        return match (indicator, description) {
            (None, _) => ("GitHub Status: unknown".to_string(), page, false),
            (Some(i), d) => {
                let trouble = matches!(i, "minor" | "major" | "critical");
                (format!("GitHub Status: {}", d.unwrap_or(i)), page, trouble)
            }
        };
    }
    match seen {
        Some(s) if s.change == "incident_resolved" => (
            format!("GitHub: resolved: {}", s.title),
            s.url.clone(),
            false,
        ),
        Some(s) => (format!("GitHub incident: {}", s.title), s.url.clone(), true),
        None => ("GitHub Status: unknown".to_string(), None, false),
    }
}

#[cfg(test)]
#[path = "tray_state_tests.rs"]
mod tests;
