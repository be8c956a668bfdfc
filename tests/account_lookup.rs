//! The stored GitHub token is used: an in-doubt create whose own credential is gone is looked
//! up with the token stored in the keychain — only when that token is the same account's.
//! Real Secret Service: `scripts/with-keychain.sh cargo test -p weir --test account_lookup`.

mod fake_github;
use fake_github::*;
use std::time::Duration;
use weir::secrets::{Account, Namespace};

const JOBS: &str = "/agents/swe/v1/jobs/octo/repo";

fn keychain_works() -> bool {
    match weir_keychain::Keychain::new(&format!("weir-test-acct-{}", std::process::id())).probe() {
        Ok(()) => true,
        Err(_) if std::env::var("WEIR_SKIP_KEYCHAIN_TESTS").is_ok_and(|v| v == "1") => false,
        Err(e) => panic!(
            "no usable keychain: {e}\nRun as `scripts/with-keychain.sh cargo test -p weir --test account_lookup`"
        ),
    }
}

/// The create times out after reaching the upstream (so it is `in_doubt`); Weir stops before
/// the replay worker looks it up.
const CFG: &str = "[classes.create]\nper_try_timeout = \"200ms\"\ndeadline = \"200ms\"\n[classes.list]\ndeadline = \"300ms\"\n[breaker]\nminimum_calls = 1000\n";

/// Queues an in-doubt create by ALICE_VSCODE (resolved to alice first), stores `stored` as the
/// GitHub token, deletes the item's own credential, restarts Weir, and returns the item's end
/// state as the control API shows it.
async fn in_doubt_with_stored_token(fake: &Fake, stored: &str) -> serde_json::Value {
    fake.state.lock().unwrap().post_delay = Duration::from_secs(2);
    let weir = start(fake, CFG).await;
    let c = weir.client(ALICE_VSCODE, VSCODE_UA);
    assert_eq!(weir.get(&c, &list_url(fake, 20)).await.0, 200);
    weir.resolved(1).await;
    let put = reqwest::Client::new()
        .put(format!("{}/_weir/api/token", weir.handle.base_url()))
        .header("x-weir-secret", weir.handle.control_secret())
        .json(&serde_json::json!({"token": stored}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    // The item's own credential can never read the list (so only a lookup with the stored
    // token can settle the item, whichever Weir's worker makes it).
    fake.state
        .lock()
        .unwrap()
        .lists_down_for
        .insert(ALICE_VSCODE.to_string());
    let r = c
        .post(format!("http://{}{JOBS}", fake.copilot))
        .body(r#"{"problem_statement":"fix the flaky test","event_type":"weir-test"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "queued in doubt");
    weir.handle.shutdown().await;
    let dir = weir.dir;

    // The item's own credential is gone.
    let item = {
        let store = weir_store::Store::open(dir.path().join("queue.sqlite3")).unwrap();
        let items = store.list(&weir_store::ListFilter::default()).unwrap();
        assert_eq!(items.len(), 1);
        items[0].clone()
    };
    assert!(item.needs_lookup, "{item:?}");
    let keychain = Namespace::for_data_dir(dir.path()).keychain();
    keychain
        .delete(item.credential_ref.as_deref().unwrap())
        .unwrap();
    assert_eq!(
        keychain
            .get(Account::GithubToken.as_str())
            .unwrap()
            .as_deref(),
        Some(stored)
    );

    let again = start_in(fake, CFG, dir).await;
    let url = format!("{}/_weir/api/queue/{}", again.handle.base_url(), item.id);
    let mut last = serde_json::Value::Null;
    for _ in 0..300 {
        last = reqwest::Client::new()
            .get(&url)
            .header("x-weir-secret", again.handle.control_secret())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if last["state"] == "done" || last["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    again.assert_no_token_anywhere().await;
    let _ = Namespace::for_data_dir(again.dir.path())
        .keychain()
        .delete(Account::GithubToken.as_str());
    again.handle.shutdown().await;
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_token_of_the_same_account_settles_an_in_doubt_create() {
    if !keychain_works() {
        return;
    }
    let fake = Fake::start().await;
    let item = in_doubt_with_stored_token(&fake, ALICE_BROWSER).await;
    assert_eq!(item["state"], "done", "{item}");
    assert_eq!(
        item["result"]["session"]["problem_statement"],
        "fix the flaky test"
    );
    let lookups: Vec<_> = fake
        .list_calls()
        .into_iter()
        .filter(|h| h.path_and_query.contains("repo_nwo=octo%2Frepo"))
        .map(|h| h.token)
        .collect();
    // Lookups with the item's own credential found the list down; the one that settled the
    // item used the stored token.
    assert_eq!(
        lookups.last().map(String::as_str),
        Some(ALICE_BROWSER),
        "{lookups:?}"
    );
    assert!(lookups
        .iter()
        .all(|t| t == ALICE_VSCODE || t == ALICE_BROWSER));
    let posts = fake
        .state
        .lock()
        .unwrap()
        .seen
        .iter()
        .filter(|h| h.method == "POST")
        .count();
    assert_eq!(posts, 1, "never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_accounts_stored_token_is_never_used() {
    if !keychain_works() {
        return;
    }
    let fake = Fake::start().await;
    let item = in_doubt_with_stored_token(&fake, BOB).await;
    assert_eq!(item["state"], "failed", "{item}");
    // (The sessions companion polls bob's own list with it; the lookup never used it.)
    assert!(
        fake.list_calls()
            .iter()
            .all(|h| h.token != BOB || !h.path_and_query.contains("repo_nwo=octo%2Frepo")),
        "bob's token never looked for alice's create"
    );
    let posts = fake
        .state
        .lock()
        .unwrap()
        .seen
        .iter()
        .filter(|h| h.method == "POST")
        .count();
    assert_eq!(posts, 1);
}
