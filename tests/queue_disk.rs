//! A full disk or a read-only data dir gives the client a clear 503 and loses nothing already
//! queued. Real filesystems: `unshare -rm` gives each Weir process its own mount namespace, in
//! which the data dir is a tiny tmpfs (full) or a read-only bind mount. Run under
//! scripts/with-keychain.sh (credentials must survive restarts).

mod common;
use common::{eventually, serve_in_mount_namespace as serve, Upstream};
use std::collections::HashMap;
use std::path::Path;
use std::process::Child;

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

fn config(dir: &Path, up: std::net::SocketAddr) -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.join("weir.toml");
    std::fs::write(&cfg, format!("default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\nintercept = false\nwatch_github_status = false\n[[upstream]]\nname = \"jobs\"\norigin = \"http://{up}\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n")).unwrap();
    cfg
}

fn closed_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn create(addr: &str, up: std::net::SocketAddr, body: &str) -> (u16, serde_json::Value) {
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{addr}")).unwrap())
        .build()
        .unwrap();
    let r = c
        .post(format!("http://{up}{JOBS}"))
        .header("authorization", "token disk")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

fn stop(mut c: Child) {
    c.kill().unwrap();
    c.wait().unwrap();
}

fn statement(i: usize, pad: usize) -> String {
    format!(
        r#"{{"problem_statement":"task {i}","pad":"{}"}}"#,
        "x".repeat(pad)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_dir_refuses_new_creates_and_loses_nothing() {
    let up = closed_port();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = config(tmp.path(), up);

    let (weir, addr) = serve("", &cfg, &data);
    for i in 0..3 {
        assert_eq!(create(&addr, up, &statement(i, 10)).await.0, 201);
    }
    stop(weir);

    let d = data.display();
    let (weir, addr) = serve(
        &format!("mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}' && "),
        &cfg,
        &data,
    );
    let (status, p) = create(&addr, up, &statement(99, 10)).await;
    assert_eq!(status, 503, "{p}");
    assert_eq!(p["kind"], "queue_unavailable");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("read-only"),
        "{p}"
    );
    stop(weir);

    let upstream = Upstream::start_on(tokio::net::TcpListener::bind(up).await.unwrap()).await;
    upstream.set(|b| b.status = 201);
    let (weir, _) = serve("", &cfg, &data);
    let all = eventually(500, || upstream.count(JOBS) >= 3).await;
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop(weir);
    assert!(all, "the 3 queued before the read-only phase were replayed");
    let mut per: HashMap<String, usize> = HashMap::new();
    for s in upstream.seen() {
        *per.entry(String::from_utf8_lossy(&s.body).into_owned())
            .or_default() += 1;
    }
    assert_eq!(per.len(), 3, "the refused create was never sent: {per:?}");
    assert!(per.values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_new_creates_and_keeps_the_queued_ones() {
    let up = closed_port();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = config(tmp.path(), up);
    let d = data.display();
    let (weir, addr) = serve(
        &format!("mount -t tmpfs -o size=320k tmpfs '{d}' && "),
        &cfg,
        &data,
    );
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..60 {
        let (status, body) = create(&addr, up, &statement(i, 16 * 1024)).await;
        match status {
            201 => accepted.push(body["weir"]["queue_id"].as_i64().unwrap()),
            _ => {
                refused = Some((status, body));
                break;
            }
        }
    }
    let (status, p) = refused.expect("the tiny disk fills up");
    assert_eq!(status, 503, "{p}");
    assert_eq!(p["kind"], "queue_unavailable");
    let detail = p["detail"].as_str().unwrap().to_lowercase();
    assert!(
        detail.contains("full") || detail.contains("space"),
        "{detail}"
    );
    assert!(!accepted.is_empty());
    // Everything accepted is still there.
    // Reads need the control secret, which this install keeps in the keychain.
    let secret = weir::secrets::Namespace::for_data_dir(&data)
        .keychain()
        .get(weir::secrets::Account::ControlSecret.as_str())
        .unwrap()
        .unwrap();
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{addr}/_weir/api/queue"))
        .header("x-weir-secret", secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<i64> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect();
    for id in &accepted {
        assert!(ids.contains(id), "item {id} lost");
    }
    stop(weir);
}
