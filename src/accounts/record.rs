//! What Weir knows about a credential's account: the GitHub account id and login, the kind of
//! token (by its documented prefix) and the OAuth scopes it grants; and the sharing rule built
//! on them.

use serde::Serialize;

/// The kind of a GitHub token, from its documented prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// `gho_`: an OAuth app's user token (VS Code's GitHub session, `gh auth login`).
    Oauth,
    /// `ghp_`: a classic personal access token.
    Classic,
    /// `github_pat_`: a fine-grained personal access token (per-token repository access).
    FineGrained,
    /// `ghu_`: a GitHub App user token (per-installation repository access).
    AppUser,
    /// Anything else (no known prefix).
    Other,
}

impl TokenKind {
    /// The kind of the token an `Authorization` value carries (`token X`, `Bearer X`, or X).
    pub fn of_authorization(value: &str) -> TokenKind {
        let t = bare_token(value);
        if t.starts_with("gho_") {
            TokenKind::Oauth
        } else if t.starts_with("ghp_") {
            TokenKind::Classic
        } else if t.starts_with("github_pat_") {
            TokenKind::FineGrained
        } else if t.starts_with("ghu_") {
            TokenKind::AppUser
        } else {
            TokenKind::Other
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Oauth => "oauth",
            TokenKind::Classic => "classic",
            TokenKind::FineGrained => "fine_grained",
            TokenKind::AppUser => "app_user",
            TokenKind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> TokenKind {
        [
            TokenKind::Oauth,
            TokenKind::Classic,
            TokenKind::FineGrained,
            TokenKind::AppUser,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
        .unwrap_or(TokenKind::Other)
    }

    /// Whether the token's repository access is the account's, bounded only by its scopes.
    /// Fine-grained PATs and App user tokens choose repositories per token, so two of them of
    /// one account may see different sessions: they never share.
    pub fn access_follows_scopes(self) -> bool {
        matches!(self, TokenKind::Oauth | TokenKind::Classic)
    }
}

/// The token without its `token `/`Bearer ` scheme.
fn bare_token(value: &str) -> &str {
    let v = value.trim();
    match v.split_once(' ') {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") =>
        {
            rest.trim()
        }
        _ => v,
    }
}

/// A credential's account, as `GET /user` answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRecord {
    pub account_id: u64,
    pub login: String,
    pub kind: TokenKind,
    /// `X-OAuth-Scopes`, as granted (empty for tokens that have none).
    pub scopes: Vec<String>,
    /// `X-OAuth-Client-Id`: the OAuth app the token was issued to (`None` for tokens of no
    /// app, or an answer without it).
    pub client_id: Option<String>,
    /// When it was resolved (unix ms).
    pub resolved_at_ms: i64,
}

impl AccountRecord {
    /// Whether the credential grants the `repo` scope (private repositories).
    pub fn grants_repo(&self) -> bool {
        self.scopes.iter().any(|s| s == "repo")
    }

    /// The sharing class: credentials with the same class see the same list and view
    /// answers (same account, same `repo` answer, OAuth or classic). `None`: this credential
    /// shares with no other.
    pub fn share_class(&self) -> Option<(u64, bool)> {
        self.kind
            .access_follows_scopes()
            .then_some((self.account_id, self.grants_repo()))
    }
}

/// An OAuth client id as GitHub shows it (`Iv1.`-style or 20 hex digits): letters, digits, `.`,
/// `_` and `-`, at most 64; anything else is not kept.
pub fn valid_client_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A login as GitHub allows it (alphanumerics and single hyphens, at most 39): anything else
/// from the upstream is refused, since the login is shown in the dashboard and the metrics.
pub fn valid_login(s: &str) -> bool {
    !s.is_empty() && s.len() <= 39 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The scopes of an `X-OAuth-Scopes` value: comma-separated, bounded, only scope-like names.
pub fn parse_scopes(v: Option<&str>) -> Vec<String> {
    v.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-'))
        })
        .take(64)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: TokenKind, scopes: &str) -> AccountRecord {
        AccountRecord {
            account_id: 7,
            login: "octo".into(),
            kind,
            scopes: parse_scopes(Some(scopes)),
            client_id: None,
            resolved_at_ms: 0,
        }
    }

    #[test]
    fn kinds_come_from_the_prefix() {
        assert_eq!(
            TokenKind::of_authorization("token gho_abc"),
            TokenKind::Oauth
        );
        assert_eq!(
            TokenKind::of_authorization("Bearer ghp_abc"),
            TokenKind::Classic
        );
        assert_eq!(
            TokenKind::of_authorization("bearer github_pat_11AB"),
            TokenKind::FineGrained
        );
        assert_eq!(TokenKind::of_authorization("ghu_x"), TokenKind::AppUser);
        assert_eq!(
            TokenKind::of_authorization("Basic Z2g6eA=="),
            TokenKind::Other
        );
        assert_eq!(
            TokenKind::of_authorization("token ghs_inst"),
            TokenKind::Other
        );
        for k in [TokenKind::Oauth, TokenKind::FineGrained, TokenKind::Other] {
            assert_eq!(TokenKind::parse(k.as_str()), k);
        }
    }

    #[test]
    fn only_oauth_and_classic_tokens_share_and_repo_splits_them() {
        let vscode = rec(TokenKind::Oauth, "read:user, repo, workflow");
        let gh = rec(TokenKind::Oauth, "gist,read:org,repo,workflow");
        let public = rec(TokenKind::Classic, "public_repo");
        assert_eq!(vscode.share_class(), Some((7, true)));
        assert_eq!(vscode.share_class(), gh.share_class());
        assert_eq!(public.share_class(), Some((7, false)));
        assert_eq!(rec(TokenKind::FineGrained, "").share_class(), None);
        assert_eq!(rec(TokenKind::AppUser, "repo").share_class(), None);
        assert_eq!(rec(TokenKind::Other, "repo").share_class(), None);
    }

    #[test]
    fn odd_logins_and_scopes_are_refused() {
        assert!(valid_login("octo-cat"));
        assert!(!valid_login("<script>"));
        assert!(!valid_login(""));
        assert_eq!(parse_scopes(Some("repo, <b>, ,gist")), vec!["repo", "gist"]);
        assert!(parse_scopes(None).is_empty());
    }
}
