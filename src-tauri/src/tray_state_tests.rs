//! Unit tests for [`super::tray_view`]: snapshots as the engine writes them today (no breaker,
//! queue or GitHub fields) and as it will (with them), plus events filling the gaps.

use super::*;
use serde_json::json;
use std::time::{Duration, SystemTime};

fn utc_clock(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%H:%M")
        .to_string()
}

fn view(status: &Value, recent: &Recent) -> TrayView {
    tray_view(status, recent, &utc_clock)
}

/// 2026-11-30T10:02:00Z
fn t1002() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_032_920)
}

fn upstream(name: &str, breaker: Option<Value>) -> Value {
    let mut u = json!({"name": name, "origin": "https://api.githubcopilot.com", "totals": {}, "classes": {}, "errors_by_kind": {}});
    if let Some(b) = breaker {
        u["breaker"] = b;
    }
    u
}

fn healthy_status() -> Value {
    json!({
        "paused": false,
        "upstreams": [
            upstream("copilot-api", Some(json!({"state": "closed", "since": "2026-11-30T10:02:00Z", "reason": "start"}))),
            upstream("github-api", Some(json!({"state": "closed", "since": "2026-11-30T09:00:00Z", "reason": "start"}))),
        ],
        "queue": {"available": true, "error": null, "credentials": "keychain", "queued": 0, "replaying": 0,
                  "in_doubt": 0, "done": 4, "failed": 0, "cancelled": 0, "expired": 0},
        "github": {"indicator": "none", "description": "All Systems Operational", "page_url": "https://www.githubstatus.com", "incidents": []},
    })
}

#[test]
fn todays_snapshot_without_breakers_reads_as_unknown() {
    let status = json!({"paused": false, "upstreams": [upstream("copilot-api", None)]});
    let v = view(&status, &Recent::default());
    assert_eq!(v.overall, Overall::Unknown);
    assert_eq!(v.upstream_lines, vec!["copilot-api: state unknown"]);
    assert_eq!(v.queue_line, "Create queue: unknown");
    assert_eq!(v.github_line, "GitHub Status: unknown");
    assert_eq!(v.github_url, None);
}

#[test]
fn all_closed_and_quiet_is_healthy_with_since_times() {
    let v = view(&healthy_status(), &Recent::default());
    assert_eq!(v.overall, Overall::Healthy);
    assert_eq!(v.overall_line, "Weir: healthy");
    assert_eq!(
        v.upstream_lines,
        vec![
            "copilot-api: closed since 10:02",
            "github-api: closed since 09:00"
        ]
    );
    assert_eq!(v.queue_line, "No creates queued");
    assert_eq!(v.github_line, "GitHub Status: All Systems Operational");
    assert_eq!(
        v.github_url.as_deref(),
        Some("https://www.githubstatus.com")
    );
    assert!(
        v.tooltip
            .starts_with("Weir: healthy\ncopilot-api: closed since 10:02\n"),
        "{}",
        v.tooltip
    );
}

#[test]
fn an_open_breaker_wins_over_degraded_and_is_named() {
    let mut s = healthy_status();
    s["upstreams"][0]["breaker"] =
        json!({"state": "open", "since": "2026-11-30T10:05:00Z", "reason": "error rate"});
    s["queue"]["queued"] = json!(3);
    s["queue"]["in_doubt"] = json!(1);
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::BreakerOpen);
    assert_eq!(v.overall_line, "Weir: circuit open for copilot-api");
    assert_eq!(v.upstream_lines[0], "copilot-api: OPEN since 10:05");
    assert_eq!(v.queue_line, "3 creates queued, 1 in doubt");
}

#[test]
fn paused_wins_over_everything() {
    let mut s = healthy_status();
    s["paused"] = json!(true);
    s["upstreams"][0]["breaker"]["state"] = json!("open");
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::Paused);
    assert!(v.paused);
}

#[test]
fn half_open_creates_in_doubt_and_incidents_are_degraded() {
    let mut s = healthy_status();
    s["upstreams"][1]["breaker"]["state"] = json!("half_open");
    assert_eq!(view(&s, &Recent::default()).overall, Overall::Degraded);

    let mut s = healthy_status();
    s["queue"]["in_doubt"] = json!(2);
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Degraded, "No creates queued, 2 in doubt")
    );

    let mut s = healthy_status();
    s["queue"] = json!({"available": false, "error": "disk full", "credentials": "none"});
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Degraded, "Create queue unavailable: disk full")
    );

    let mut s = healthy_status();
    s["github"]["indicator"] = json!("minor");
    s["github"]["incidents"] = json!([{"name": "Copilot is slow", "shortlink": "https://stspg.io/abc", "impact": "minor"}]);
    let v = view(&s, &Recent::default());
    assert_eq!(v.overall, Overall::Degraded);
    assert_eq!(v.github_line, "GitHub incident: Copilot is slow");
    assert_eq!(v.github_url.as_deref(), Some("https://stspg.io/abc"));
}

#[test]
fn breaker_events_fill_in_until_the_snapshot_has_breakers() {
    let status = json!({"paused": false, "upstreams": [upstream("copilot-api", None), upstream("github-api", None)]});
    let mut recent = Recent::default();
    recent.record(&Event::Breaker {
        upstream: "copilot-api".into(),
        from: "closed".into(),
        to: "open".into(),
        at: t1002(),
        reason: "5xx".into(),
    });
    let v = view(&status, &recent);
    assert_eq!(v.overall, Overall::BreakerOpen);
    assert_eq!(
        v.upstream_lines,
        vec!["copilot-api: OPEN since 10:02", "github-api: state unknown"]
    );

    recent.record(&Event::Breaker {
        upstream: "copilot-api".into(),
        from: "open".into(),
        to: "closed".into(),
        at: t1002(),
        reason: "ok".into(),
    });
    recent.record(&Event::Breaker {
        upstream: "github-api".into(),
        from: "open".into(),
        to: "closed".into(),
        at: t1002(),
        reason: "ok".into(),
    });
    assert_eq!(view(&status, &recent).overall, Overall::Healthy);
}

#[test]
fn the_snapshot_wins_over_an_older_event() {
    let mut recent = Recent::default();
    recent.record(&Event::Breaker {
        upstream: "copilot-api".into(),
        from: "closed".into(),
        to: "open".into(),
        at: t1002(),
        reason: "5xx".into(),
    });
    assert_eq!(view(&healthy_status(), &recent).overall, Overall::Healthy);
}

#[test]
fn github_events_fill_in_until_the_snapshot_has_github() {
    let status = json!({"paused": false, "upstreams": []});
    let mut recent = Recent::default();
    let at = t1002();
    recent.record(&Event::Github {
        change: "incident_opened".into(),
        title: "Actions down".into(),
        url: Some("https://stspg.io/x".into()),
        at,
    });
    let v = view(&status, &recent);
    assert_eq!(
        (v.overall, v.github_line.as_str()),
        (Overall::Degraded, "GitHub incident: Actions down")
    );
    assert_eq!(v.github_url.as_deref(), Some("https://stspg.io/x"));
    // A component blip does not replace the incident.
    recent.record(&Event::Github {
        change: "component_changed".into(),
        title: "Git ops".into(),
        url: None,
        at,
    });
    assert_eq!(
        view(&status, &recent).github_line,
        "GitHub incident: Actions down"
    );
    recent.record(&Event::Github {
        change: "incident_resolved".into(),
        title: "Actions down".into(),
        url: None,
        at,
    });
    let v = view(&status, &recent);
    assert_eq!(
        (v.overall, v.github_line.as_str()),
        (Overall::Healthy, "GitHub: resolved: Actions down")
    );
}

#[test]
fn odd_shapes_do_not_panic_and_read_as_unknown() {
    for status in [
        json!(null),
        json!({"upstreams": "nope", "queue": 3, "github": []}),
        json!({"upstreams": [{"breaker": {"state": "sideways", "since": "yesterday"}}]}),
        json!({"upstreams": [{"name": 7, "breaker": null}]}),
    ] {
        let v = view(&status, &Recent::default());
        assert!(
            matches!(v.overall, Overall::Unknown | Overall::Healthy),
            "{status}: {v:?}"
        );
        assert_eq!(v.queue_line, "Create queue: unknown", "{status}");
        assert!(
            v.upstream_lines
                .iter()
                .all(|l| l.ends_with("state unknown")),
            "{status}: {v:?}"
        );
    }
}

#[test]
fn queue_wording_counts_replaying_and_ignores_finished() {
    let mut s = healthy_status();
    s["queue"]["queued"] = json!(1);
    assert_eq!(view(&s, &Recent::default()).queue_line, "1 create queued");
    s["queue"]["replaying"] = json!(1);
    s["queue"]["failed"] = json!(3);
    let v = view(&s, &Recent::default());
    // Failed creates are final and were notified: history, not a standing alarm.
    assert_eq!(
        (v.overall, v.queue_line.as_str()),
        (Overall::Healthy, "2 creates queued")
    );
}

#[test]
fn github_null_means_the_watcher_is_off() {
    let mut s = healthy_status();
    s["github"] = Value::Null;
    let v = view(&s, &Recent::default());
    assert_eq!(
        (v.overall, v.github_line.as_str(), v.github_url),
        (Overall::Healthy, "GitHub Status: not watched", None)
    );
}
