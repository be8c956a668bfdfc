//! `[[policy]]` as written, and its validation into [`Rule`]s: every error names the file,
//! the line and the key.

use super::PolicyError;
use super::{Action, Function, NetworkCond, RepoGlob, Rule, RuleRef, Situation, Source};
use serde::Deserialize;
use toml::Spanned;

/// One `[[policy]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePolicyRule {
    /// `owner/repo`, `owner/*`, `*/repo` or `*` (default `*`).
    pub repo: Option<Spanned<String>>,
    /// `metered`, `offline` or `any` (default).
    pub network: Option<Spanned<String>>,
    /// `breaker_open`, `degraded`, `surge_429`, `cooldown` or `any` (default).
    pub situation: Option<Spanned<String>>,
    /// `cache` or `pass`.
    pub list: Option<Spanned<String>>,
    /// `queue`, `fallback`, `local` or `fail`.
    pub create: Option<Spanned<String>>,
    /// `fallback` or `never`.
    pub model: Option<Spanned<String>>,
}

/// The organisation's policy file: `[[policy]]` tables and `[identity] share`, nothing else.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePolicyOnly {
    #[serde(default)]
    pub policy: Vec<Spanned<FilePolicyRule>>,
    #[serde(default)]
    pub identity: OrgIdentity,
}

/// The org file's `[identity]`: the strictest account sharing a user must keep.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgIdentity {
    /// `account`, `app` or `credential`.
    pub share: Option<Spanned<String>>,
}

fn line_of(text: &str, offset: usize) -> usize {
    let bytes = &text.as_bytes()[..offset.min(text.len())];
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

/// Validates `raw` (rules of one file) into typed rules of `source`.
pub(crate) fn validate(
    raw: &[Spanned<FilePolicyRule>],
    source: Source,
    file: &str,
    text: &str,
) -> Result<Vec<Rule>, PolicyError> {
    let err = |key: &str, span: std::ops::Range<usize>, message: String| PolicyError::Invalid {
        file: file.to_string(),
        line: if text.is_empty() {
            1
        } else {
            line_of(text, span.start)
        },
        key: format!("policy.{key}"),
        message,
    };
    let mut out = Vec::with_capacity(raw.len());
    for (i, table) in raw.iter().enumerate() {
        let r = table.get_ref();
        // The table's own span starts at its first key: the line a person looks for.
        let line = if text.is_empty() {
            1
        } else {
            line_of(text, table.span().start)
        };
        let at = RuleRef {
            source,
            index: i + 1,
            at: format!("{file}:{line}"),
        };
        let repo = match &r.repo {
            None => RepoGlob::parse("*").map_err(|m| err("repo", table.span(), m))?,
            Some(s) => RepoGlob::parse(s.get_ref()).map_err(|m| err("repo", s.span(), m))?,
        };
        let network = match &r.network {
            None => NetworkCond::Any,
            Some(s) => NetworkCond::parse(s.get_ref()).ok_or_else(|| {
                err(
                    "network",
                    s.span(),
                    format!(
                        "`{}` is not \"metered\", \"offline\" or \"any\"",
                        s.get_ref()
                    ),
                )
            })?,
        };
        let situation = match &r.situation {
            None => Situation::Any,
            Some(s) => Situation::parse(s.get_ref()).ok_or_else(|| {
                err("situation", s.span(), format!("`{}` is not \"breaker_open\", \"degraded\", \"surge_429\", \"cooldown\" or \"any\"", s.get_ref()))
            })?,
        };
        let action =
            |f: Function, v: &Option<Spanned<String>>| -> Result<Option<Action>, PolicyError> {
                match v {
                    None => Ok(None),
                    Some(s) => Action::parse(f, s.get_ref()).map(Some).ok_or_else(|| {
                        let words = Action::order(f).replace(" < ", "\", \"");
                        err(
                            f.as_str(),
                            s.span(),
                            format!("`{}` is not one of \"{words}\"", s.get_ref()),
                        )
                    }),
                }
            };
        let rule = Rule {
            list: action(Function::List, &r.list)?,
            create: action(Function::Create, &r.create)?,
            model: action(Function::Model, &r.model)?,
            at,
            repo,
            network,
            situation,
        };
        if rule.list.is_none() && rule.create.is_none() && rule.model.is_none() {
            return Err(err(
                "list",
                table.span(),
                "this [[policy]] rule sets no action: give it `list`, `create` or `model`".into(),
            ));
        }
        out.push(rule);
    }
    Ok(out)
}

/// The user's `[[policy]]` rules from the config file.
pub(crate) fn validate_user_rules(
    raw: &[Spanned<FilePolicyRule>],
    file: &str,
    text: &str,
) -> Result<Vec<Rule>, PolicyError> {
    validate(raw, Source::User, file, text)
}
