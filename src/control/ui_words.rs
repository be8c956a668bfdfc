//! The dashboard's words for the status document's enums, checked against the enums.
//!
//! Why: `ui/*.js` turns each enum value the status sends (`"offline"`, `"no_key"`) into words
//! with a map of its own, and falls back to the bare value when a key is missing. A variant
//! added in Rust (the sessions poller's `offline`, session 23) then shows as "offline" with no
//! explanation, and a variant renamed leaves a dead key behind: nothing failed either way. Here
//! each map is read from the embedded file the dashboard is served from, and its keys are
//! compared with the values serde writes for every variant (the producer's real output, not
//! a list typed again). `every!` names each variant in a `match`, so a new variant does not
//! compile until it is listed here, and then this test asks the dashboard for its words. `Mode`
//! and `Surface` keep their own list of every variant (`ALL`), which is used instead.

use super::ui::UI;
use serde::Serialize;
use std::collections::BTreeSet;

/// The wire names of `values`, as the status document spells them.
fn names<T: Serialize>(values: &[T]) -> BTreeSet<String> {
    values
        .iter()
        .map(|v| match serde_json::to_value(v) {
            Ok(serde_json::Value::String(s)) => s,
            other => panic!("a unit variant serializes to a string, got {other:?}"),
        })
        .collect()
}

/// Every variant of an enum, listed once; a variant missing from the list fails to compile.
macro_rules! every {
    ($t:ty: $($v:ident),+ $(,)?) => {{
        #[allow(dead_code)]
        fn listed(x: $t) {
            match x {
                $(<$t>::$v)|+ => {}
            }
        }
        names(&[$(<$t>::$v),+])
    }};
}

/// The keys of `const NAME = { key: 'text', ... };` in `ui/<file>`.
fn keys(file: &str, name: &str) -> BTreeSet<String> {
    let src = UI
        .get_file(file)
        .and_then(|f| f.contents_utf8())
        .unwrap_or_else(|| panic!("ui/{file} is embedded and UTF-8"));
    keys_in(src, file, name)
}

/// The keys of map `name` in `src` (the text of `ui/<file>`).
fn keys_in(src: &str, file: &str, name: &str) -> BTreeSet<String> {
    let head = format!("const {name} = {{");
    let at = src
        .find(&head)
        .unwrap_or_else(|| panic!("ui/{file} has `{head}`"));
    let body = &src[at + head.len()..];
    let mut out = BTreeSet::new();
    let mut rest = body.trim_start();
    while !rest.starts_with('}') {
        let key_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        assert!(
            key_len > 0,
            "ui/{file} {name}: a key, at {:?}",
            rest.chars().take(20).collect::<String>()
        );
        out.insert(rest[..key_len].to_string());
        rest = rest[key_len..].trim_start();
        rest = rest
            .strip_prefix(':')
            .unwrap_or_else(|| panic!("ui/{file} {name}: `:` after a key"))
            .trim_start();
        rest = skip_value(rest, file, name).trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    out
}

/// `s` after one value: a quoted string ('…' or "…", with `\` escapes) or a bare word (`null`).
fn skip_value<'a>(s: &'a str, file: &str, name: &str) -> &'a str {
    let mut chars = s.char_indices();
    match chars.next() {
        Some((_, q @ ('\'' | '"'))) => {
            let mut escaped = false;
            for (i, c) in chars {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    c if c == q => return &s[i + 1..],
                    _ => {}
                }
            }
            panic!("ui/{file} {name}: a string that does not end")
        }
        _ => {
            let end = s
                .find(|c: char| c == ',' || c == '}' || c.is_whitespace())
                .unwrap_or(s.len());
            &s[end..]
        }
    }
}

/// A map that must have words for every variant, and nothing else.
fn same(file: &str, name: &str, variants: BTreeSet<String>) {
    let keys = keys(file, name);
    let missing: Vec<_> = variants.difference(&keys).collect();
    let stale: Vec<_> = keys.difference(&variants).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ui/{file} {name}: no words for {missing:?}; keys that are no variant: {stale:?}"
    );
}

#[test]
fn every_enum_value_the_dashboard_shows_has_its_words() {
    use crate::accounts::TokenKind;
    use crate::control::setup_steps::StepState;
    use crate::mode::Mode;
    use crate::status::{MemoryOnlyReason, PollerReason, PollerState, TeamLink};
    use crate::surface::Surface;
    use crate::upstream::caution::CautionSource;
    use crate::view::SessionGroup;

    let reasons = every!(PollerReason: NoToken, NoKeychain, KeychainUnavailable, NoUpstream,
        BreakerOpen, GithubIncident, UpstreamError, Unauthorized, Paused, Offline);
    // Mode and Surface keep their own list of every variant (`ALL`): that one is used.
    let maps = [
        ("sessions.js", "REASON_TEXT", reasons.clone()),
        (
            "sessions.js",
            "POLLER_TEXT",
            every!(PollerState: Off, Polling, BackingOff, StoppedUnauthorized),
        ),
        (
            "sessions.js",
            "GROUP_LABEL",
            every!(SessionGroup: Running, ReadyForReview, Failed, Finished, Other),
        ),
        (
            "accounts.js",
            "KIND_TEXT",
            every!(TokenKind: Oauth, Classic, FineGrained, AppUser, Other),
        ),
        ("app.js", "MODE_NOTICES", names(&Mode::ALL)),
        (
            "cache.js",
            "REASONS",
            every!(MemoryOnlyReason: Disabled, NoKeychain, KeychainError, OpenFailed, WriteFailed),
        ),
        (
            "team.js",
            "LINK_TEXT",
            every!(TeamLink: Connected, Disconnected, NoKey),
        ),
        (
            "upstreams.js",
            "CAUTION_SOURCE",
            every!(CautionSource: GithubStatus, Peers),
        ),
        ("handoffs.js", "SURFACES", names(&Surface::ALL)),
        (
            "setup-view.js",
            "STATE_TEXT",
            every!(StepState: Done, Needed, NotPossible),
        ),
    ];
    for (file, name, variants) in maps {
        same(file, name, variants);
    }
    // The header's short words cover only the reasons the poller is off for; each is one.
    let off = keys("app.js", "SESSIONS_OFF");
    assert!(
        off.is_subset(&reasons),
        "ui/app.js SESSIONS_OFF: keys that are no poller reason: {:?}",
        off.difference(&reasons).collect::<Vec<_>>()
    );
}

#[test]
fn the_map_reader_reads_every_key_past_commas_quotes_and_escapes_in_the_words() {
    let src = r#"
const OTHER = { a: 'x' };
const WORDS = {
  no_token: 'store a token (Settings, or the Set up view), then wait',
  quoted: "a \"double\" quote, and a comma",
  escaped: 'the upstream\u2019s breaker: \'open\', or not',
  none: null,
  last: 'no comma after me'
};
"#;
    let keys = keys_in(src, "test.js", "WORDS");
    let want: BTreeSet<String> = ["no_token", "quoted", "escaped", "none", "last"]
        .map(String::from)
        .into();
    assert_eq!(keys, want);
    assert_eq!(keys_in(src, "test.js", "OTHER"), ["a".to_string()].into());
}
