//! `[[model_fallback]]`: which model a completion request is re-sent with when the model it
//! names fails (overloaded or a server error) or while that model's breaker is open. Off unless
//! configured; rules are checked in order and the first whose `from` glob (and `upstream`, if
//! given) matches wins. See docs/model-fallback.md.

use super::error::{ConfigError, Ctx};
use serde::Deserialize;
use toml::Spanned;

/// One `[[model_fallback]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileModelFallback {
    /// Model names this rule covers: `*` matches any run of characters (`claude-*`).
    pub from: Spanned<String>,
    /// The model the request is re-sent with (an exact name, no `*`).
    pub to: Spanned<String>,
    /// Only for this `[[upstream]]` (by name); absent: every upstream.
    pub upstream: Option<Spanned<String>>,
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFallbackRule {
    pub from: String,
    pub to: String,
    pub upstream: Option<String>,
}

/// Model names are short identifiers (`claude-sonnet-4.5`, `gpt-5`); a longer one in a rule is
/// a mistake, and one in a request is not tracked (see `upstream::model_breakers`).
pub const MAX_MODEL_NAME: usize = 128;

impl ModelFallbackRule {
    /// Whether this rule covers `model` on the upstream named `upstream`. Never for the model
    /// it falls back to (`from = "*"` must not send `gpt-5` to `gpt-5`).
    pub fn covers(&self, upstream: &str, model: &str) -> bool {
        self.upstream.as_deref().is_none_or(|u| u == upstream)
            && model != self.to
            && glob_match(&self.from, model)
    }
}

/// The first rule covering `model` on `upstream`.
pub fn rule_for<'a>(
    rules: &'a [ModelFallbackRule],
    upstream: &str,
    model: &str,
) -> Option<&'a ModelFallbackRule> {
    rules.iter().find(|r| r.covers(upstream, model))
}

/// `*` matches any run (also empty), everything else itself, ASCII case ignored (model ids are
/// lowercase, but a client may not be). Iterative with one backtrack point: linear-ish, no
/// recursion on client-supplied names.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi].eq_ignore_ascii_case(&n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A model name (or glob) Weir tracks: 1–128 printable ASCII characters without `"` or `\`,
/// so it can be shown, logged and used as a metrics label as it is.
pub fn is_model_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_MODEL_NAME
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\'))
}

/// Validates every rule: `from`/`to` are model names (`to` without `*`), `upstream` names a
/// configured upstream (`upstreams`: their names).
pub(super) fn validate(
    cx: &Ctx<'_>,
    raw: &[FileModelFallback],
    upstreams: &[&str],
) -> Result<Vec<ModelFallbackRule>, ConfigError> {
    let mut out = Vec::new();
    for r in raw {
        let from = r.from.get_ref().trim();
        if !is_model_name(from) {
            return cx.err(
                "model_fallback.from",
                r.from.span(),
                format!("`{from}` is not a model name or glob (e.g. \"claude-*\"; at most {MAX_MODEL_NAME} printable characters)"),
            );
        }
        let to = r.to.get_ref().trim();
        if !is_model_name(to) || to.contains('*') {
            return cx.err(
                "model_fallback.to",
                r.to.span(),
                format!("`{to}` is not a model name (e.g. \"gpt-5\"; no `*`)"),
            );
        }
        if !from.contains('*') && from.eq_ignore_ascii_case(to) {
            return cx.err(
                "model_fallback.to",
                r.to.span(),
                format!("`{to}` falls back to itself"),
            );
        }
        let upstream = match &r.upstream {
            None => None,
            Some(u) => {
                let name = u.get_ref().trim();
                if !upstreams.contains(&name) {
                    return cx.err(
                        "model_fallback.upstream",
                        u.span(),
                        format!(
                            "`{name}` is not a configured upstream ({})",
                            upstreams.join(", ")
                        ),
                    );
                }
                Some(name.to_string())
            }
        };
        out.push(ModelFallbackRule {
            from: from.to_string(),
            to: to.to_string(),
            upstream,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;

    #[test]
    fn globs() {
        assert!(glob_match("claude-*", "claude-sonnet-4.5"));
        assert!(glob_match("claude-*", "Claude-Opus"));
        assert!(!glob_match("claude-*", "gpt-5"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*-mini", "gpt-5-mini"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("gpt-5", "gpt-5"));
        assert!(!glob_match("gpt-5", "gpt-5.1"));
    }

    #[test]
    fn rules_parse_and_match_in_order() {
        let s = parse_str(
            "[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n\
             [[model_fallback]]\nfrom = \"claude-*\"\nto = \"gpt-5\"\nupstream = \"copilot-api\"\n\
             [[model_fallback]]\nfrom = \"*\"\nto = \"gpt-4.1\"\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(s.model_fallback.len(), 2);
        let r = |m: &str| rule_for(&s.model_fallback, "copilot-api", m).map(|r| r.to.as_str());
        assert_eq!(r("claude-sonnet-4"), Some("gpt-5"));
        assert_eq!(r("gpt-5"), Some("gpt-4.1"));
        assert_eq!(r("gpt-4.1"), None, "never to itself");
        assert_eq!(
            rule_for(&s.model_fallback, "other", "claude-x").map(|r| r.to.as_str()),
            Some("gpt-4.1")
        );
        assert!(parse_str("", "w.toml").unwrap().model_fallback.is_empty());
    }

    #[test]
    fn bad_rules_name_key_and_line() {
        let e = parse_str(
            "[[model_fallback]]\nfrom = \"claude-*\"\nto = \"gpt-*\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:3: key `model_fallback.to`: `gpt-*` is not a model name (e.g. \"gpt-5\"; no `*`)"
        );
        let e = parse_str(
            "[[model_fallback]]\nfrom = \"a\"\nto = \"b\"\nupstream = \"nope\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "w.toml:4: key `model_fallback.upstream`: `nope` is not a configured upstream"
            ),
            "{e}"
        );
        let e = parse_str("[[model_fallback]]\nfrom = \"\"\nto = \"b\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:2: key `model_fallback.from`"),
            "{e}"
        );
        let e = parse_str("[[model_fallback]]\nfrom = \"x\"\nto = \"x\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("falls back to itself"), "{e}");
        let e = parse_str("[[model_fallback]]\nfrom = \"x\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("missing field `to`"), "{e}");
    }
}
