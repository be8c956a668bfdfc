//! The background task on paused time: interval, jitter, backoff, refresh, stop, timeout.
//!
//! Each check replaces the snapshot, so a test awaits `watch().changed()` and reads the
//! virtual clock. While a check's loopback I/O is in flight no timer is pending (the test
//! configs set no request timeout), so paused time cannot jump past it.

mod support;

use std::time::Duration;

use http::StatusCode;
use support::server::{Mode, StatusServer, Validator};
use support::{fetch, test_config};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use weir_status::{GithubStatus, Jitter, Reachability, StatusEvent, StatusWatcher};

/// Waits for the next check and returns its virtual time in whole seconds since `t0`.
async fn next_check(rx: &mut watch::Receiver<GithubStatus>, t0: Instant) -> u64 {
    rx.changed().await.expect("watcher task alive");
    rx.borrow_and_update();
    (Instant::now() - t0).as_secs()
}

async fn check_times(rx: &mut watch::Receiver<GithubStatus>, t0: Instant, n: usize) -> Vec<u64> {
    let mut times = Vec::new();
    for _ in 0..n {
        times.push(next_check(rx, t0).await);
    }
    times
}

#[tokio::test(start_paused = true)]
async fn checks_at_once_then_every_interval() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let t0 = Instant::now();
    let handle = StatusWatcher::spawn(test_config(&server.base_url()), fetch());
    let mut rx = handle.watch();

    assert_eq!(check_times(&mut rx, t0, 4).await, [0, 60, 120, 180]);
    assert_eq!(server.seen().len(), 8, "two documents per check");
    assert_eq!(server.count(200), 2, "later checks were conditional");
    assert_eq!(handle.snapshot().reachability, Reachability::Ok);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn jitter_is_added_to_each_wait() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let mut config = test_config(&server.base_url());
    config.jitter = Jitter::Fixed(Duration::from_secs(7));
    let t0 = Instant::now();
    let handle = StatusWatcher::spawn(config, fetch());
    let mut rx = handle.watch();
    assert_eq!(check_times(&mut rx, t0, 3).await, [0, 67, 134]);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_exponentially_up_to_the_cap_then_reset() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    server.mode(Mode::Fail(StatusCode::SERVICE_UNAVAILABLE));
    let t0 = Instant::now();
    let handle = StatusWatcher::spawn(test_config(&server.base_url()), fetch());
    let mut rx = handle.watch();

    // Waits of 120, 240, 480, then the 600 s cap.
    assert_eq!(
        check_times(&mut rx, t0, 6).await,
        [0, 120, 360, 840, 1440, 2040]
    );
    let s = handle.snapshot();
    assert_eq!(s.reachability, Reachability::Unknown);
    assert!(s.error.unwrap().contains("503"));

    server.mode(Mode::Serve);
    assert_eq!(next_check(&mut rx, t0).await, 2640, "still the capped wait");
    assert_eq!(handle.snapshot().reachability, Reachability::Ok);
    assert_eq!(next_check(&mut rx, t0).await, 2700, "back to the interval");
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn refresh_checks_now_and_events_reach_subscribers() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let t0 = Instant::now();
    let handle = StatusWatcher::spawn(test_config(&server.base_url()), fetch());
    let mut rx = handle.watch();
    let mut events = handle.subscribe();
    assert_eq!(next_check(&mut rx, t0).await, 0);

    server.scenario("summary_incident.json", "unresolved_incident.json");
    handle.refresh();
    assert_eq!(
        next_check(&mut rx, t0).await,
        0,
        "no waiting for the interval"
    );
    let mut got = Vec::new();
    while let Ok(e) = events.try_recv() {
        got.push(e);
    }
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(matches!(got[0], StatusEvent::IncidentOpened { .. }));
    assert!(matches!(got[2], StatusEvent::ComponentChanged { .. }));
    assert_eq!(
        next_check(&mut rx, t0).await,
        60,
        "schedule restarts from the refresh"
    );
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stop_and_drop_end_the_task() {
    let server = StatusServer::start(Validator::ETag).await;
    server.scenario("summary_operational.json", "unresolved_none.json");
    let t0 = Instant::now();
    let handle = StatusWatcher::spawn(test_config(&server.base_url()), fetch());
    let mut rx = handle.watch();
    next_check(&mut rx, t0).await;
    handle.stop().await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(server.seen().len(), 2, "one check, then nothing");
    assert!(rx.changed().await.is_err(), "the task dropped its sender");

    let handle = StatusWatcher::spawn(test_config(&server.base_url()), fetch());
    let mut rx = handle.watch();
    next_check(&mut rx, t0).await;
    drop(handle);
    assert!(
        rx.changed().await.is_err(),
        "dropping the handle stops the task"
    );
    assert_eq!(server.seen().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_times_out_as_unknown() {
    // Accepts connections and never answers: only the request timeout ends the wait.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let mut config = test_config(&format!("http://{addr}"));
    config.request_timeout = Some(Duration::from_secs(15));
    let mut w = StatusWatcher::new(config, fetch());
    let t0 = Instant::now();
    let report = w.poll_once().await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(15));
    let s = w.snapshot();
    assert_eq!(s.reachability, Reachability::Unknown);
    assert!(s.error.unwrap().contains("no response within 15s"));
    assert!(report.events.is_empty());
    hold.abort();
}
