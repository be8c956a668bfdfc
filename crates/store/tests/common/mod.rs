//! Helpers shared by the store's integration tests: temp databases and sample items.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

use weir_store::NewItem;

pub fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join("queue.db");
    (dir, path)
}

/// A create for `octo/repo-{n}` on the "copilot" upstream, with dedupe key `key-{n}`.
pub fn new_item(n: u32) -> NewItem {
    NewItem {
        upstream: "copilot".into(),
        method: http::Method::POST,
        path_and_query: format!("/agents/swe/v1/jobs/octo/repo-{n}"),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-github-api-version".into(), "2025-05-01".into()),
        ],
        body: format!(r#"{{"problem_statement":"fix bug {n}"}}"#).into_bytes(),
        identity: format!("{n:064x}"),
        credential_ref: Some(format!("cred-{n}")),
        dedupe_key: format!("key-{n}"),
        repo: Some(format!("octo/repo-{n}")),
        problem_statement: Some(format!("fix bug {n}")),
        in_doubt: false,
        provisional: None,
    }
}

/// An item result from its stored JSON form (what the `result` column holds), through the
/// type's own deserializer.
#[allow(dead_code)] // not every test binary uses it
pub fn result(v: serde_json::Value) -> weir_store::ItemResult {
    serde_json::from_value(v).expect("a result's stored form")
}
