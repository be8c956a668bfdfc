//! Resolution: one `GET /user` on the `github-api` upstream per credential, through Weir's own
//! upstream client, admission (cooldown → breaker → bulkhead) and retry layer. Spawned off the
//! request path, deduplicated per credential, bounded in number; a failure leaves the
//! credential its own identity and is not retried for a while.
//!
//! Which credentials are sent to `/user`: only a lone `Authorization` (no `Cookie`, whose
//! meaning belongs to another site), and only a token that is GitHub's by its documented
//! prefix — or any token already on its way to the `github-api` upstream. A credential meant
//! for some other configured upstream is never shown to GitHub.

use super::record::{parse_scopes, valid_login, AccountRecord, TokenKind};
use super::{Accounts, UserCall, AFTER_FAILURE, REFRESH_AFTER_MS};
use crate::config::UpstreamIndex;
use crate::identity::Identity;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::time::Instant;

/// The upstream `/user` is asked on.
pub(super) const GITHUB_API: &str = "github-api";

/// How a resolution reaches `GET /user`: the upstreams implement it (through admission and the
/// retry layer, see `upstream::user_api`). A handle passed in rather than an import, so the
/// account directory (which the attempt phase tells of 401s) depends on no transport.
pub(crate) trait UserApi: Send + Sync {
    /// Sends `GET /user` with `headers` to the upstream at index `up`, on behalf of `id`: the
    /// whole answer, or why there is none (offline, breaker open, ...).
    fn get_user(
        &self,
        up: UpstreamIndex,
        id: Identity,
        headers: HeaderMap,
    ) -> impl Future<Output = Result<Response<Bytes>, String>> + Send;
}

impl<T: UserApi + ?Sized> UserApi for Arc<T> {
    fn get_user(
        &self,
        up: UpstreamIndex,
        id: Identity,
        headers: HeaderMap,
    ) -> impl Future<Output = Result<Response<Bytes>, String>> + Send {
        (**self).get_user(up, id, headers)
    }
}

/// What one `/user` call said.
#[derive(Debug)]
pub(crate) enum Resolution {
    Account(Arc<AccountRecord>),
    /// 401: the credential is not (or no longer) valid.
    Unauthorized,
    /// No answer to go by (offline, 5xx, a body that is not a user, no `github-api`).
    Failed(String),
}

impl Accounts {
    /// Called for every credentialed request to a managed upstream (`up`): counts it for its
    /// account and, when the credential is not mapped yet (or its mapping is old), starts a
    /// resolution in the background. Returns at once. A client's own `GET /user` starts none:
    /// its answer is read instead ([`super::learn`]), through the [`UserCall`] returned.
    /// `may_ask` is false while Weir's mode holds upstream calls (cache only, offline): then
    /// none is started, and the credential stays its own identity until a request after the
    /// hold ends (docs/reliability.md: cache only sends nothing but a token fetch).
    pub fn observe<U: UserApi + 'static, B>(
        self: &Arc<Self>,
        upstreams: &Arc<U>,
        up: UpstreamIndex,
        id: Identity,
        req: &http::Request<B>,
        may_ask: bool,
    ) -> Option<UserCall> {
        self.count(&id);
        let gh = self.github_api?;
        let h = req.headers();
        if self.is_user_call(up, req.method(), req.uri().path()) {
            return self.client_asks(id, h);
        }
        if !may_ask {
            return None;
        }
        if let Some(at) = self.with_record(&id, |r, _| r.map(|r| r.resolved_at_ms)) {
            if crate::time_fmt::now_ms() - at < REFRESH_AFTER_MS {
                return None;
            }
        }
        if self
            .failed
            .get(&id)
            .is_some_and(|until| until > Instant::now())
        {
            return None;
        }
        let auth = resolvable(h, up == gh)?;
        // The token under its other spelling is pending with it: one call answers both.
        let other = self.other_spelling(&auth);
        if !self.mark_pending(id, other) {
            return None;
        }
        let (me, ups) = (self.clone(), upstreams.clone());
        tokio::spawn(async move {
            // The permit bounds concurrent `/user` calls; pending entries wait for one.
            let permit = me.permits.clone().acquire_owned().await;
            // Learned meanwhile (the client's own `/user` answered first): nothing to ask.
            let known = me
                .record(&id)
                .is_some_and(|r| crate::time_fmt::now_ms() - r.resolved_at_ms < REFRESH_AFTER_MS);
            if permit.is_ok() && !known {
                me.resolve_now(&ups, id, auth).await;
            }
            me.unmark_pending(id, other);
        });
        None
    }

    /// Resolves a credential now (the caller awaits it: the background task above, or the
    /// in-doubt lookup checking whose the stored token is), and records the outcome.
    pub async fn resolve_now<U: UserApi + ?Sized>(
        &self,
        upstreams: &U,
        id: Identity,
        authorization: HeaderValue,
    ) -> Resolution {
        let Some(gh) = self.github_api else {
            return Resolution::Failed("no `github-api` upstream is configured".into());
        };
        let res = ask_user(upstreams, gh, id, authorization.clone()).await;
        match &res {
            Resolution::Account(r) => {
                self.resolved.fetch_add(1, Relaxed);
                tracing::debug!(credential = %id.short(), login = %r.login, kind = r.kind.as_str(), "credential resolved to its account");
            }
            Resolution::Unauthorized => {
                self.unauthorized.fetch_add(1, Relaxed);
                self.forget_token(&id, &authorization);
            }
            Resolution::Failed(why) => {
                self.failures.fetch_add(1, Relaxed);
                self.failed.insert(id, Instant::now() + AFTER_FAILURE);
                tracing::debug!(credential = %id.short(), reason = %why, "cannot resolve a credential's account; it stays its own identity");
            }
        }
        match res {
            Resolution::Account(r) => {
                Resolution::Account(self.remember_token(id, &authorization, (*r).clone()))
            }
            other => other,
        }
    }
}

/// The `Authorization` value to send to `/user`, when this request's credential may be sent.
pub(super) fn resolvable(h: &HeaderMap, to_github_api: bool) -> Option<HeaderValue> {
    if h.contains_key(header::COOKIE) {
        return None;
    }
    let mut all = h.get_all(header::AUTHORIZATION).iter();
    let (Some(v), None) = (all.next(), all.next()) else {
        return None;
    };
    let kind = TokenKind::of_authorization(v.to_str().ok()?);
    (kind != TokenKind::Other || to_github_api).then(|| v.clone())
}

async fn ask_user<U: UserApi + ?Sized>(
    upstreams: &U,
    gh: UpstreamIndex,
    id: Identity,
    authorization: HeaderValue,
) -> Resolution {
    let kind = TokenKind::of_authorization(authorization.to_str().unwrap_or(""));
    let mut h = HeaderMap::new();
    h.insert(header::AUTHORIZATION, authorization);
    h.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/vnd.github+json"),
    );
    h.insert(
        header::USER_AGENT,
        HeaderValue::from_static(concat!("weir/", env!("CARGO_PKG_VERSION"))),
    );
    let resp = match upstreams.get_user(gh, id, h).await {
        Ok(r) => r,
        Err(why) => return Resolution::Failed(why),
    };
    read_user(
        kind,
        resp.status(),
        resp.headers(),
        resp.body(),
        crate::time_fmt::now_ms(),
    )
}

/// What a `GET /user` answer says about the credential that asked it (`kind`), as of
/// `at_ms`: Weir's own call's answer, or a client's own (`super::learn`). The account id and
/// login from the body, the scopes from `X-OAuth-Scopes` and the OAuth app from
/// `X-OAuth-Client-Id`.
pub(super) fn read_user(
    kind: TokenKind,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    at_ms: i64,
) -> Resolution {
    match status {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED => return Resolution::Unauthorized,
        s => return Resolution::Failed(format!("/user answered {s}")),
    }
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let (Some(account_id), Some(login)) = (
        v.get("id").and_then(|i| i.as_u64()),
        v.get("login")
            .and_then(|l| l.as_str())
            .filter(|l| valid_login(l)),
    ) else {
        return Resolution::Failed("/user answered without a valid id and login".into());
    };
    let scopes = headers.get("x-oauth-scopes").and_then(|s| s.to_str().ok());
    // The OAuth app the token belongs to (`share = "app"`): an org approves apps one by one.
    let client_id = headers
        .get("x-oauth-client-id")
        .and_then(|s| s.to_str().ok())
        .map(str::trim)
        .filter(|s| super::record::valid_client_id(s))
        .map(str::to_string);
    Resolution::Account(Arc::new(AccountRecord {
        account_id,
        login: login.to_string(),
        kind,
        scopes: parse_scopes(scopes),
        client_id,
        resolved_at_ms: at_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_github_token_is_sent_to_user() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        assert!(resolvable(&h(&[("authorization", "token gho_a")]), false).is_some());
        assert!(resolvable(&h(&[("authorization", "Bearer tid=copilot")]), false).is_none());
        assert!(resolvable(&h(&[("authorization", "token other")]), true).is_some());
        assert!(resolvable(
            &h(&[("authorization", "token gho_a"), ("cookie", "s=1")]),
            false
        )
        .is_none());
        assert!(resolvable(
            &h(&[
                ("authorization", "token gho_a"),
                ("authorization", "token gho_b")
            ]),
            false
        )
        .is_none());
        assert!(resolvable(&h(&[("cookie", "s=1")]), true).is_none());
    }
}
