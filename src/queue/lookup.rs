//! The in-doubt lookup (see [`super::replay`]'s in-doubt rule): before an item that may already
//! have reached the upstream is sent again, the repository's sessions are listed with the item's
//! credential and searched for its problem statement.
//!
//! **The stored token stands in.** When an in-doubt item's own credential is gone (keychain
//! entry deleted, or Weir restarted with in-memory credentials), the lookup is made with the
//! GitHub token stored in the keychain (`PUT /_weir/api/token`), but only when that token
//! belongs to the same GitHub account as the item's credential did (both resolved with
//! `GET /user`, see [`crate::accounts`]). Found: the item is `done`. Not found: it is `failed`
//! — the stored token is only ever used to look, never to send the create.

use super::replay::{end, set_credential, Replayer};
use super::{now_ms, Queue};
use crate::accounts::Resolution;
use crate::config::RouteClass;
use crate::identity::Identity;
use crate::problem::Problem;
use crate::upstream::{AttemptPolicy, Replayable};
use bytes::Bytes;
use http::{header, HeaderValue};
use http::{HeaderMap, Method, Uri};
use std::time::Duration;
use weir_store::Item;

impl Replayer {
    /// Looks an in-doubt item up upstream (see the module's in-doubt rule), through the same
    /// admission and attempt phases as any list call.
    pub(super) async fn lookup(
        &self,
        up: usize,
        item: &Item,
        credential: &serde_json::Value,
        scope: Option<crate::identity::Identity>,
    ) -> Lookup {
        let (Some(repo), Some(statement)) = (&item.repo, &item.problem_statement) else {
            return Lookup::Unverifiable;
        };
        let uri: Uri = match format!("/agents/sessions?repo_nwo={repo}&sort=created_at").parse() {
            Ok(u) => u,
            Err(e) => return Lookup::Unknown(e.to_string()),
        };
        let mut headers = HeaderMap::new();
        set_credential(&mut headers, credential);
        let req = Replayable {
            method: &Method::GET,
            uri: &uri,
            headers: &headers,
            body: Bytes::new(),
            identity: scope,
        };
        let policy = AttemptPolicy::for_request(&Method::GET, true);
        let resp = match self
            .upstreams
            .call_buffered(up, RouteClass::List, req, policy, None)
            .await
        {
            Ok(a) if a.response.status().is_success() => a.response,
            Ok(a) => {
                return Lookup::Unknown(format!("session list answered {}", a.response.status()))
            }
            Err(p) if is_closed(&p) => return Lookup::NotNow,
            Err(p) => return Lookup::Unknown(p.detail),
        };
        let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
        let since = item.last_attempt_at.unwrap_or(item.created_at) - 60_000;
        match find_session(&v, statement, since) {
            Some(s) => Lookup::Found(serde_json::json!({"found_by_lookup": true, "session": s})),
            None => Lookup::NotFound,
        }
    }
}

impl Replayer {
    /// Settles an in-doubt item whose credential is gone with the stored token of the same
    /// account. `None`: there is no such token (none stored, another account, the item's
    /// account unknown), so the caller fails the item as before; else how long to wait.
    pub(super) async fn settle_with_stored_token(
        &self,
        q: &Queue,
        up: usize,
        item: &Item,
    ) -> Option<Duration> {
        let (credential, scope) = self.stored_token_of_account(q, item).await?;
        let bus = &self.bus;
        let outcome = match self.lookup(up, item, &credential, Some(scope)).await {
            Lookup::Found(result) => {
                let r = q.store.mark_done(item.id, result, now_ms()).await;
                if let Ok(it) = &r {
                    end(bus, q, it, "done: found upstream with the stored token of the same account, not sent again").await;
                }
                r.map(|_| ())
            }
            Lookup::NotFound => {
                let r = q.store.mark_failed(item.id, "the replay credential is gone and the stored token of the same account found no such session; not replayed (the stored token is only used to look)", now_ms()).await;
                if let Ok(it) = &r {
                    end(bus, q, it, "failed: credential missing, not found upstream").await;
                }
                r.map(|_| ())
            }
            // Not verifiable: the caller fails it for the missing credential.
            Lookup::Unverifiable => return None,
            Lookup::NotNow => return Some(Duration::from_secs(1)),
            Lookup::Unknown(e) => {
                let now = now_ms();
                let detail = format!("lookup with the stored token failed: {e}");
                q.store
                    .reschedule(item.id, now + 5_000, &detail, now)
                    .await
                    .map(|_| ())
            }
        };
        Some(super::replay::paced(&outcome))
    }

    /// The stored GitHub token as a credential (and its identity), when it belongs to the
    /// same account as the item's own credential.
    async fn stored_token_of_account(
        &self,
        q: &Queue,
        item: &Item,
    ) -> Option<(serde_json::Value, Identity)> {
        let owner = self.accounts.record(&Identity::from_hex(&item.identity)?)?;
        let account = crate::secrets::Account::GithubToken.as_str();
        let token = q.secrets.get(account).await.ok()??;
        let auth = HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, auth.clone());
        let id = self.accounts.identify(&h);
        let rec = match self.accounts.record(&id) {
            Some(r) => r,
            None => match self
                .accounts
                .resolve_now(&self.upstreams, id, auth.clone())
                .await
            {
                Resolution::Account(r) => r,
                _ => return None,
            },
        };
        if rec.account_id != owner.account_id {
            tracing::info!(item = item.id, "the stored GitHub token is another account's; it is not used for this item's lookup");
            return None;
        }
        let v = serde_json::json!({"authorization": auth.to_str().ok()?});
        Some((v, id))
    }
}

/// The gate refused the attempt (nothing was sent).
fn is_closed(p: &Problem) -> bool {
    use crate::problem::ProblemKind;
    !p.maybe_sent
        && matches!(
            p.kind,
            ProblemKind::BreakerOpen | ProblemKind::RateLimited | ProblemKind::Overloaded
        )
}

/// What the lookup found.
pub(super) enum Lookup {
    Found(serde_json::Value),
    NotFound,
    Unverifiable,
    /// The upstream's gate is closed; nothing was asked.
    NotNow,
    Unknown(String),
}

/// Any object in the list whose `problem_statement` (or `name`/`title`/`prompt`) equals the
/// statement and whose `created_at` (RFC 3339 or unix seconds) is at or after `since_ms`.
fn find_session(
    v: &serde_json::Value,
    statement: &str,
    since_ms: i64,
) -> Option<serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_session(x, statement, since_ms)),
        serde_json::Value::Object(o) => {
            let text_matches = ["problem_statement", "name", "title", "prompt"]
                .iter()
                .any(|k| o.get(*k).and_then(|s| s.as_str()) == Some(statement));
            let created = o.get("created_at").and_then(|c| {
                c.as_str()
                    .and_then(crate::time_fmt::parse_rfc3339_ms)
                    .or_else(|| c.as_i64().map(|s| s * 1000))
            });
            if text_matches && created.is_some_and(|c| c >= since_ms) {
                return Some(v.clone());
            }
            o.values()
                .find_map(|x| find_session(x, statement, since_ms))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_matching_recent_session_only() {
        let list = serde_json::json!({"sessions": [
            {"id": "old", "problem_statement": "fix it", "created_at": "2026-11-30T07:00:00Z"},
            {"id": "new", "problem_statement": "fix it", "created_at": "2026-11-30T08:00:00Z"},
        ]});
        let at = crate::time_fmt::parse_rfc3339_ms("2026-11-30T07:59:30Z").unwrap();
        assert_eq!(
            find_session(&list, "fix it", at - 60_000).unwrap()["id"],
            "new"
        );
        assert!(find_session(&list, "other", 0).is_none());
        assert!(find_session(&list, "fix it", at + 3_600_000).is_none());
    }
}
