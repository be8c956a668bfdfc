//! Stop what was started (#21): every task an engine spawns is tracked, and after
//! `EngineHandle::shutdown` none is left — neither in the engine's own tracker nor among the
//! runtime's alive tasks — even with a CONNECT tunnel still open, a queued create waiting for
//! its replay worker, the config file watched and the offline detector probing.

mod common;
use common::Upstream;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// One loopback upstream, a memory credential store, a 5 s drain.
fn config(up: &Upstream) -> String {
    format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\nallow_private_targets = true\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n[queue]\ncredentials = \"memory\"\n[limits]\ndrain_timeout = \"5s\"\n",
        up.origin()
    )
}

#[tokio::test]
async fn no_task_is_left_after_shutdown() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("weir.toml");
    let toml = config(&up);
    std::fs::write(&file, &toml).unwrap();
    let settings = weir::config::load_file(&file).unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(file.clone());
    let handle = weir::start(opts).await.expect("weir starts");
    let started = handle.running_tasks();
    // The serve task, the config watcher, the replay worker, the offline detector, the
    // baselines writer, the breaker forwarder, the sessions poller, the hand-off expiry.
    assert!(started >= 5, "only {started} tracked tasks after start");

    // A proxied request (its connection ends with the response: no keep-alive pool).
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", handle.local_addr())).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/agents/sessions", up.origin()))
        .header("authorization", "token tasks")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(client);

    // A CONNECT tunnel, left open across the shutdown: its task must end with the engine.
    let mut tunnel = tokio::net::TcpStream::connect(handle.local_addr())
        .await
        .unwrap();
    let target = up.addr;
    tunnel
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 12];
    tunnel.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    assert!(
        handle.running_tasks() > started,
        "the tunnel is a tracked task"
    );

    handle.shutdown().await;
    assert_eq!(
        handle.running_tasks(),
        0,
        "tracked tasks left after shutdown"
    );
    drop(tunnel);
    drop(handle);
    up.kill();

    // What is left in the runtime once the test's own upstream is gone: nothing. Polled,
    // because a closed socket reaches a task's next poll, not the moment it is closed.
    let mut left = alive();
    for _ in 0..200 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = alive();
    }
    assert_eq!(left, 0, "runtime tasks still alive after shutdown");
}

/// A cache fetch is a detached task (a client that hangs up does not cancel it): the engine
/// tracks it, and shutdown waits for it to end rather than leaving it running.
#[tokio::test]
async fn a_fetch_in_flight_at_shutdown_is_tracked_and_waited_for() {
    let up = Upstream::start().await;
    up.set(|b| b.delay = Duration::from_millis(800));
    let dir = tempfile::tempdir().unwrap();
    let toml = config(&up);
    let settings = weir::config::parse_str(&toml, "weir.toml").unwrap();
    let handle = weir::start(weir::EngineOptions::new(settings, dir.path().join("data")))
        .await
        .expect("weir starts");
    let started = handle.running_tasks();
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", handle.local_addr())).unwrap())
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let gave_up = client
        .get(format!("{}/agents/sessions", up.origin()))
        .header("authorization", "token flight")
        .send()
        .await;
    assert!(gave_up.is_err(), "the client hung up before the answer");
    assert!(
        handle.running_tasks() > started,
        "the flight the client left is a tracked task"
    );
    handle.shutdown().await;
    assert_eq!(
        handle.running_tasks(),
        0,
        "tracked tasks left after shutdown"
    );
    assert_eq!(
        up.count("/agents/sessions"),
        1,
        "the one fetch reached the upstream"
    );
}

/// A zero-config start watches no config file it was only told the place of (the OS default
/// location, as the tray and `weir serve` pass it): its directory is not created, and the
/// status says the file is not watched.
#[tokio::test]
async fn a_config_file_that_does_not_exist_is_not_watched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cfg").join("weir").join("config.toml");
    let up = Upstream::start().await;
    let settings = weir::config::parse_str(
        &format!("default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n", up.origin()),
        "none",
    )
    .unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(file.clone());
    let handle = weir::start(opts).await.expect("weir starts");
    assert!(!handle.status_now().settings.watching);
    assert!(
        !file.parent().unwrap().exists(),
        "the config dir was created"
    );
    handle.shutdown().await;
    assert_eq!(handle.running_tasks(), 0);
}
