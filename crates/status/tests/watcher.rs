//! One check at a time (`poll_once`) against a real loopback Statuspage server.

mod support;

use http::StatusCode;
use support::server::{Mode, StatusServer, Validator, SUMMARY, UNRESOLVED};
use support::{fetch, test_config};
use weir_status::{Freshness, Reachability, StatusEvent, StatusWatcher};

const COPILOT_INCIDENT: &str = "q8fm3k1z7xwd";
const ACTIONS_INCIDENT: &str = "5yb0h2qg8t4n";
const UNNAMED_INCIDENT: &str = "wz61lc9d3mpv";

fn statuses(w: &StatusWatcher) -> Vec<(String, String)> {
    w.snapshot()
        .components
        .into_iter()
        .map(|c| (c.name, c.status))
        .collect()
}

fn incident_ids(w: &StatusWatcher) -> Vec<String> {
    w.snapshot().incidents.into_iter().map(|i| i.id).collect()
}

#[tokio::test]
async fn first_check_reads_the_recorded_shapes_and_keeps_only_watched_things() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_incident.json", "unresolved_incident.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    let mut events = w.subscribe();

    let report = w.poll_once().await;

    assert_eq!(report.error, None);
    let s = w.snapshot();
    assert_eq!(s.reachability, Reachability::Ok);
    assert!(!s.stale);
    assert_eq!(s.indicator.as_deref(), Some("minor"));
    assert_eq!(s.description.as_deref(), Some("Minor Service Outage"));
    assert_eq!(s.page_url, "https://www.githubstatus.com");
    let expected = [
        ("Copilot", "degraded_performance"),
        ("Copilot AI Model Providers", "operational"),
        ("API Requests", "operational"),
        ("Git Operations", "operational"),
    ]
    .map(|(n, st)| (n.to_owned(), st.to_owned()));
    assert_eq!(
        statuses(&w),
        expected,
        "watched only, configured order, no placeholder"
    );
    assert_eq!(
        incident_ids(&w),
        [COPILOT_INCIDENT, UNNAMED_INCIDENT],
        "Actions-only incident filtered"
    );

    let copilot = &s.incidents[0];
    assert_eq!(copilot.status, "investigating");
    assert_eq!(copilot.impact, "minor");
    assert_eq!(
        copilot.shortlink.as_deref(),
        Some("https://stspg.io/q8fm3k1z7xwd")
    );
    assert_eq!(copilot.components, ["Copilot"]);
    assert_eq!(
        copilot.latest_update.as_deref(),
        Some("We are investigating reports of degraded performance for Copilot")
    );

    // Started mid-incident: each incident is announced once; components are not "changes".
    let opened: Vec<_> = report
        .events
        .iter()
        .map(|e| match e {
            StatusEvent::IncidentOpened { incident } => incident.id.clone(),
            other => panic!("unexpected first-poll event {other:?}"),
        })
        .collect();
    assert_eq!(opened, [COPILOT_INCIDENT, UNNAMED_INCIDENT]);
    assert_eq!(
        events.recv().await.unwrap(),
        report.events[0],
        "broadcast too"
    );

    // The dashboard JSON.
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["reachability"], "ok");
    assert_eq!(v["indicator"], "minor");
    assert_eq!(v["incidents"][1]["components"], serde_json::json!([]));
    assert!(v["checked_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn etag_is_sent_back_and_304_reuses_the_previous_data() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());

    let first = w.poll_once().await;
    assert_eq!(first.summary, Some(Freshness::Full));
    let before = w.snapshot();
    assert_eq!(server.count(200), 2);
    assert!(
        server.seen().iter().all(|s| s.if_none_match.is_none()),
        "nothing cached yet"
    );

    let second = w.poll_once().await;
    assert_eq!(second.summary, Some(Freshness::NotModified));
    assert_eq!(second.unresolved, Some(Freshness::NotModified));
    assert!(second.events.is_empty());
    let seen = server.seen();
    let etags: Vec<_> = seen[2..].iter().map(|s| s.if_none_match.clone()).collect();
    assert!(
        etags
            .iter()
            .all(|e| e.as_deref().is_some_and(|e| e.starts_with("W/\"doc-"))),
        "{etags:?}"
    );
    assert_eq!(server.count(200), 2, "no new full bodies");
    assert_eq!(server.count(304), 2);

    let after = w.snapshot();
    assert_eq!(
        after.reachability,
        Reachability::Ok,
        "304 counts as reachable"
    );
    assert_eq!(after.components, before.components);
    assert!(after.last_ok_at >= before.last_ok_at);

    // Only the changed document comes back in full.
    server.set(SUMMARY, support::server::fixture("summary_incident.json"));
    let third = w.poll_once().await;
    assert_eq!(third.summary, Some(Freshness::Full));
    assert_eq!(third.unresolved, Some(Freshness::NotModified));
    assert_eq!(server.count(200), 3);
    assert_eq!(w.snapshot().components[0].status, "degraded_performance");
    assert!(matches!(
        &third.events[..],
        [StatusEvent::ComponentChanged { name, from, to }]
            if name == "Copilot" && from == "operational" && to == "degraded_performance"
    ));
}

#[tokio::test]
async fn last_modified_is_sent_back_as_if_modified_since() {
    let server = StatusServer::start(Validator::LastModified).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    w.poll_once().await;
    let report = w.poll_once().await;
    assert_eq!(report.summary, Some(Freshness::NotModified));
    let last = server.seen().pop().unwrap();
    assert!(last.if_modified_since.unwrap().ends_with(" GMT"));
    assert_eq!(last.if_none_match, None);
    assert_eq!((server.count(200), server.count(304)), (2, 2));
}

#[tokio::test]
async fn incident_lifecycle_produces_the_expected_events() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    assert!(w.poll_once().await.events.is_empty());

    server.scenario("summary_incident.json", "unresolved_incident.json");
    let ev = w.poll_once().await.events;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(
        matches!(&ev[0], StatusEvent::IncidentOpened { incident } if incident.id == COPILOT_INCIDENT)
    );
    assert!(
        matches!(&ev[1], StatusEvent::IncidentOpened { incident } if incident.id == UNNAMED_INCIDENT)
    );
    assert!(matches!(&ev[2], StatusEvent::ComponentChanged { name, .. } if name == "Copilot"));
    assert!(!incident_ids(&w).contains(&ACTIONS_INCIDENT.to_owned()));

    server.scenario("summary_identified.json", "unresolved_identified.json");
    let ev = w.poll_once().await.events;
    assert_eq!(ev.len(), 3, "{ev:?}");
    match &ev[0] {
        StatusEvent::IncidentUpdated {
            incident,
            previous_status,
        } => {
            assert_eq!(incident.id, COPILOT_INCIDENT);
            assert_eq!(previous_status, "investigating");
            assert_eq!(incident.status, "identified");
            assert!(incident
                .latest_update
                .as_deref()
                .unwrap()
                .contains("rolling out a fix"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&ev[1], StatusEvent::IncidentResolved { incident } if incident.id == UNNAMED_INCIDENT)
    );
    assert!(
        matches!(&ev[2], StatusEvent::ComponentChanged { from, to, .. }
        if from == "degraded_performance" && to == "partial_outage")
    );

    server.scenario("summary_operational.json", "unresolved_none.json");
    let ev = w.poll_once().await.events;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(
        matches!(&ev[0], StatusEvent::IncidentResolved { incident } if incident.id == COPILOT_INCIDENT)
    );
    assert!(matches!(&ev[1], StatusEvent::ComponentChanged { to, .. } if to == "operational"));
    assert!(w.snapshot().incidents.is_empty());
}

#[tokio::test]
async fn server_error_means_unknown_with_stale_data_never_outage() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    w.poll_once().await;
    let good = w.snapshot();

    server.mode(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let report = w.poll_once().await;
    let s = w.snapshot();
    assert_eq!(s.reachability, Reachability::Unknown);
    assert!(s.stale);
    assert!(s.error.as_deref().unwrap().contains("500"), "{:?}", s.error);
    assert_eq!(s.indicator.as_deref(), Some("none"), "no outage invented");
    assert_eq!(s.components, good.components, "last good data kept");
    assert_eq!(s.last_ok_at, good.last_ok_at);
    assert_eq!(w.consecutive_failures(), 1);
    assert_eq!(
        report.events,
        vec![StatusEvent::ReachabilityChanged {
            from: Reachability::Ok,
            to: Reachability::Unknown,
            error: s.error.clone()
        }]
    );
    assert!(
        w.poll_once().await.events.is_empty(),
        "still unknown: no repeat"
    );

    server.mode(Mode::Serve);
    let report = w.poll_once().await;
    assert!(matches!(
        &report.events[..],
        [StatusEvent::ReachabilityChanged {
            to: Reachability::Ok,
            error: None,
            ..
        }]
    ));
    assert_eq!(w.consecutive_failures(), 0);
    assert!(!w.snapshot().stale);
}

#[tokio::test]
async fn a_server_that_is_gone_is_unknown_and_keeps_incidents() {
    let mut server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_incident.json", "unresolved_incident.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    w.poll_once().await;
    server.shutdown().await;

    let report = w.poll_once().await;
    let s = w.snapshot();
    assert_eq!(s.reachability, Reachability::Unknown);
    assert!(s.stale);
    let err = s.error.unwrap();
    assert!(err.contains(&server.addr.to_string()), "{err}");
    assert_eq!(
        incident_ids(&w),
        [COPILOT_INCIDENT, UNNAMED_INCIDENT],
        "not resolved by silence"
    );
    assert_eq!(report.events.len(), 1, "{:?}", report.events);
    assert!(matches!(
        report.events[0],
        StatusEvent::ReachabilityChanged { .. }
    ));
}

#[tokio::test]
async fn unparsable_or_foreign_answers_are_unknown() {
    let server = StatusServer::start(Validator::ETag).await;
    server.mode(Mode::Body("<html><body>Status page</body></html>"));
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    let report = w.poll_once().await;
    let s = w.snapshot();
    assert_eq!(s.reachability, Reachability::Unknown);
    assert!(!s.stale, "nothing to be stale");
    assert!(s.error.unwrap().contains("not a Statuspage v2 document"));
    assert!(s.components.is_empty() && s.indicator.is_none());
    assert!(
        report.events.is_empty(),
        "a failed first check is not a change"
    );

    // JSON, but not Statuspage's: e.g. a regional page run by other software.
    server.mode(Mode::Body(r#"{"layout": {}, "services": []}"#));
    w.poll_once().await;
    assert_eq!(w.snapshot().reachability, Reachability::Unknown);

    // Nothing at /api/v2/: also unknown, with the status in the text.
    server.mode(Mode::Serve);
    w.poll_once().await;
    assert!(w.snapshot().error.unwrap().contains("404"));
    assert!(server.seen().iter().any(|s| s.path == UNRESOLVED));
}

#[tokio::test]
async fn an_incident_naming_only_the_placeholder_counts_as_naming_none() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_incident.json", "unresolved_placeholder_only.json");
    let mut w = StatusWatcher::new(test_config(&server.base_url()), fetch());
    w.poll_once().await;
    let s = w.snapshot();
    assert_eq!(s.incidents.len(), 1);
    assert_eq!(s.incidents[0].impact, "major");
    assert!(s.incidents[0].components.is_empty());
    assert_eq!(
        s.incidents[0].latest_update.as_deref(),
        Some("We are investigating reports of service unavailability.")
    );
}

#[tokio::test]
async fn configured_component_names_match_case_insensitively() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_incident.json", "unresolved_incident.json");
    let mut config = test_config(&server.base_url());
    config.components = vec!["ACTIONS".into(), "no such component".into()];
    let mut w = StatusWatcher::new(config, fetch());
    w.poll_once().await;
    assert_eq!(
        statuses(&w),
        [("Actions".to_owned(), "partial_outage".to_owned())]
    );
    assert_eq!(incident_ids(&w), [ACTIONS_INCIDENT, UNNAMED_INCIDENT]);
}

/// A client that records what it is asked for and answers as told: no connection at all, or
/// an HTTP 500.
struct Recording {
    asked: std::sync::Mutex<Vec<String>>,
    connects: bool,
}

impl weir_status::Fetch for Recording {
    fn get<'a>(
        &'a self,
        url: &'a str,
        _headers: http::HeaderMap,
    ) -> weir_status::BoxFuture<'a, Result<weir_status::FetchResponse, weir_status::FetchError>>
    {
        self.asked.lock().unwrap().push(url.to_owned());
        let connects = self.connects;
        Box::pin(async move {
            if !connects {
                return Err(weir_status::FetchError::connect(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "failed to lookup address information",
                )));
            }
            Ok(weir_status::FetchResponse {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                headers: http::HeaderMap::new(),
                body: bytes::Bytes::new(),
            })
        })
    }
}

/// Offline (the name does not resolve), a check asks for the summary alone: the check fails
/// whatever the incidents would say, and each request is a name lookup on a thread of its
/// own. A page that answers, even with an error, is asked for both, as before.
#[tokio::test]
async fn a_check_that_gets_no_connection_asks_once() {
    let cfg = || test_config("https://www.githubstatus.invalid");
    for (connects, asked) in [(false, 1), (true, 2)] {
        let fetch = std::sync::Arc::new(Recording {
            asked: Default::default(),
            connects,
        });
        let mut w = StatusWatcher::new(cfg(), fetch.clone());
        let report = w.poll_once().await;
        assert!(report.error.is_some());
        assert_eq!(w.snapshot().reachability, Reachability::Unknown);
        let urls = fetch.asked.lock().unwrap().clone();
        assert_eq!(urls.len(), asked, "connects: {connects}, asked: {urls:?}");
        assert!(urls[0].ends_with(SUMMARY), "{urls:?}");
        assert_eq!(w.consecutive_failures(), 1);
    }
}
