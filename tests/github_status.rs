//! The GitHub Status watcher inside the engine: polled through Weir's own client from a
//! loopback Statuspage serving recorded shapes; shown in the status document; changes become
//! `github` events.

mod common;
use common::{Upstream, Weir};
use std::time::Duration;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/status/tests/fixtures/");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_show_in_status_and_events() {
    let fixture = |name: &str| std::fs::read_to_string(format!("{FIX}{name}.json")).unwrap();
    let serve = |page: &Upstream, summary: &str, unresolved: &str| {
        let (s, u) = (fixture(summary), fixture(unresolved));
        page.set(|b| {
            b.path_bodies = vec![
                ("/api/v2/summary.json".into(), s),
                ("/api/v2/incidents/unresolved.json".into(), u),
            ]
        });
    };
    let page = Upstream::start().await;
    serve(&page, "summary_operational", "unresolved_none");
    let weir = Weir::start(
        &[],
        &format!("[status]\nbase_url = \"{}\"\n", page.origin()),
    )
    .await;
    let mut ok = false;
    for _ in 0..250 {
        if weir.status().await["github"]["reachability"] == "ok" {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        ok,
        "first check succeeded: {} {:?}",
        weir.status().await["github"],
        page.seen()
            .iter()
            .map(|s| s.path_and_query.clone())
            .collect::<Vec<_>>()
    );
    assert!(weir.status().await["github"]["incidents"]
        .as_array()
        .unwrap()
        .is_empty());

    // An incident opens; the watcher is asked to check now (as the tray's refresh does).
    let mut events = weir.handle.subscribe();
    serve(&page, "summary_incident", "unresolved_incident");
    weir.handle.refresh_github_status();
    let mut opened = None;
    for _ in 0..100 {
        if let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(100), events.recv()).await {
            let v = serde_json::to_value(&e).unwrap();
            if v["type"] == "github" && v["change"] == "incident_opened" {
                opened = Some(v);
                break;
            }
        }
    }
    let opened = opened.expect("an incident_opened event");
    assert!(!opened["title"].as_str().unwrap().is_empty());
    let s = weir.status().await;
    assert!(
        !s["github"]["incidents"].as_array().unwrap().is_empty(),
        "{}",
        s["github"]
    );
    assert_eq!(page.count("/api/v2/summary.json"), 2, "two checks, no more");
}

#[tokio::test]
async fn an_unreachable_page_is_unknown_never_an_outage() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let weir = Weir::start(&[], &format!("[status]\nbase_url = \"http://{dead}\"\n")).await;
    let mut state = String::new();
    for _ in 0..250 {
        let s = weir.status().await;
        if s["github"]["checked_at"].is_string() {
            state = s["github"]["reachability"].as_str().unwrap().to_string();
            assert!(s["github"]["error"].is_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state, "unknown");
}

#[tokio::test]
async fn the_watcher_can_be_turned_off() {
    let weir = Weir::start(&[], "watch_github_status = false\n").await;
    assert!(weir.status().await["github"].is_null());
}
