//! Desktop notifications for changes worth an interruption (breaker opened/closed, a queued
//! create replayed or failed, a GitHub incident opened/resolved), rate-limited per upstream.
//!
//! [`Limiter`] is pure (it takes instants), so the "at most one per upstream per 3 minutes, then
//! one summary" rule is tested without clocks; [`send`] hands a notice to notify-rust (D-Bus
//! `org.freedesktop.Notifications` on Linux, the native centres on macOS and Windows).

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use weir::events::{
    BreakerReason, BreakerState, Event, GithubChange, HandoffChange, ModelFallbackChange,
    QueueState, SessionChange, TeamChange,
};
use weir::mode::ModeKind;
use weir::network::MeteredSource;

/// How long an upstream stays quiet after a notification.
pub const WINDOW: Duration = Duration::from_secs(180);

/// One notification. `key` is what the limiter counts by: the upstream, or "GitHub".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub key: String,
    pub summary: String,
    pub body: String,
    pub level: Level,
}

/// How serious a notice is. Within a key's quiet window, a notice more serious than the one
/// last shown still goes out at once: "degraded" must not hide "circuit open" seconds later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    Info,
    Warning,
    Alert,
}

/// The notice an event deserves, if any (pause toggles and intermediate states get none).
pub fn notice_for(event: &Event) -> Option<Notice> {
    let n = |key: &str, summary: String, body: String| {
        Some(Notice {
            key: key.to_string(),
            summary,
            body,
            level: Level::Info,
        })
    };
    let with = |n: Option<Notice>, level: Level| n.map(|n| Notice { level, ..n });
    match event {
        Event::Breaker { upstream, to, reason, .. } => match to {
            BreakerState::Open => with(n(
                upstream,
                format!("{upstream}: circuit open"),
                format!("{reason}. Weir answers from its cache and queues new sessions until it recovers."),
            ), Level::Alert),
            BreakerState::Closed if matches!(reason, BreakerReason::Recovered(_)) => n(upstream, format!("{upstream}: back to normal"), format!("{reason}.")),
            BreakerState::Closed => n(upstream, format!("{upstream}: recovered"), format!("Circuit closed again: {reason}.")),
            BreakerState::Degraded => with(n(
                upstream,
                format!("{upstream} degraded"),
                format!("{reason}. Calls still go through; Weir is watching closely."),
            ), Level::Warning),
            BreakerState::HalfOpen => None,
        },
        Event::Queue { id, upstream, state, detail, .. } => match state {
            QueueState::Done => n(upstream, format!("Queued session #{id} created"), format!("Replayed to {upstream}. {detail}")),
            QueueState::Failed => n(upstream, format!("Queued session #{id} failed"), format!("{upstream} refused it: {detail}")),
            QueueState::Queued | QueueState::Replaying | QueueState::InDoubt | QueueState::Cancelled | QueueState::Expired
            | QueueState::Offered | QueueState::HandedOff => None,
        },
        Event::Github { change, title, url, .. } => {
            let link = url.as_deref().map(|u| format!("\n{u}")).unwrap_or_default();
            match change {
                GithubChange::IncidentOpened => n("GitHub", "GitHub incident".to_string(), format!("{title}{link}")),
                GithubChange::IncidentResolved => n("GitHub", "GitHub incident resolved".to_string(), format!("{title}{link}")),
                GithubChange::IncidentUpdated | GithubChange::ComponentChanged | GithubChange::ReachabilityChanged => None,
            }
        }
        Event::Paused { .. } | Event::SettingsApplied { .. } => None,
        // Offline is Weir's own decision: say when it starts and ends. A mode the user chose
        // needs no notification.
        Event::ModeChanged { from, to, reason, .. } => match (from, to) {
            (_, ModeKind::Offline) => n("mode", "Weir is offline".to_string(), format!("{reason}. Answering from the cache; creates are queued.")),
            (ModeKind::Offline, _) => n("mode", "Weir is back online".to_string(), format!("{reason}.")),
            _ => None,
        },
        Event::SettingsRejected { error, .. } => n("settings", "Weir settings refused".to_string(), format!("{error}. The previous settings stay in force.")),
        Event::Team { change, message, .. } => match change {
            TeamChange::Acting | TeamChange::Overruled => n("team", "Team signals".to_string(), message.clone()),
            TeamChange::Connected | TeamChange::Disconnected | TeamChange::Released => None,
        },
        // An offer waits for the developer (the tray menu has Confirm / Decline; nothing runs
        // without one); what became of it is worth a line too. Started and declined are the
        // developer's own doing.
        Event::Handoff { change, repo, rule, excerpt, detail, .. } => match change {
            HandoffChange::Offered => with(n(
                "handoff-offer",
                "Hand to your local agent?".to_string(),
                format!("{repo}: {excerpt}\nThe cloud cannot take it; rule {rule} allows your local agent. Review the whole task and confirm it in the dashboard (tray menu: Local agent offers)."),
            ), Level::Warning),
            // Results have their own key: the offer's notice must not hold back its outcome.
            HandoffChange::Finished => n("handoff-result", format!("Local agent finished: {repo}"), detail.clone()),
            HandoffChange::Expired => n("handoff-result", format!("Offer for {repo} expired"), "Back in the queue.".to_string()),
            HandoffChange::Started | HandoffChange::Declined => None,
        },
        // One notice when a model's fallback episode starts and one when it ends; the key is
        // the model, so a flapping model cannot drown the other notices.
        Event::ModelFallback { change, upstream, from, message, .. } => {
            let summary = match change {
                ModelFallbackChange::Started => "Model fallback",
                ModelFallbackChange::Ended => "Model back",
            };
            n(&format!("model-{upstream}-{from}"), summary.to_string(), message.clone())
        }
        // The OS saying the network became metered (or stopped being) changes what policy does;
        // the developer's own override needs no notice.
        Event::Network { to, source, reason, .. } => match source {
            MeteredSource::Os => {
                let summary = if *to { "Metered network" } else { "Network no longer metered" };
                n("network", summary.to_string(), format!("{reason}. Your metered-network policy rules {}.", if *to { "apply now" } else { "no longer apply" }))
            }
            MeteredSource::Forced | MeteredSource::Default => None,
        },
        Event::Session { change, session, .. } => {
            let summary = match change {
                SessionChange::Finished => "Agent session finished",
                SessionChange::Failed => "Agent session failed",
                SessionChange::NeedsReview => "Agent session ready for review",
            };
            let what = session.title.as_deref().unwrap_or(&session.id);
            let body = match &session.repository {
                Some(repo) => format!("{repo}: {what}"),
                None => what.to_string(),
            };
            n("sessions", summary.to_string(), body)
        }
    }
}

#[derive(Debug)]
struct KeyState {
    last_shown: Instant,
    /// The level of the notice that started the window.
    level: Level,
    held: u32,
    latest: Option<Notice>,
}

/// At most one notification per key per window; what arrives in between is counted and shown
/// as one summary ("N more changes") when the window ends. A notice more serious than the one
/// that started the window is shown at once and starts a new window (an escalation is news).
#[derive(Debug)]
pub struct Limiter {
    window: Duration,
    keys: HashMap<String, KeyState>,
}

impl Limiter {
    pub fn new(window: Duration) -> Limiter {
        Limiter {
            window,
            keys: HashMap::new(),
        }
    }

    /// `Some(notice)` to show now, `None` when it was held for the next summary.
    pub fn offer(&mut self, notice: Notice, now: Instant) -> Option<Notice> {
        match self.keys.get_mut(&notice.key) {
            Some(k)
                if now.saturating_duration_since(k.last_shown) < self.window
                    && notice.level <= k.level =>
            {
                k.held += 1;
                k.latest = Some(notice);
                None
            }
            Some(k) => {
                // The window passed before `due` flushed the held ones: say so in this notice.
                let mut notice = notice;
                if k.held > 0 {
                    notice
                        .body
                        .push_str(&format!("\n(+{} earlier {})", k.held, changes(k.held)));
                }
                *k = KeyState {
                    last_shown: now,
                    level: notice.level,
                    held: 0,
                    latest: None,
                };
                Some(notice)
            }
            None => {
                self.keys.insert(
                    notice.key.clone(),
                    KeyState {
                        last_shown: now,
                        level: notice.level,
                        held: 0,
                        latest: None,
                    },
                );
                Some(notice)
            }
        }
    }

    /// Summaries for keys whose window has ended with notices held; each restarts its window.
    pub fn due(&mut self, now: Instant) -> Vec<Notice> {
        let mut out = Vec::new();
        for (key, k) in self.keys.iter_mut() {
            if k.held == 0 || now.saturating_duration_since(k.last_shown) < self.window {
                continue;
            }
            let latest = k
                .latest
                .take()
                .map(|n| format!("Latest: {}", n.summary))
                .unwrap_or_default();
            out.push(Notice {
                key: key.clone(),
                summary: format!("{key}: {} more {}", k.held, changes(k.held)),
                body: latest,
                level: Level::Info,
            });
            k.held = 0;
            k.last_shown = now;
            k.level = Level::Info;
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

fn changes(n: u32) -> &'static str {
    if n == 1 {
        "change"
    } else {
        "changes"
    }
}

/// Shows a notice. Blocking (D-Bus round trip on Linux): call from `spawn_blocking`.
pub fn send(notice: &Notice) -> Result<(), notify_rust::error::Error> {
    notify_rust::Notification::new()
        .appname("Weir")
        .summary(&notice.summary)
        .body(&notice.body)
        .show()
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn notice(key: &str, summary: &str) -> Notice {
        Notice {
            key: key.into(),
            summary: summary.into(),
            body: "b".into(),
            level: Level::Info,
        }
    }

    #[test]
    fn an_open_breaker_right_after_degraded_is_shown_but_repeats_are_held() {
        let t0 = Instant::now();
        let at = SystemTime::now();
        let br = |to: BreakerState| Event::Breaker {
            upstream: "copilot-api".into(),
            from: BreakerState::Closed,
            to,
            at,
            reason: BreakerReason::Degraded("failure rate 29% ≥ 25% over last 7 calls".into()),
        };
        let mut l = Limiter::new(WINDOW);
        let degraded = notice_for(&br(BreakerState::Degraded)).unwrap();
        assert_eq!(degraded.level, Level::Warning);
        assert!(l.offer(degraded.clone(), t0).is_some());
        // Seconds later it opens: more serious, so it is news, shown at once.
        let open = notice_for(&br(BreakerState::Open)).unwrap();
        assert_eq!(open.level, Level::Alert);
        let shown = l.offer(open.clone(), t0 + Duration::from_secs(3));
        assert_eq!(
            shown.map(|n| n.summary),
            Some("copilot-api: circuit open".into())
        );
        // Flapping after that (degraded, open again) is held for the summary as before.
        assert_eq!(l.offer(open, t0 + Duration::from_secs(20)), None);
        assert_eq!(l.offer(degraded, t0 + Duration::from_secs(30)), None);
        let due = l.due(t0 + Duration::from_secs(3) + WINDOW);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].summary, "copilot-api: 2 more changes");
    }

    #[test]
    fn first_notice_per_key_shows_then_the_window_holds() {
        let t0 = Instant::now();
        let mut l = Limiter::new(WINDOW);
        assert!(l.offer(notice("copilot-api", "open"), t0).is_some());
        assert!(
            l.offer(notice("github-api", "open"), t0).is_some(),
            "another upstream has its own window"
        );
        assert_eq!(
            l.offer(
                notice("copilot-api", "closed"),
                t0 + Duration::from_secs(10)
            ),
            None
        );
        assert_eq!(
            l.offer(notice("copilot-api", "open"), t0 + Duration::from_secs(179)),
            None
        );
        assert!(
            l.due(t0 + Duration::from_secs(179)).is_empty(),
            "window not over yet"
        );
    }

    #[test]
    fn held_notices_become_one_summary_when_the_window_ends() {
        let t0 = Instant::now();
        let mut l = Limiter::new(WINDOW);
        l.offer(notice("copilot-api", "open"), t0);
        l.offer(notice("copilot-api", "closed"), t0 + Duration::from_secs(5));
        l.offer(
            notice("copilot-api", "open again"),
            t0 + Duration::from_secs(6),
        );
        let due = l.due(t0 + WINDOW);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].summary, "copilot-api: 2 more changes");
        assert_eq!(due[0].body, "Latest: open again");
        // The summary restarted the window: the next change waits again, nothing is due twice.
        assert!(l.due(t0 + WINDOW + Duration::from_secs(1)).is_empty());
        assert_eq!(
            l.offer(
                notice("copilot-api", "closed"),
                t0 + WINDOW + Duration::from_secs(60)
            ),
            None
        );
        let due = l.due(t0 + WINDOW * 2);
        assert_eq!(due[0].summary, "copilot-api: 1 more change");
    }

    #[test]
    fn a_late_notice_carries_the_held_count_when_due_was_not_called() {
        let t0 = Instant::now();
        let mut l = Limiter::new(WINDOW);
        l.offer(notice("copilot-api", "open"), t0);
        l.offer(notice("copilot-api", "closed"), t0 + Duration::from_secs(1));
        let shown = l
            .offer(notice("copilot-api", "open"), t0 + WINDOW)
            .expect("window over");
        assert_eq!(shown.body, "b\n(+1 earlier change)");
        assert!(
            l.due(t0 + WINDOW * 3).is_empty(),
            "the held one was already reported"
        );
    }

    #[test]
    fn events_map_to_notices_only_where_worth_it() {
        let at = SystemTime::UNIX_EPOCH;
        let br = |to: BreakerState| Event::Breaker {
            upstream: "copilot-api".into(),
            from: BreakerState::Closed,
            to,
            at,
            reason: BreakerReason::Opened {
                cause: "8 of 10 calls failed".into(),
                wait: Duration::from_secs(5),
            },
        };
        assert_eq!(
            notice_for(&br(BreakerState::Open)).map(|n| n.summary),
            Some("copilot-api: circuit open".into())
        );
        assert_eq!(
            notice_for(&br(BreakerState::Closed)).map(|n| n.key),
            Some("copilot-api".into())
        );
        assert_eq!(notice_for(&br(BreakerState::HalfOpen)), None);
        // Closed from degraded (the rates fell) is "back to normal"; closed after probes
        // passed is "recovered": the variant decides, not the words.
        let closed = |reason: BreakerReason| Event::Breaker {
            upstream: "copilot-api".into(),
            from: BreakerState::Degraded,
            to: BreakerState::Closed,
            at,
            reason,
        };
        let back = notice_for(&closed(BreakerReason::Recovered("failure rate 0%".into())));
        assert_eq!(
            back.map(|n| (n.summary, n.body)),
            Some((
                "copilot-api: back to normal".into(),
                "recovered: failure rate 0%.".into()
            ))
        );
        let probed = notice_for(&closed(BreakerReason::ProbesPassed(
            "3 of 3 half-open probes succeeded".into(),
        )));
        assert_eq!(
            probed.map(|n| n.summary),
            Some("copilot-api: recovered".into())
        );
        let q = |state: QueueState| Event::Queue {
            id: 4,
            upstream: "copilot-api".into(),
            state,
            at,
            detail: "d".into(),
        };
        assert_eq!(
            notice_for(&q(QueueState::Done)).map(|n| n.summary),
            Some("Queued session #4 created".into())
        );
        assert_eq!(
            notice_for(&q(QueueState::Failed)).map(|n| n.summary),
            Some("Queued session #4 failed".into())
        );
        assert_eq!(notice_for(&q(QueueState::Replaying)), None);
        let gh = |change: GithubChange| Event::Github {
            change,
            title: "Copilot slow".into(),
            url: Some("https://stspg.io/a".into()),
            at,
        };
        let opened = notice_for(&gh(GithubChange::IncidentOpened)).expect("notice");
        assert_eq!(
            (opened.key.as_str(), opened.body.as_str()),
            ("GitHub", "Copilot slow\nhttps://stspg.io/a")
        );
        assert!(notice_for(&gh(GithubChange::IncidentResolved)).is_some());
        assert_eq!(notice_for(&gh(GithubChange::ComponentChanged)), None);
        assert_eq!(notice_for(&Event::Paused { at, paused: true }), None);
    }

    #[test]
    fn the_os_turning_the_network_metered_is_noticed_the_developers_override_is_not() {
        let at = std::time::SystemTime::UNIX_EPOCH;
        let net = |to: bool, source: MeteredSource| Event::Network {
            from: !to,
            to,
            source,
            reason: "NetworkManager says Metered = yes".into(),
            at,
        };
        let on = notice_for(&net(true, MeteredSource::Os)).expect("notice");
        assert_eq!(
            (on.key.as_str(), on.summary.as_str()),
            ("network", "Metered network")
        );
        assert!(on.body.contains("rules apply now"), "{on:?}");
        let off = notice_for(&net(false, MeteredSource::Os)).expect("notice");
        assert_eq!(off.summary, "Network no longer metered");
        assert_eq!(notice_for(&net(true, MeteredSource::Forced)), None);
        assert_eq!(notice_for(&net(false, MeteredSource::Default)), None);
    }
}
