//! Commits a create the upstream could not take: its credential to the keychain, the row (with
//! only the credential's account name) to SQLite, before Weir answers (a provisional job, or
//! `202 Accepted`).

use super::credential::Credential;
use super::{event, now_ms, QueueState};
use crate::config::QueueCaps;
use crate::events::Bus;
use crate::problem::{Problem, ProblemKind};
use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};
use weir_store::{Item, NewItem, StoreError, Usage};

/// A create to queue, as the request path has it.
pub(crate) struct Create<'a> {
    pub upstream: &'a str,
    /// The dedupe key (identity + path + body, or the `Idempotency-Key`).
    pub key: &'a str,
    /// The keyed hash of the caller's credential (never the credential).
    pub identity: String,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
}

impl QueueState {
    /// The live (not ended) queued item with this dedupe key.
    pub async fn find_live(&self, key: &str) -> Option<Item> {
        let q = self.open()?;
        match q.store.find_by_dedupe_key(key).await {
            Ok(Some(item)) if item.state.is_live() => Some(item),
            _ => None,
        }
    }

    /// [`Queue::find_live`], or the item stored under `key` that was sent (`done`) less than
    /// `window` ago: a create sent again soon after its replay joins it, as one sent again
    /// soon after a direct create joins that (`queue.dedupe_window`), instead of making a
    /// second task upstream.
    pub async fn find_joinable(&self, key: &str, window: std::time::Duration) -> Option<Item> {
        let q = self.open()?;
        let item = q.store.find_by_dedupe_key(key).await.ok()??;
        let now = crate::time_fmt::now_ms();
        let recent = item.state == weir_store::State::Done
            && now.saturating_sub(item.updated_at) <= window.as_millis() as i64;
        (item.state.is_live() || recent).then_some(item)
    }

    /// Stores `c` durably and wakes the replay workers; the new (or identical already
    /// queued) item, with the provisional ids the client is answered with. `reason` says why it was queued; `in_doubt` that the upstream
    /// may have taken it already (looked up before any replay).
    /// `caps` bound what may wait (see [`admit`]): a create past them is refused with a
    /// `queue_refused` problem, and so is one without a credential.
    pub async fn enqueue(
        &self,
        bus: &Bus,
        c: Create<'_>,
        reason: &str,
        in_doubt: bool,
        caps: &QueueCaps,
    ) -> Result<Item, Problem> {
        let upstream = c.upstream;
        let unavailable = |detail: String| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::QueueUnavailable,
                detail,
            )
            .upstream(upstream)
        };
        // A create without a credential could never be sent later (the upstream wants one),
        // and anything that reaches Weir can send one, a web page's `no-cors` POST included.
        if !crate::identity::has_credential(c.headers) {
            return Err(refused(
                upstream,
                format!("{reason}, and Weir does not queue a create that carries no credential (no Authorization header): it could never be sent later"),
            ));
        }
        let q = match self {
            QueueState::Open(q) => q,
            QueueState::Unavailable(e) => {
                return Err(unavailable(format!(
                    "{reason}, and the create queue could not be opened: {e}"
                )))
            }
        };
        // One create at a time past the caps' check until it is stored, so that creates
        // arriving together cannot all pass one count.
        let _admitting = q.admitting.lock().await;
        // The credential goes to the keychain; the row gets only its account name.
        let credential = Credential::from_headers(c.headers);
        let account = crate::secrets::names::queue_account(c.key);
        let item = new_item(c, credential.as_ref().map(|_| account.clone()), in_doubt);
        let size = stored_size(&item);
        // `Display` names the database and what went wrong with it (unreachable, read-only).
        let usage = q
            .store
            .live_usage(&item.identity)
            .await
            .map_err(|e| unavailable(format!("{reason}, and {e}. {}", e.fix())))?;
        if let Err(why) = admit(caps, &usage, size) {
            return Err(refused(upstream, format!("{reason}, and {why}")));
        }
        if let Some(cred) = &credential {
            if let Err(e) = q.put_credential(&account, cred).await {
                return Err(unavailable(format!("{reason}. Weir did not queue the create because it cannot keep its credential safely: {e}")));
            }
        }
        match q.store.insert(item, now_ms()).await {
            Ok(item) => {
                q.kept.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                bus.emit(event(&item, reason));
                q.wake.notify_waiters();
                Ok(item)
            }
            Err(StoreError::Duplicate { existing_id }) => match q.store.get(existing_id).await {
                Ok(Some(item)) => Ok(item),
                Ok(None) | Err(_) => Err(unavailable(format!(
                    "{reason}, and an identical create was queued as #{existing_id} but cannot be read back"
                ))),
            },
            Err(e) => {
                q.delete_credential(&account).await;
                Err(unavailable(format!(
                    "{reason}, and the create could not be stored: {}. {}",
                    e.detail(),
                    e.fix()
                )))
            }
        }
    }
}

/// Stores `c` as an `offered` item (a create offered to the local agent, #14) with its offer
/// row (`offer`, in the same transaction): its
/// credential in the keychain as for a queued create, so a declined or expired offer can go
/// back to the queue and be replayed. Not woken for replay: an offered item is never sent.
/// `Err(Duplicate)` names a live item that already holds the create's dedupe key.
pub(crate) async fn store_offered(
    q: &super::Queue,
    c: Create<'_>,
    expires_at_ms: i64,
    offer: serde_json::Value,
) -> Result<weir_store::Item, StoreError> {
    let credential = Credential::from_headers(c.headers);
    let account = crate::secrets::names::queue_account(c.key);
    if let Some(cred) = &credential {
        q.put_credential(&account, cred)
            .await
            .map_err(|e| StoreError::Other {
                path: std::path::PathBuf::from("keychain"),
                detail: format!("cannot keep the create's credential safely: {e}"),
            })?;
    }
    let item = new_item(c, credential.map(|_| account.clone()), false);
    let stored = q
        .store
        .insert_offered(item, expires_at_ms, offer, now_ms())
        .await;
    // A duplicate's credential is the live item's (same key, same account): keep it.
    if matches!(&stored, Err(e) if !matches!(e, StoreError::Duplicate { .. })) {
        q.delete_credential(&account).await;
    }
    stored
}

/// A `queue_refused` problem: the queue did not keep the create (a cap, or no credential).
fn refused(upstream: &str, detail: String) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ProblemKind::QueueRefused,
        detail,
    )
    .upstream(upstream)
}

/// What a row takes on disk, as the caps count it: the body and the kept headers.
fn stored_size(item: &NewItem) -> u64 {
    let headers: usize = item
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.len() + 6)
        .sum();
    (item.body.len() + headers + 2) as u64
}

/// Whether one more live item of `size` bytes fits `caps`, given what the live items take
/// now; else why not and what to do (the caps are the queue's bound on the keychain entries
/// and the disk that live items hold: each has one of each until it ends).
fn admit(caps: &QueueCaps, now: &Usage, size: u64) -> Result<(), String> {
    let fix = "see what waits with `weir queue ls`, cancel what is no longer wanted (`weir queue cancel ID`), or raise the cap in Weir's config";
    let over = |have: u64, add: u64, cap: usize| have + add > cap as u64;
    if over(now.identity_items, 1, caps.max_items_per_identity) {
        return Err(format!(
            "this credential already has {} creates waiting in Weir's queue, its limit (queue.max_items_per_identity = {}); {fix}",
            now.identity_items, caps.max_items_per_identity
        ));
    }
    if over(now.identity_bytes, size, caps.max_bytes_per_identity) {
        return Err(format!(
            "this credential's waiting creates take {} bytes and this one {size}, past its limit (queue.max_bytes_per_identity = {}); {fix}",
            now.identity_bytes, caps.max_bytes_per_identity
        ));
    }
    if over(now.items, 1, caps.max_items) {
        return Err(format!(
            "Weir's queue already holds {} waiting creates, its limit (queue.max_items = {}); {fix}",
            now.items, caps.max_items
        ));
    }
    if over(now.bytes, size, caps.max_bytes) {
        return Err(format!(
            "the waiting creates take {} bytes and this one {size}, past the queue's limit (queue.max_bytes = {}); {fix}",
            now.bytes, caps.max_bytes
        ));
    }
    Ok(())
}

/// The queue row for `c` (no secret: the credential is referenced by `credential_ref`).
fn new_item(c: Create<'_>, credential_ref: Option<String>, in_doubt: bool) -> NewItem {
    let (repo, statement) = describe(c.uri, c.body);
    NewItem {
        upstream: c.upstream.into(),
        method: http::Method::POST,
        path_and_query: c
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "/".into()),
        headers: replay_headers(c.headers),
        body: c.body.to_vec(),
        identity: c.identity,
        credential_ref,
        dedupe_key: c.key.to_string(),
        repo,
        problem_statement: statement,
        in_doubt,
        // Fresh ids the client can follow while it waits (see `super::provisional`).
        provisional: Some(super::provisional::new_ids()),
    }
}

/// Request headers a queued row keeps (exact names), besides the `copilot-*` and `x-github-*`
/// families. Anything else a client sent (a private token in a custom header, tracing ids) is
/// not written to disk: the credential goes to the keychain, nothing else is needed to replay.
const KEPT_HEADERS: [&str; 8] = [
    "content-type",
    "accept",
    "user-agent",
    "idempotency-key",
    "editor-version",
    "editor-plugin-version",
    "openai-intent",
    "x-request-id",
];

/// Headers to replay: an allowlist ([`KEPT_HEADERS`], `copilot-*`, `x-github-*`).
fn replay_headers(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .filter(|(k, _)| kept(k.as_str()))
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

fn kept(name: &str) -> bool {
    KEPT_HEADERS.contains(&name) || name.starts_with("copilot-") || name.starts_with("x-github-")
}

/// `owner/repo` from `/agents/swe/v1/jobs/{owner}/{repo}` (or a Task API create's
/// `…/repos/{owner}/{repo}/tasks`) and the body's `problem_statement` (a Task API create
/// without one: its `prompt`, which is what its session records).
fn describe(uri: &Uri, body: &[u8]) -> (Option<String>, Option<String>) {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |k: &str| v.get(k).and_then(|s| s.as_str()).map(str::to_string);
    if let Some(repo) = super::provisional::task_repo(uri.path()) {
        return (
            Some(repo),
            text("problem_statement").or_else(|| text("prompt")),
        );
    }
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let repo = (segs.len() >= 6).then(|| format!("{}/{}", segs[4], segs[5]));
    (repo, text("problem_statement"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31, item 2: each cap refuses the item that would pass it, and says which.
    #[test]
    fn each_cap_refuses_the_item_past_it() {
        let caps = QueueCaps {
            max_items: 10,
            max_bytes: 1000,
            max_items_per_identity: 2,
            max_bytes_per_identity: 300,
        };
        let usage = |items, bytes, identity_items, identity_bytes| Usage {
            items,
            bytes,
            identity_items,
            identity_bytes,
        };
        assert!(admit(&caps, &usage(9, 500, 1, 200), 100).is_ok());
        let refused = |u: Usage, size| admit(&caps, &u, size).unwrap_err();
        assert!(refused(usage(3, 300, 2, 200), 10).contains("queue.max_items_per_identity = 2"));
        assert!(refused(usage(3, 300, 1, 200), 101).contains("queue.max_bytes_per_identity = 300"));
        assert!(refused(usage(10, 300, 0, 0), 10).contains("queue.max_items = 10"));
        assert!(refused(usage(9, 950, 0, 0), 51).contains("queue.max_bytes = 1000"));
        assert!(refused(usage(10, 300, 0, 0), 10).contains("weir queue cancel"));
    }

    #[test]
    fn only_allowlisted_headers_are_kept() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "token a"),
            ("cookie", "s=1"),
            ("content-type", "application/json"),
            ("x-github-api-version", "2022-11-28"),
            ("copilot-integration-id", "vscode-chat"),
            ("idempotency-key", "k"),
            ("x-api-key", "secret"),
            ("proxy-authorization", "Basic x"),
        ] {
            h.insert(
                http::HeaderName::from_static(k),
                http::HeaderValue::from_static(v),
            );
        }
        let mut names: Vec<String> = replay_headers(&h).into_iter().map(|(k, _)| k).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "content-type",
                "copilot-integration-id",
                "idempotency-key",
                "x-github-api-version"
            ]
        );
    }
}
