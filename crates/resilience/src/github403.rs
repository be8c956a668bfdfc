//! Telling GitHub's 403 responses apart: rate limit, organisation policy, or plain auth.
//!
//! GitHub answers 403 for three unrelated reasons, and each needs a different reaction:
//!
//! 1. **Rate limited.** GitHub's REST docs ("Rate limits for the REST API" / "Troubleshooting
//!    the REST API") say an exceeded *primary* limit comes back as 403 or 429 with
//!    `x-ratelimit-remaining: 0`, and an exceeded *secondary* limit as 403 or 429 with a message
//!    saying so (e.g. `"You have exceeded a secondary rate limit. Please wait a few minutes
//!    before you try again."`), sometimes with `retry-after`. Rule: `x-ratelimit-remaining: 0`,
//!    **or** a `retry-after` header, **or** a message containing `rate limit` → `RateLimited`.
//! 2. **Organisation/enterprise policy.** When an admin has not enabled a Copilot feature
//!    (coding agent, CLI, …) GitHub's Copilot surfaces say `"You are not authorized to use this
//!    Copilot feature, it requires an enterprise or organization policy to be enabled."`; the
//!    Copilot API itself answers a plain-text `unauthorized: not authorized to use this Copilot
//!    feature` and model listing says `access denied by Copilot policy` (all seen in
//!    github/copilot-cli issues #18, #118, #2306). `api.github.com` refuses OAuth apps blocked by
//!    an organisation with "... the X organization has enabled OAuth App access restrictions ...". Rule: the message contains one of those phrases → `PolicyBlocked`.
//!    These need an administrator, so retrying, refreshing tokens or breaking the circuit
//!    would all be wrong.
//! 3. **Anything else** (missing scope, SAML SSO not authorised for this token, resource
//!    forbidden) → `Auth`: the user must fix their credentials. SAML enforcement stays `Auth`
//!    on purpose — the user can authorise the token themselves.
//!
//! The message is read from the JSON `message` field when the prefix parses as JSON (GitHub's
//! REST error shape `{"message": ..., "documentation_url": ...}`); otherwise the prefix is read
//! as text, because the Copilot API sends plain-text bodies and a truncated JSON prefix still
//! contains the message near its start. Matching is ASCII case-insensitive.

use http::HeaderMap;

use crate::kind::Kind;

/// Phrases (lower case) that mark an organisation/enterprise policy refusal.
const POLICY_PHRASES: &[&str] = &[
    "requires an enterprise or organization policy",
    "not authorized to use this copilot feature",
    "access denied by copilot policy",
    "has enabled oauth app access restrictions",
];

/// Phrase (lower case) that marks a rate-limit refusal in the message.
const RATE_LIMIT_PHRASE: &str = "rate limit";

/// Classifies a 403 response; see the module docs for the rule.
pub fn classify_forbidden(headers: &HeaderMap, body_prefix: &[u8]) -> Kind {
    let remaining_zero = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    if remaining_zero || headers.contains_key(http::header::RETRY_AFTER) {
        return Kind::RateLimited;
    }
    let message = error_message(body_prefix).to_ascii_lowercase();
    if message.contains(RATE_LIMIT_PHRASE) {
        Kind::RateLimited
    } else if POLICY_PHRASES.iter().any(|p| message.contains(p)) {
        Kind::PolicyBlocked
    } else {
        Kind::Auth
    }
}

/// The human-readable message of an error body: JSON `message` if present, else the text.
pub fn error_message(body_prefix: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body_prefix) {
        if let Some(msg) = value.get("message").and_then(|m| m.as_str()) {
            return msg.to_owned();
        }
    }
    String::from_utf8_lossy(body_prefix).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn kind(headers: &[(&'static str, &'static str)], body: &str) -> Kind {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        crate::classify_response(http::StatusCode::FORBIDDEN, &map, body.as_bytes())
    }

    #[test]
    fn primary_rate_limit_by_header() {
        assert_eq!(
            kind(
                &[("x-ratelimit-remaining", "0")],
                r#"{"message":"API rate limit exceeded for user ID 1."}"#
            ),
            Kind::RateLimited
        );
        // Remaining > 0 and no message hint: a plain permission problem.
        assert_eq!(
            kind(
                &[("x-ratelimit-remaining", "12")],
                r#"{"message":"Must have admin rights"}"#
            ),
            Kind::Auth
        );
    }

    #[test]
    fn secondary_rate_limit_by_message_or_retry_after() {
        let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest"}"#;
        assert_eq!(
            kind(&[("x-ratelimit-remaining", "14")], body),
            Kind::RateLimited
        );
        assert_eq!(kind(&[("retry-after", "60")], "{}"), Kind::RateLimited);
    }

    #[test]
    fn organisation_policy_refusals() {
        let cases = [
            r#"{"message":"You are not authorized to use this Copilot feature, it requires an enterprise or organization policy to be enabled."}"#,
            "unauthorized: not authorized to use this Copilot feature\n",
            r#"{"message":"Failed to load models: access denied by Copilot policy."}"#,
            r#"{"message":"Although you appear to have the correct authorization credentials, the `acme` organization has enabled OAuth App access restrictions, meaning that data access to third-parties is limited."}"#,
            // Truncated JSON still matches through the text fallback.
            r#"{"message":"You are not authorized to use this Copilot feature, it requires an enterprise or organization policy to be en"#,
        ];
        for body in cases {
            assert_eq!(kind(&[], body), Kind::PolicyBlocked, "{body}");
        }
    }

    #[test]
    fn other_forbidden_is_auth() {
        assert_eq!(
            kind(
                &[],
                r#"{"message":"Resource protected by organization SAML enforcement. You must grant your Personal Access token access to this organization."}"#
            ),
            Kind::Auth
        );
        assert_eq!(kind(&[], ""), Kind::Auth);
        assert_eq!(kind(&[], "\u{0}\u{ff}garbage"), Kind::Auth);
    }

    #[test]
    fn message_extraction() {
        assert_eq!(error_message(br#"{"message":"boom"}"#), "boom");
        assert_eq!(error_message(b"plain"), "plain");
        assert_eq!(error_message(br#"{"error":"x"}"#), r#"{"error":"x"}"#);
    }
}
