//! `[local_agent]`: the developer's local agent command that a create may be handed to when
//! policy says `local` (#14, `crate::handoff`). The file's keys, their validation (file:line
//! errors) and the typed [`LocalAgentSettings`]. Nothing runs without an explicit `command`.

use super::error::{ConfigError, Ctx};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLocalAgent {
    /// argv: the program, then its arguments, with `{placeholder}`s. Never run by a shell.
    pub command: Option<Spanned<Vec<String>>>,
    /// `"owner/repo" = "/path/to/checkout"`.
    #[serde(default)]
    pub checkouts: BTreeMap<String, Spanned<String>>,
    /// Directories searched for `<root>/<repo>` or `<root>/<owner>/<repo>` holding `.git`.
    #[serde(default)]
    pub roots: Vec<Spanned<String>>,
    /// Extra environment for the command (it gets no credential from Weir).
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// The command is stopped after this long.
    pub timeout: Option<Spanned<String>>,
    /// An unanswered offer goes back to the queue after this long.
    pub offer_ttl: Option<Spanned<String>>,
}

/// What may appear in `command` between braces, and what each becomes.
pub const PLACEHOLDERS: [&str; 8] = [
    "repo",                   // owner/repo
    "owner",                  // owner
    "name",                   // repo
    "checkout",               // the local checkout's absolute path
    "problem_statement",      // the problem statement itself, as one argument
    "problem_statement_file", // a 0600 file holding it
    "base_branch",            // the create's base branch ("" when it named none)
    "offer_id",               // the offer's id
];

/// Validated `[local_agent]`; present only when the table is.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAgentSettings {
    /// Program and arguments, placeholders still in them (filled per offer).
    pub command: Vec<String>,
    /// Lower-cased `owner/repo` → checkout.
    pub checkouts: BTreeMap<String, PathBuf>,
    pub roots: Vec<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub timeout: Duration,
    pub offer_ttl: Duration,
}

impl LocalAgentSettings {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
    pub const DEFAULT_OFFER_TTL: Duration = Duration::from_secs(15 * 60);

    /// Settings running `command` with every default (tests, the tray).
    pub fn new(command: Vec<String>) -> LocalAgentSettings {
        LocalAgentSettings {
            command,
            checkouts: BTreeMap::new(),
            roots: Vec::new(),
            env: BTreeMap::new(),
            timeout: Self::DEFAULT_TIMEOUT,
            offer_ttl: Self::DEFAULT_OFFER_TTL,
        }
    }

    /// The repository's local checkout: the `checkouts` entry, else, for each root in order,
    /// `<root>/<owner>/<name>` holding a `.git`, or `<root>/<name>` when its git remote names
    /// this owner (a flat clone of `mallory/app` is never taken for `octo/app`).
    pub fn checkout_for(&self, repo: &str) -> Option<PathBuf> {
        if let Some(p) = self.checkouts.get(&repo.to_ascii_lowercase()) {
            return p.is_dir().then(|| p.clone());
        }
        let (owner, name) = repo.split_once('/')?;
        if !safe_segment(owner) || !safe_segment(name) {
            return None;
        }
        self.roots.iter().find_map(|r| {
            let owned = r.join(owner).join(name);
            if owned.join(".git").exists() {
                return Some(owned);
            }
            let flat = r.join(name);
            remote_names(&flat, owner, name).then_some(flat)
        })
    }
}

/// Whether the clone at `dir` has a remote whose URL ends in `owner/name` (`.git` and a
/// trailing `/` aside; case-insensitive, as GitHub's names are), scp-like or URL form. Only a
/// plain `.git` directory is read (a worktree's `.git` file names no remote here).
fn remote_names(dir: &Path, owner: &str, name: &str) -> bool {
    let Ok(config) = std::fs::read_to_string(dir.join(".git").join("config")) else {
        return false;
    };
    let want = format!("{owner}/{name}").to_ascii_lowercase();
    config.lines().any(|l| {
        let Some(url) = l
            .trim()
            .strip_prefix("url")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('='))
        else {
            return false;
        };
        let url = url.trim().trim_end_matches('/').to_ascii_lowercase();
        let url = url.strip_suffix(".git").unwrap_or(&url);
        url.strip_suffix(want.as_str())
            .is_some_and(|head| head.ends_with('/') || head.ends_with(':'))
    })
}

/// One path segment that cannot climb out of a root (`..`, separators, empty).
fn safe_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

/// `~/x` → the home directory's `x`; relative paths are relative to the config file.
fn path_of(raw: &str, file: &str) -> PathBuf {
    if let Some(rest) = raw.strip_prefix("~/") {
        if let Some(home) = directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()) {
            return home.join(rest);
        }
    }
    let p = PathBuf::from(raw);
    match Path::new(file).parent() {
        Some(dir) if p.is_relative() && !dir.as_os_str().is_empty() => dir.join(p),
        _ => p,
    }
}

/// `None` when there is no `[local_agent]` table; an error naming the key when it is unusable.
pub(super) fn validate(
    cx: &Ctx<'_>,
    raw: Option<&Spanned<FileLocalAgent>>,
    file: &str,
) -> Result<Option<LocalAgentSettings>, ConfigError> {
    let Some(table) = raw else {
        return Ok(None);
    };
    let t = table.get_ref();
    let Some(command) = &t.command else {
        return cx.err(
            "local_agent.command",
            table.span(),
            "[local_agent] needs command = [\"program\", \"arg\", …] (run without a shell, \
             placeholders such as \"{problem_statement_file}\" and \"{checkout}\")"
                .into(),
        );
    };
    let argv = command.get_ref();
    if argv.first().is_none_or(|p| p.trim().is_empty()) {
        return cx.err(
            "local_agent.command",
            command.span(),
            "must name a program first, e.g. [\"my-agent\", \"--task\", \"{problem_statement_file}\"]"
                .into(),
        );
    }
    for arg in argv {
        if let Err(bad) = check_placeholders(arg) {
            return cx.err(
                "local_agent.command",
                command.span(),
                format!(
                    "`{arg}`: {bad}; the placeholders are {}",
                    PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
                ),
            );
        }
    }
    let mut checkouts = BTreeMap::new();
    for (repo, path) in &t.checkouts {
        let ok = repo
            .split_once('/')
            .is_some_and(|(o, n)| safe_segment(o) && safe_segment(n));
        if !ok {
            return cx.err(
                "local_agent.checkouts",
                path.span(),
                format!("`{repo}` is not \"owner/repo\""),
            );
        }
        if path.get_ref().trim().is_empty() {
            return cx.err(
                "local_agent.checkouts",
                path.span(),
                format!("the checkout of `{repo}` is empty"),
            );
        }
        checkouts.insert(repo.to_ascii_lowercase(), path_of(path.get_ref(), file));
    }
    let mut roots = Vec::new();
    for r in &t.roots {
        if r.get_ref().trim().is_empty() {
            return cx.err("local_agent.roots", r.span(), "a root is empty".into());
        }
        roots.push(path_of(r.get_ref(), file));
    }
    let mut env = BTreeMap::new();
    for (k, v) in &t.env {
        let ok = k
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok || v.get_ref().contains('\0') {
            return cx.err(
                "local_agent.env",
                v.span(),
                format!("`{k}` is not an environment variable name (letters, digits, `_`)"),
            );
        }
        env.insert(k.clone(), v.get_ref().clone());
    }
    let at_least_1s = |key: &str, v: &Option<Spanned<String>>, d: Duration| match v {
        Some(s) if d < Duration::from_secs(1) => {
            cx.err(key, s.span(), "must be at least 1s".into())
        }
        _ => Ok(d),
    };
    let timeout = cx
        .duration("local_agent.timeout", &t.timeout)?
        .unwrap_or(LocalAgentSettings::DEFAULT_TIMEOUT);
    let timeout = at_least_1s("local_agent.timeout", &t.timeout, timeout)?;
    let offer_ttl = cx
        .duration("local_agent.offer_ttl", &t.offer_ttl)?
        .unwrap_or(LocalAgentSettings::DEFAULT_OFFER_TTL);
    let offer_ttl = at_least_1s("local_agent.offer_ttl", &t.offer_ttl, offer_ttl)?;
    Ok(Some(LocalAgentSettings {
        command: argv.clone(),
        checkouts,
        roots,
        env,
        timeout,
        offer_ttl,
    }))
}

/// Every `{…}` in `arg` names a known placeholder.
fn check_placeholders(arg: &str) -> Result<(), String> {
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("a `{` is never closed".into());
        };
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!("`{{{name}}}` is not a placeholder"));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

/// Fills the placeholders of one argument (`values` in [`PLACEHOLDERS`] order).
pub fn fill(arg: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                let name = &after[..close];
                match values.iter().find(|(k, _)| *k == name) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(&rest[open..open + close + 2]),
                }
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::fill;
    use crate::config::parse_str;
    use std::time::Duration;

    /// Issue 22, item 3: under `roots`, `<root>/<name>` was taken for any owner's `name`.
    #[test]
    fn under_roots_the_owner_must_match() {
        let root = tempfile::tempdir().unwrap();
        let git = |dir: &std::path::Path, url: Option<&str>| {
            std::fs::create_dir_all(dir.join(".git")).unwrap();
            let mut c = String::from("[core]\n\tbare = false\n");
            if let Some(u) = url {
                c.push_str(&format!("[remote \"origin\"]\n\turl = {u}\n"));
            }
            std::fs::write(dir.join(".git/config"), c).unwrap();
        };
        // mallory/app cloned flat as <root>/app.
        git(
            &root.path().join("app"),
            Some("git@github.com:mallory/app.git"),
        );
        let mut a = super::LocalAgentSettings::new(vec!["agent".into()]);
        a.roots = vec![root.path().to_path_buf()];
        assert_eq!(a.checkout_for("octo/app"), None, "another owner's clone");
        assert_eq!(
            a.checkout_for("mallory/app"),
            Some(root.path().join("app")),
            "its own origin"
        );
        assert_eq!(
            a.checkout_for("MALLORY/app"),
            Some(root.path().join("app")),
            "GitHub owners are case-insensitive"
        );
        // <root>/<owner>/<name> names the owner in the path.
        git(&root.path().join("octo/app"), None);
        assert_eq!(
            a.checkout_for("octo/app"),
            Some(root.path().join("octo/app"))
        );
        // A flat clone without a remote names no owner.
        git(&root.path().join("lib"), None);
        assert_eq!(a.checkout_for("octo/lib"), None);
        git(
            &root.path().join("web"),
            Some("https://github.com/octo/web"),
        );
        assert_eq!(a.checkout_for("octo/web"), Some(root.path().join("web")));
    }

    #[test]
    fn a_table_validates_and_errors_name_the_key_and_line() {
        let s = parse_str(
            "[local_agent]\ncommand = [\"agent\", \"--file={problem_statement_file}\"]\n\
             checkouts = { \"Octo/App\" = \"/src/app\" }\noffer_ttl = \"2m\"\n",
            "w.toml",
        )
        .unwrap();
        let a = s.local_agent.unwrap();
        assert_eq!(a.command[1], "--file={problem_statement_file}");
        assert_eq!(a.checkouts["octo/app"].to_str(), Some("/src/app"));
        assert_eq!(a.offer_ttl, Duration::from_secs(120));
        assert_eq!(a.timeout, Duration::from_secs(3600));
        assert!(parse_str("", "w.toml").unwrap().local_agent.is_none());

        let e = parse_str("[local_agent]\ntimeout = \"5m\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("local_agent.command"), "{e}");
        let e = parse_str("\n[local_agent]\ncommand = []\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:3: key `local_agent.command`"),
            "{e}"
        );
        let e = parse_str("[local_agent]\ncommand = [\"a\", \"{token}\"]\n", "w.toml").unwrap_err();
        assert!(
            e.to_string().contains("`{token}` is not a placeholder"),
            "{e}"
        );
        let e = parse_str(
            "[local_agent]\ncommand = [\"a\"]\ncheckouts = { app = \"/x\" }\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:3: key `local_agent.checkouts`"),
            "{e}"
        );
        let e = parse_str(
            "[local_agent]\ncommand = [\"a\"]\n\ntimeout = \"0s\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:4: key `local_agent.timeout`"),
            "{e}"
        );
        let e =
            parse_str("[local_agent]\ncommand = [\"a\"]\nshell = true\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("w.toml:3"), "{e}");
    }

    #[test]
    fn placeholders_are_filled_in_place_and_nothing_else_is_touched() {
        let v = [("repo", "o/r"), ("checkout", "/src/r")];
        assert_eq!(fill("--in={checkout}/x", &v), "--in=/src/r/x");
        assert_eq!(fill("{repo}{repo}", &v), "o/ro/r");
        assert_eq!(fill("$(rm -rf) {", &v), "$(rm -rf) {");
    }
}
