//! Data at rest: the data dir is the user's alone (0700, files 0600, the SQLite WAL and shared
//! memory files too); queue rows keep only an allowlist of request headers; and the purge of
//! long-ended items deletes the keychain credential of exactly the rows it deletes. The purge
//! test needs a keychain: run under scripts/with-keychain.sh.

mod common;
use common::{eventually, Upstream, Weir};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn the_data_dir_and_queue_files_are_private() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A data dir left readable by an older version is tightened.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n",
        up.origin()
    );
    let settings = weir::config::parse_str(&toml, "t").unwrap();
    let h = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    // A create is queued, so the database has been written (WAL and shm exist).
    let proxy = reqwest::Proxy::all(format!("http://{}", h.local_addr())).unwrap();
    let c = reqwest::Client::builder().proxy(proxy).build().unwrap();
    let r = c
        .post(format!("{}{JOBS}", up.origin()))
        .header("authorization", "token a")
        .body(r#"{"problem_statement":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(mode(&data), 0o700, "data dir");
    let mut files = 0;
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            files += 1;
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
    assert!(files >= 2, "the database and its WAL at least");
    h.shutdown().await;
}

/// The databases in the data dir, by name (the SQLite files and their WAL/shm companions).
fn databases(data: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".sqlite"))
        .collect();
    names.sort();
    names
}

/// Start what is used (issue 21): a start makes no database. The cache file comes with the
/// first answer stored (a keychain holds its key: run under scripts/with-keychain.sh), the queue with the first create
/// queued; the accounts table with the first account resolved, which this upstream (not
/// api.github.com) never does.
#[tokio::test]
async fn a_start_makes_no_database_until_one_is_needed() {
    let up = Upstream::start().await;
    let weir = Weir::start(
        &[&up.origin()],
        "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n",
    )
    .await;
    let data = weir.dir.path().to_path_buf();
    assert_eq!(databases(&data), Vec::<String>::new(), "after start");

    let c = weir.client("a");
    let r = c
        .get(format!("{}/agents/sessions/s1", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The suite runs this under its private keychain (scripts/with-keychain.sh), where the
    // cache's key can be kept, so the cache is written to disk.
    let persistence = weir.handle.status().await.cache.persistence;
    assert!(
        matches!(
            persistence,
            weir::status::CachePersistence::Persisted { .. }
        ),
        "run under scripts/with-keychain.sh: {persistence:?}"
    );
    assert!(eventually(250, || data.join("cache.sqlite").exists()).await);
    assert!(!data.join("queue.sqlite3").exists(), "no create yet");

    up.set(|b| b.status = 503);
    let r = c
        .post(format!("{}{JOBS}", up.origin()))
        .body(r#"{"problem_statement":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "queued");
    assert!(
        data.join("queue.sqlite3").exists(),
        "the queued create made the queue"
    );
    assert!(!data.join("accounts.sqlite3").exists());
    up.set(|b| b.status = 201);
    assert!(
        eventually(500, || up.count(JOBS) >= 2).await,
        "and it is replayed from there"
    );
}

#[tokio::test]
async fn queued_rows_keep_only_allowlisted_headers() {
    let up = Upstream::start().await;
    up.set(|b| b.status = 503);
    let weir = Weir::start(
        &[&up.origin()],
        "[queue]\ncredentials = \"memory\"\n[breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n",
    )
    .await;
    let r = weir
        .client("a")
        .post(format!("{}{JOBS}", up.origin()))
        .header("content-type", "application/json")
        .header("x-github-api-version", "2022-11-28")
        .header("copilot-integration-id", "vscode-chat")
        .header("x-private-session", "s3cret")
        .header("x-api-key", "k3y")
        .body(r#"{"problem_statement":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let store = weir_store::Store::open(weir.dir.path().join("queue.sqlite3")).unwrap();
    let items = store
        .list(&weir_store::ListFilter {
            states: vec![],
            limit: 10,
        })
        .unwrap();
    let names: Vec<&str> = items[0].headers.iter().map(|(k, _)| k.as_str()).collect();
    for kept in [
        "content-type",
        "x-github-api-version",
        "copilot-integration-id",
    ] {
        assert!(names.contains(&kept), "{kept} kept: {names:?}");
    }
    for dropped in ["x-private-session", "x-api-key", "authorization"] {
        assert!(!names.contains(&dropped), "{dropped} not stored: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_deletes_the_credentials_of_exactly_the_rows_it_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let keychain = weir::secrets::Namespace::for_data_dir(&data).keychain();
    if keychain.probe().is_err() {
        eprintln!("no keychain: run under scripts/with-keychain.sh");
        return;
    }
    // More long-ended items than one page of the old purge (200), each with a credential.
    let old = 1_000; // ms since the epoch: long before the 7-day keep
    let mut accounts = Vec::new();
    {
        let mut store = weir_store::Store::open(data.join("queue.sqlite3")).unwrap();
        for i in 0..205 {
            let key = format!("k{i}");
            let account = weir::secrets::names::queue_account(&key);
            keychain
                .set(&account, r#"{"authorization":"token a"}"#)
                .unwrap();
            let item = weir_store::NewItem {
                upstream: "up0".into(),
                method: http::Method::POST,
                path_and_query: JOBS.into(),
                headers: vec![],
                body: b"{}".to_vec(),
                identity: "00".repeat(32),
                credential_ref: Some(account.clone()),
                dedupe_key: key,
                repo: None,
                problem_statement: None,
                in_doubt: false,
                provisional: None,
            };
            let it = store.insert(&item, old).unwrap();
            store.mark_failed(it.id, "test", old).unwrap();
            accounts.push(account);
        }
    }
    let up = Upstream::start().await;
    let toml = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"up0\"\norigin = \"{}\"\n",
        up.origin()
    );
    let settings = weir::config::parse_str(&toml, "t").unwrap();
    let h = weir::start(weir::EngineOptions::new(settings, data.clone()))
        .await
        .unwrap();
    let db = data.join("queue.sqlite3");
    let purged = eventually(500, || {
        weir_store::Store::open(&db)
            .and_then(|s| s.counts())
            .is_ok_and(|c| c.total() == 0)
    })
    .await;
    assert!(purged, "the old rows were purged");
    // Credentials are deleted one keychain call at a time after the rows: wait for the last.
    let last = accounts.last().unwrap().clone();
    let k = keychain.clone();
    let gone = eventually(3000, || k.get(&last).is_ok_and(|v| v.is_none())).await;
    assert!(gone, "the last credential was deleted");
    h.shutdown().await;
    let left: Vec<&String> = accounts
        .iter()
        .filter(|a| keychain.get(a).unwrap().is_some())
        .collect();
    assert!(
        left.is_empty(),
        "{} queue credentials left behind",
        left.len()
    );
}
