//! What changed between two snapshots, as [`StatusEvent`]s for the tray's notifications.
//!
//! Rules (a pure function, so they are unit-tested here):
//! - Reachability: `ReachabilityChanged` when it differs and `old` had been checked at all
//!   (the start-up Unknown → first result is not a change anyone wants to hear about).
//! - First data (`old` never succeeded): every incident present is announced once with
//!   `IncidentOpened` (someone starting Weir mid-incident wants to know); components produce
//!   no `ComponentChanged` (there is no "from").
//! - Later: `IncidentOpened` for a new id; `IncidentUpdated` when status, impact or the
//!   newest update (text or time) changed; `IncidentResolved` when an id left the watched
//!   unresolved set (resolved, or no longer touching a watched component);
//!   `ComponentChanged` for a watched component present in both whose status differs.
//! - A failed check keeps the old data, so it yields no incident or component events.

use serde::Serialize;

use crate::model::{GithubStatus, Incident, Reachability};

/// A change worth telling the user about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StatusEvent {
    IncidentOpened {
        incident: Incident,
    },
    IncidentUpdated {
        incident: Incident,
        previous_status: String,
    },
    /// Carries the incident as last seen.
    IncidentResolved {
        incident: Incident,
    },
    ComponentChanged {
        name: String,
        from: String,
        to: String,
    },
    ReachabilityChanged {
        from: Reachability,
        to: Reachability,
        error: Option<String>,
    },
}

/// Events that take `old` to `new`, in order: reachability, incidents, components.
pub fn diff(old: &GithubStatus, new: &GithubStatus) -> Vec<StatusEvent> {
    let mut events = Vec::new();

    if old.checked_at.is_some() && old.reachability != new.reachability {
        events.push(StatusEvent::ReachabilityChanged {
            from: old.reachability,
            to: new.reachability,
            error: new.error.clone(),
        });
    }

    if !new.has_data() {
        return events;
    }
    // An old snapshot without data has no incidents, so on first data all are "opened".
    let first_data = !old.has_data();

    for inc in &new.incidents {
        match old.incidents.iter().find(|o| o.id == inc.id) {
            None => events.push(StatusEvent::IncidentOpened {
                incident: inc.clone(),
            }),
            Some(prev) if changed(prev, inc) => events.push(StatusEvent::IncidentUpdated {
                incident: inc.clone(),
                previous_status: prev.status.clone(),
            }),
            Some(_) => {}
        }
    }
    for prev in &old.incidents {
        if !new.incidents.iter().any(|i| i.id == prev.id) {
            events.push(StatusEvent::IncidentResolved {
                incident: prev.clone(),
            });
        }
    }

    if !first_data {
        for comp in &new.components {
            let prev = old
                .components
                .iter()
                .find(|o| o.name.eq_ignore_ascii_case(&comp.name));
            if let Some(prev) = prev {
                if prev.status != comp.status {
                    events.push(StatusEvent::ComponentChanged {
                        name: comp.name.clone(),
                        from: prev.status.clone(),
                        to: comp.status.clone(),
                    });
                }
            }
        }
    }
    events
}

fn changed(prev: &Incident, now: &Incident) -> bool {
    prev.status != now.status
        || prev.impact != now.impact
        || prev.latest_update != now.latest_update
        || prev.latest_update_at != now.latest_update_at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ComponentState;
    use std::time::{Duration, SystemTime};

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    fn inc(id: &str, status: &str, update: &str) -> Incident {
        Incident {
            id: id.into(),
            name: format!("incident {id}"),
            status: status.into(),
            impact: "minor".into(),
            shortlink: None,
            created_at: None,
            updated_at: None,
            latest_update: Some(update.into()),
            latest_update_at: Some("2025-01-01T00:00:00Z".into()),
            components: vec!["Copilot".into()],
        }
    }

    fn ok(t: u64, comps: &[(&str, &str)], incidents: Vec<Incident>) -> GithubStatus {
        let mut s = GithubStatus::initial("u");
        s.reachability = Reachability::Ok;
        s.checked_at = Some(at(t));
        s.last_ok_at = Some(at(t));
        s.indicator = Some("none".into());
        s.components = comps
            .iter()
            .map(|(n, st)| ComponentState {
                name: (*n).into(),
                status: (*st).into(),
            })
            .collect();
        s.incidents = incidents;
        s
    }

    #[test]
    fn first_poll_announces_incidents_but_not_components() {
        let old = GithubStatus::initial("u");
        let new = ok(
            1,
            &[("Copilot", "major_outage")],
            vec![inc("a", "investigating", "x")],
        );
        let ev = diff(&old, &new);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert!(matches!(&ev[0], StatusEvent::IncidentOpened { incident } if incident.id == "a"));
    }

    #[test]
    fn first_poll_after_failures_is_still_first_data() {
        let old = GithubStatus::initial("u").failed("refused".into(), at(1));
        let new = ok(
            2,
            &[("Copilot", "operational")],
            vec![inc("a", "investigating", "x")],
        );
        let ev = diff(&old, &new);
        assert!(matches!(
            ev[0],
            StatusEvent::ReachabilityChanged {
                from: Reachability::Unknown,
                to: Reachability::Ok,
                ..
            }
        ));
        assert!(matches!(ev[1], StatusEvent::IncidentOpened { .. }));
        assert_eq!(ev.len(), 2);
    }

    #[test]
    fn incident_lifecycle() {
        let a0 = ok(1, &[], vec![inc("a", "investigating", "looking")]);
        let same = ok(2, &[], vec![inc("a", "investigating", "looking")]);
        assert!(diff(&a0, &same).is_empty());

        let moved = ok(3, &[], vec![inc("a", "identified", "looking")]);
        let ev = diff(&same, &moved);
        assert_eq!(
            ev,
            vec![StatusEvent::IncidentUpdated {
                incident: inc("a", "identified", "looking"),
                previous_status: "investigating".into()
            }]
        );

        let mut repeated = inc("a", "identified", "looking");
        repeated.latest_update_at = Some("2025-01-01T00:30:00Z".into());
        let ev = diff(&moved, &ok(4, &[], vec![repeated.clone()]));
        assert!(
            matches!(&ev[..], [StatusEvent::IncidentUpdated { .. }]),
            "same text, new post"
        );

        let both = ok(
            5,
            &[],
            vec![repeated.clone(), inc("b", "investigating", "new")],
        );
        let ev = diff(&ok(4, &[], vec![repeated.clone()]), &both);
        assert!(
            matches!(&ev[..], [StatusEvent::IncidentOpened { incident }] if incident.id == "b")
        );

        let ev = diff(&both, &ok(6, &[], vec![inc("b", "investigating", "new")]));
        assert_eq!(
            ev,
            vec![StatusEvent::IncidentResolved { incident: repeated }]
        );
    }

    #[test]
    fn component_changes_only_between_two_data_sets() {
        let old = ok(
            1,
            &[
                ("Copilot", "operational"),
                ("Git Operations", "operational"),
            ],
            vec![],
        );
        let new = ok(
            2,
            &[
                ("Copilot", "partial_outage"),
                ("Git Operations", "operational"),
            ],
            vec![],
        );
        assert_eq!(
            diff(&old, &new),
            vec![StatusEvent::ComponentChanged {
                name: "Copilot".into(),
                from: "operational".into(),
                to: "partial_outage".into()
            }]
        );
        let appeared = ok(
            3,
            &[
                ("Copilot", "partial_outage"),
                ("API Requests", "major_outage"),
            ],
            vec![],
        );
        assert!(
            diff(&new, &appeared).is_empty(),
            "no 'from' for a component new to the page"
        );
    }

    #[test]
    fn failure_reports_reachability_only_and_recovery_reports_what_moved() {
        let good = ok(
            1,
            &[("Copilot", "operational")],
            vec![inc("a", "investigating", "x")],
        );
        let down = good.failed("HTTP 503 Service Unavailable".into(), at(2));
        let ev = diff(&good, &down);
        assert_eq!(
            ev,
            vec![StatusEvent::ReachabilityChanged {
                from: Reachability::Ok,
                to: Reachability::Unknown,
                error: Some("HTTP 503 Service Unavailable".into())
            }]
        );
        assert!(diff(&down, &down.failed("again".into(), at(3))).is_empty());

        let back = ok(4, &[("Copilot", "major_outage")], vec![]);
        let ev = diff(&down, &back);
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert!(matches!(
            ev[0],
            StatusEvent::ReachabilityChanged {
                to: Reachability::Ok,
                ..
            }
        ));
        assert!(matches!(ev[1], StatusEvent::IncidentResolved { .. }));
        assert!(matches!(ev[2], StatusEvent::ComponentChanged { .. }));
    }

    #[test]
    fn startup_failure_is_not_a_reachability_change() {
        let init = GithubStatus::initial("u");
        assert!(diff(&init, &init.failed("refused".into(), at(1))).is_empty());
    }

    #[test]
    fn events_serialise_with_a_type_tag() {
        let e = StatusEvent::ComponentChanged {
            name: "Copilot".into(),
            from: "operational".into(),
            to: "major_outage".into(),
        };
        let v = serde_json::to_value(e).unwrap();
        assert_eq!(v["type"], "component_changed");
        assert_eq!(v["to"], "major_outage");
    }
}
