//! Learning a credential's account from the client's own `GET /user` (issue #29, item 8):
//! VS Code's Task API backend asks `api.github.com/user` before every repository's task list
//! (for `creator_id`), so its answer, which Weir forwards anyway, says everything Weir's own
//! resolution would ask (the id and login, `X-OAuth-Scopes`, `X-OAuth-Client-Id`). Weir reads
//! it instead of sending a `/user` of its own: every call Weir makes for itself is paid for by
//! a saving, and this one saves nothing.
//!
//! - While a client's `/user` is on its way, the credential counts as pending, so its other
//!   requests start no resolution of Weir's own (a [`UserCall`] holds it; dropped, it lets go).
//! - A copy from Weir's cache counts like a fresh answer if it is younger than the age at which
//!   Weir would ask again itself (`REFRESH_AFTER_MS`): a mapping is trusted that long anyway,
//!   and it is recorded as of the copy's own time (now − `Age`), so the refresh comes when it
//!   would have. The copy is the credential's own: `/user` answers are never shared between
//!   credentials (their scopes are the token's, see [`Accounts::is_user_call`]).
//! - The token's other spelling (`token X` ↔ `Bearer X`: VS Code sends both) is learned with
//!   it, as with Weir's own resolution.
//! - A 401 forgets, as on any request; an answer Weir cannot read leaves things as they were
//!   (Weir's own resolution, bounded as before, remains for the credential's other requests).

use super::record::TokenKind;
use super::resolve::{read_user, resolvable, Resolution};
use super::{Accounts, REFRESH_AFTER_MS};
use crate::config::UpstreamIndex;
use crate::identity::Identity;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// An answer that says what the stored mapping already says is written again (its time moved
/// on) at most this often: the mapping stays fresh without a disk write per `/user`.
const RELEARN_AFTER_MS: i64 = 3600 * 1000;

/// A client's own `GET /user` on the `github-api` upstream, in flight.
pub(crate) struct UserCall {
    accounts: Arc<Accounts>,
    id: Identity,
    /// The credential as sent (a lone `Authorization`): its other spelling is learned too.
    authorization: HeaderValue,
    kind: TokenKind,
    /// The token's other spelling, marked pending with it.
    other: Option<Identity>,
    /// This call marked the credential pending (and unmarks it when dropped).
    holds_pending: bool,
}

impl Drop for UserCall {
    fn drop(&mut self) {
        if self.holds_pending {
            self.accounts.unmark_pending(self.id, self.other);
        }
    }
}

impl Accounts {
    /// Whether a request is `GET /user` on the `github-api` upstream: its answer names the
    /// credential's account, and carries that token's own scopes and OAuth app, so it is
    /// cached per credential, never under an account's sharing identity.
    pub fn is_user_call(&self, up: UpstreamIndex, method: &Method, path: &str) -> bool {
        // By segments, as the router matches routes: `/user/` and `//user` are `/user` too.
        self.github_api == Some(up)
            && method == Method::GET
            && path.split('/').filter(|s| !s.is_empty()).eq(["user"])
    }

    /// A client's own `/user` (see [`Accounts::is_user_call`]) whose credential may be
    /// resolved: marks it pending while the call runs.
    pub(super) fn client_asks(self: &Arc<Self>, id: Identity, h: &HeaderMap) -> Option<UserCall> {
        let auth = resolvable(h, true)?;
        let kind = TokenKind::of_authorization(auth.to_str().unwrap_or(""));
        let other = self.other_spelling(&auth);
        let holds_pending = self.mark_pending(id, other);
        Some(UserCall {
            accounts: self.clone(),
            id,
            authorization: auth,
            kind,
            other,
            holds_pending,
        })
    }

    /// Reads the answer the client got to its `/user` (`age`: how old Weir's copy was, zero
    /// for a fresh answer).
    pub fn learn(
        &self,
        call: &UserCall,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
        age: Duration,
    ) {
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        if age_ms >= REFRESH_AFTER_MS {
            return;
        }
        let at = crate::time_fmt::now_ms() - age_ms;
        match read_user(call.kind, status, headers, body, at) {
            // A copy made before a 401 dropped the mapping says nothing about the credential
            // now: only an answer GitHub gave after it maps it again.
            Resolution::Account(_) if self.forgotten_since(&call.id, call.other, at) => {}
            Resolution::Account(rec) => {
                if let Some(old) = self.record(&call.id) {
                    let same = old.account_id == rec.account_id
                        && old.login == rec.login
                        && old.kind == rec.kind
                        && old.scopes == rec.scopes
                        && old.client_id == rec.client_id;
                    if old.resolved_at_ms >= at
                        || (same && at - old.resolved_at_ms < RELEARN_AFTER_MS)
                    {
                        return;
                    }
                }
                self.learned.fetch_add(1, Relaxed);
                tracing::debug!(credential = %call.id.short(), login = %rec.login, kind = rec.kind.as_str(), "credential's account learned from the client's own /user");
                self.remember_token(call.id, &call.authorization, (*rec).clone());
            }
            Resolution::Unauthorized => self.forget_token(&call.id, &call.authorization),
            Resolution::Failed(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::identity::IdentityKey;

    fn answer(client: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-oauth-scopes", HeaderValue::from_static("repo, workflow"));
        h.insert("x-oauth-client-id", client.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn a_copy_counts_by_its_own_age_and_the_newest_answer_wins() {
        let settings = Settings::default();
        let a = Arc::new(Accounts::in_memory(&settings, IdentityKey::new([5; 32])));
        let mut req = HeaderMap::new();
        req.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("token gho_x"),
        );
        let id = a.identify(&req);
        let call = a.client_asks(id, &req).expect("a lone GitHub token");
        assert!(
            a.pending.lock().unwrap().contains(&id),
            "pending while it runs"
        );
        let body = br#"{"id": 7, "login": "lab-dev"}"#;
        let ok = StatusCode::OK;
        let day = Duration::from_millis(REFRESH_AFTER_MS as u64);
        // A copy as old as the refresh period says nothing Weir would still trust.
        a.learn(&call, ok, &answer("01ab8ac9400c4e429b23"), body, day);
        assert!(a.record(&id).is_none());
        // A younger copy: recorded as of its own time.
        let age = Duration::from_secs(600);
        a.learn(&call, ok, &answer("01ab8ac9400c4e429b23"), body, age);
        let r = a.record(&id).expect("learned");
        assert_eq!((r.account_id, r.login.as_str()), (7, "lab-dev"));
        assert_eq!(r.scopes, vec!["repo".to_string(), "workflow".to_string()]);
        assert_eq!(r.client_id.as_deref(), Some("01ab8ac9400c4e429b23"));
        let at = crate::time_fmt::now_ms() - r.resolved_at_ms;
        assert!((600_000..610_000).contains(&at), "{at}");
        // An older copy never replaces it; a newer answer that says something else does.
        a.learn(&call, ok, &answer("178c6fc778ccc68e1d6a"), body, age * 2);
        assert_eq!(a.record(&id).unwrap().client_id, r.client_id);
        a.learn(
            &call,
            ok,
            &answer("178c6fc778ccc68e1d6a"),
            body,
            Duration::ZERO,
        );
        assert_eq!(
            a.record(&id).unwrap().client_id.as_deref(),
            Some("178c6fc778ccc68e1d6a")
        );
        assert_eq!(a.status().learned, 2);
        // Not a user: nothing changes. A 401: forgotten.
        a.learn(&call, ok, &HeaderMap::new(), b"{}", Duration::ZERO);
        assert!(a.record(&id).is_some());
        a.learn(
            &call,
            StatusCode::UNAUTHORIZED,
            &HeaderMap::new(),
            b"",
            Duration::ZERO,
        );
        assert!(a.record(&id).is_none());
        // After the 401, a copy made before it (even a second old) maps nothing again, under
        // either spelling; only an answer GitHub gave after it does.
        a.learn(
            &call,
            ok,
            &answer("01ab8ac9400c4e429b23"),
            body,
            Duration::from_secs(1),
        );
        assert!(a.record(&id).is_none(), "a copy older than the 401");
        let mut bearer = HeaderMap::new();
        bearer.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer gho_x"),
        );
        let other = a.identify(&bearer);
        drop(call);
        let call = a.client_asks(other, &bearer).expect("the other spelling");
        a.learn(
            &call,
            ok,
            &answer("01ab8ac9400c4e429b23"),
            body,
            Duration::from_secs(1),
        );
        assert!(
            a.record(&other).is_none() && a.record(&id).is_none(),
            "nor under the token's other spelling"
        );
        std::thread::sleep(Duration::from_millis(5));
        a.learn(
            &call,
            ok,
            &answer("01ab8ac9400c4e429b23"),
            body,
            Duration::ZERO,
        );
        assert!(a.record(&other).is_some(), "a fresh answer after the 401");
        drop(call);
        assert!(a.pending.lock().unwrap().is_empty(), "let go when done");
    }

    #[tokio::test]
    async fn only_get_user_on_github_api_is_a_user_call_however_it_is_spelled() {
        let settings = Settings::default();
        let a = Accounts::in_memory(&settings, IdentityKey::new([5; 32]));
        let gh = a
            .github_api()
            .expect("the default upstreams have github-api");
        for path in ["/user", "/user/", "//user", "/user//"] {
            assert!(a.is_user_call(gh, &Method::GET, path), "{path}");
        }
        for path in ["/users", "/user/repos", "/", "/userx"] {
            assert!(!a.is_user_call(gh, &Method::GET, path), "{path}");
        }
        assert!(!a.is_user_call(gh, &Method::POST, "/user"));
    }
}
