//! The conformance corpus (`tests/corpus/*.json`) as typed data: every call a real client makes
//! (host, method, path and query as the client encodes them, headers, body, the class Weir must
//! give it, where it was read) and the answers those clients parse. Placeholders such as
//! `{session_id}` are filled from [`Vars`].
#![allow(dead_code)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use weir::config::RouteClass;

/// Where a shape or a call was read: repository (or `npm:<package>`), path, commit or version.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub repo: String,
    pub path: String,
    pub commit: String,
    #[serde(default)]
    pub note: Option<String>,
    /// The client's own type the shape was built from.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
}

/// The real client a call comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    /// `gh agent-task` (cli/cli).
    Gh,
    /// VS Code's Copilot Chat, URLs built by `@vscode/copilot-api`.
    Vscode,
    /// The Copilot CLI (`@github/copilot`).
    CopilotCli,
    /// GitHub's public Agent Tasks REST API (no client read here calls it).
    Rest,
    /// VS Code's Task API backend (`cloudAgentBackend.version` = `v2`), URLs built by
    /// `@vscode/copilot-api` 0.5.2.
    VscodeTasks,
    /// VS Code's Mission Control client (`/remote` of a local Copilot CLI session).
    VscodeMc,
}

/// One call as its client sends it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub id: String,
    pub client: Client,
    pub operation: String,
    pub host: String,
    pub method: String,
    /// Exactly as the client encodes it (placeholders aside).
    pub path_and_query: String,
    /// Headers the client sets itself (not the HTTP library's own).
    pub headers: BTreeMap<String, String>,
    pub body: Option<serde_json::Value>,
    pub class: RouteClass,
    /// A key of [`Answers::answers`].
    pub answer: String,
    /// A key of [`Corpus::sources`].
    pub source: String,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    pub about: String,
    pub sources: BTreeMap<String, Source>,
    /// Values of the placeholders (`{session_id}` …).
    pub vars: BTreeMap<String, String>,
    pub calls: Vec<Call>,
}

/// An example answer in the shape the clients parse.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub source: Vec<Source>,
    /// JSON answers; a string `"<name>"` inside stands for answer `name`'s body (a list's item).
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// Non-JSON answers (the logs' `data:` lines).
    #[serde(default)]
    pub text: Option<String>,
    /// What the sources do settle about the answer beyond its body (how the clients read it).
    #[serde(default)]
    pub known: Vec<String>,
    /// What no source read settles: nothing may depend on it.
    pub unknown: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answers {
    pub about: String,
    pub answers: BTreeMap<String, Answer>,
}

/// Values for the placeholders in calls.
#[derive(Debug, Clone)]
pub struct Vars(pub BTreeMap<String, String>);

impl Default for Vars {
    /// The corpus's own `vars` (shared with tests/node/copilot_api.test.mjs).
    fn default() -> Self {
        let c: Corpus = read("calls.json");
        Vars(c.vars)
    }
}

impl Vars {
    /// `text` with every `{name}` replaced; a placeholder without a value is a corpus error.
    pub fn fill(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.0 {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        assert!(
            !has_placeholder(&out),
            "unfilled placeholder in {text:?} -> {out:?}"
        );
        out
    }
}

/// A call with its placeholders filled: ready to send.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub host: String,
    pub method: http::Method,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub class: RouteClass,
}

impl Call {
    pub fn request(&self, vars: &Vars) -> Request {
        Request {
            id: self.id.clone(),
            host: self.host.clone(),
            method: http::Method::from_bytes(self.method.as_bytes()).expect("corpus method"),
            path_and_query: vars.fill(&self.path_and_query),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), vars.fill(v)))
                .collect(),
            body: self
                .body
                .as_ref()
                .map(|b| vars.fill(&b.to_string()).into_bytes()),
            class: self.class,
        }
    }

    /// The path without the query, placeholders filled.
    pub fn path(&self, vars: &Vars) -> String {
        let pq = vars.fill(&self.path_and_query);
        pq.split('?').next().unwrap_or_default().to_string()
    }
}

/// Whether `s` still holds a `{name}` (lower-case letters and `_`).
fn has_placeholder(s: &str) -> bool {
    s.split('{').skip(1).any(|rest| {
        rest.split_once('}').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
    })
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Corpus {
    /// Reads `tests/corpus/calls.json` and checks that every call names a known source and
    /// answer.
    pub fn load() -> Corpus {
        let c: Corpus = read("calls.json");
        let answers = Answers::load();
        for call in &c.calls {
            assert!(c.sources.contains_key(&call.source), "{}: source", call.id);
            assert!(
                answers.answers.contains_key(&call.answer),
                "{}: answer {}",
                call.id,
                call.answer
            );
        }
        c
    }

    pub fn call(&self, id: &str) -> &Call {
        self.calls
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no corpus call {id}"))
    }

    pub fn by_client(&self, client: Client) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(move |c| c.client == client)
    }

    /// Every host a call goes to.
    pub fn hosts(&self) -> std::collections::BTreeSet<String> {
        self.calls.iter().map(|c| c.host.clone()).collect()
    }
}

impl Answers {
    pub fn load() -> Answers {
        read("answers.json")
    }

    /// The JSON body of answer `name`, with every `"<other>"` expanded.
    pub fn body(&self, name: &str) -> serde_json::Value {
        let mut v = self.answers[name].body.clone().unwrap_or_default();
        self.expand(&mut v, 0);
        v
    }

    fn expand(&self, v: &mut serde_json::Value, depth: usize) {
        assert!(depth < 8, "answers refer to each other in a loop");
        match v {
            serde_json::Value::String(s) if s.starts_with('<') && s.ends_with('>') => {
                let name = &s[1..s.len() - 1];
                let mut inner = self.answers[name].body.clone().unwrap_or_default();
                self.expand(&mut inner, depth + 1);
                *v = inner;
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| self.expand(x, depth + 1)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| self.expand(x, depth + 1)),
            _ => {}
        }
    }
}
