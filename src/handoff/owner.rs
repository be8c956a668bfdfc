//! Whose creates may be offered to the local agent: only those whose credential resolves to
//! the developer's own GitHub account, the account of the token stored in Weir (`weir token
//! set`, `PUT /_weir/api/token`). The local agent runs as the developer, on the developer's
//! checkout; any other local client (another user's token, a tool with no credential) would
//! be asking the developer's machine to run its statement. Both credentials are resolved with
//! `GET /user` (cached per credential by [`crate::accounts`]); anything that cannot be
//! resolved is not the developer's, and the create is queued as before.

use crate::accounts::{Accounts, Resolution};
use crate::identity::Identity;
use crate::secrets::{Account, SecretStore};
use crate::upstream::Upstreams;
use http::{header, HeaderMap, HeaderValue};

/// Why a create is not offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOwn {
    #[error("no GitHub token is stored in Weir (`weir token set`), so no create can be shown to be the developer's own")]
    NoStoredToken,
    #[error("the create carries no single credential")]
    NoCredential,
    #[error("the account of {whose} could not be resolved ({why})")]
    Unresolved { whose: &'static str, why: String },
    #[error("its credential is another GitHub account than the token stored in Weir")]
    OtherAccount,
}

/// Checks that the create with `headers` is the stored token's account's.
pub(crate) async fn check(
    accounts: &Accounts,
    upstreams: &Upstreams,
    secrets: Option<&SecretStore>,
    headers: &HeaderMap,
) -> Result<(), NotOwn> {
    let stored = match secrets {
        Some(s) => s.get(Account::GithubToken.as_str()).await.ok().flatten(),
        None => None,
    };
    let stored = stored
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or(NotOwn::NoStoredToken)?;
    let stored_auth =
        HeaderValue::from_str(&format!("Bearer {stored}")).map_err(|_| NotOwn::NoStoredToken)?;
    let mut all = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(caller_auth), None) = (all.next(), all.next()) else {
        return Err(NotOwn::NoCredential);
    };
    let mine = account_of(accounts, upstreams, stored_auth, "the stored token").await?;
    let theirs = account_of(accounts, upstreams, caller_auth.clone(), "its credential").await?;
    if mine == theirs {
        Ok(())
    } else {
        Err(NotOwn::OtherAccount)
    }
}

/// The account id a credential resolves to (the mapping if known, else `GET /user` now).
async fn account_of(
    accounts: &Accounts,
    upstreams: &Upstreams,
    auth: HeaderValue,
    whose: &'static str,
) -> Result<u64, NotOwn> {
    let mut h = HeaderMap::new();
    h.insert(header::AUTHORIZATION, auth.clone());
    let id: Identity = accounts.identify(&h);
    if let Some(r) = accounts.record(&id) {
        return Ok(r.account_id);
    }
    match accounts.resolve_now(upstreams, id, auth).await {
        Resolution::Account(r) => Ok(r.account_id),
        Resolution::Unauthorized => Err(NotOwn::Unresolved {
            whose,
            why: "GitHub answered 401".into(),
        }),
        Resolution::Failed(why) => Err(NotOwn::Unresolved { whose, why }),
    }
}
