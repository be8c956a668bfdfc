//! What every config table's validation shares, and nothing else: the error a bad config
//! file gives ([`ConfigError`]) and the context that names its file and line ([`Ctx`]). A leaf
//! of the config module: it imports none of its files, so each table's file (`gateway.rs`,
//! `team.rs`, …) can use it while `load.rs` calls their `validate` (no import circle;
//! `scripts/module-deps.sh` checks it).

use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}:{line}: key `{key}`: {message}")]
    Invalid {
        file: String,
        line: usize,
        key: String,
        message: String,
    },
    #[error("{0} is not a loopback address; Weir only listens on 127.0.0.1 or [::1] so other machines cannot use it")]
    NotLoopback(std::net::SocketAddr),
    #[error("no data directory: the OS gives no home directory for the default one; pass --data-dir DIR or set data_dir = \"DIR\" in the config file")]
    NoDataDir,
}

/// Collects context for validation errors.
pub(super) struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl<'a> Ctx<'a> {
    /// The context of config text `text`, read from `file` (named in errors only).
    pub(super) fn new(file: &'a str, text: &'a str) -> Ctx<'a> {
        Ctx { file, text }
    }

    pub(super) fn err<T>(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        message: String,
    ) -> Result<T, ConfigError> {
        Err(ConfigError::Invalid {
            file: self.file.to_string(),
            line: if self.text.is_empty() {
                1
            } else {
                line_of(self.text, span.start)
            },
            key: key.to_string(),
            message,
        })
    }

    pub(super) fn duration(
        &self,
        key: &str,
        v: &Option<Spanned<String>>,
    ) -> Result<Option<Duration>, ConfigError> {
        match v {
            None => Ok(None),
            Some(s) => match humantime::parse_duration(s.get_ref()) {
                Ok(d) if d > MAX_DURATION => self.err(
                    key,
                    s.span(),
                    format!(
                        "`{}` is too long; durations may be at most 10 years",
                        s.get_ref()
                    ),
                ),
                Ok(d) => Ok(Some(d)),
                Err(e) => self.err(
                    key,
                    s.span(),
                    format!(
                        "`{}` is not a duration ({e}); write e.g. \"15s\", \"500ms\", \"24h\"",
                        s.get_ref()
                    ),
                ),
            },
        }
    }

    pub(super) fn positive(
        &self,
        key: &str,
        v: &Option<Spanned<i64>>,
        min: i64,
    ) -> Result<Option<usize>, ConfigError> {
        match v {
            None => Ok(None),
            Some(n) if *n.get_ref() >= min => Ok(usize::try_from(*n.get_ref()).ok()),
            Some(n) => self.err(
                key,
                n.span(),
                format!("must be at least {min}, got {}", n.get_ref()),
            ),
        }
    }
}

// `offset` comes from the TOML parser and may fall inside a multi-byte character: search the
// bytes (a `\n` is always a character boundary), never slice the `str` at `offset`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let bytes = &text.as_bytes()[..offset.min(text.len())];
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

/// The key written on the line holding `offset` (`key = value`, or a `[table]` header).
pub(super) fn key_on_line(text: &str, offset: usize) -> String {
    let bytes = text.as_bytes();
    let offset = offset.min(bytes.len());
    let start = bytes[..offset]
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let end = bytes[offset..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| offset + i)
        .unwrap_or(bytes.len());
    let line = text[start..end].trim();
    match line.split_once('=') {
        // Under a `[table]` the line names only the leaf: the whole path is what the docs and
        // Weir's own checks say (`cache.persist`, not `persist`).
        Some((k, _)) => match table_above(&text[..start]) {
            Some(table) => format!("{table}.{}", k.trim()),
            None => k.trim().to_string(),
        },
        None => line.trim_matches(['[', ']']).to_string(),
    }
}

/// The `[table]` or `[[array]]` header the text before a line leaves open, if any.
/// Only a line that is a header (bare names: Weir's tables have no quoted ones) counts: a row
/// of a multi-line array (`  ["a", "b"],`) or a line inside a `"""` string starting with `[` does not.
fn table_above(before: &str) -> Option<String> {
    before.lines().rev().find_map(|l| {
        let l = l.split('#').next().unwrap_or(l).trim();
        if !(l.starts_with('[') && l.ends_with(']')) {
            return None;
        }
        let name = l.trim_start_matches('[').trim_end_matches(']').trim();
        let bare = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ');
        (!name.is_empty() && name.chars().all(bare)).then(|| name.to_string())
    })
}

/// The longest duration a config key may hold: Weir adds durations to the current instant, and
/// nothing sane waits longer (`Instant + d` cannot overflow below this).
const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::key_on_line;

    /// The table a key sits under is its header's, not a row of a multi-line array's that
    /// starts with `[`.
    #[test]
    fn a_key_is_named_under_its_header_not_an_array_row() {
        let text = "[team]\nsubjects = [\n  [\"a\", \"b\"],\n]\nnats = 5 # x\n";
        let at = text.find("nats").unwrap();
        assert_eq!(key_on_line(text, at), "team.nats");
        let text = "[[upstream]] # the first\nname = 3\n";
        assert_eq!(
            key_on_line(text, text.find("name").unwrap()),
            "upstream.name"
        );
        assert_eq!(key_on_line("listen = 1\n", 0), "listen");
    }
}
