//! The fallback policy graph (#14): `[[policy]]` rules that say, per repository, network and
//! situation, what each function falls back to — a list to the cache (`cache`) or not
//! (`pass`); a create to the fallback origin, the durable queue, a local agent or a failure;
//! whether model fallback may run.
//!
//! - `rules`: the rule language as written (`[[policy]]` tables), validated with file:line;
//! - `org_file`: the organisation's policy file (per-OS default path) read above the user's;
//! - `merge`: the strictness order per function and the refusal of user rules that would
//!   loosen an org rule;
//! - this module: the typed rules, matching a request's [`Context`] and the [`Decision`]s.
//!
//! Evaluation, per function: the first org rule that matches and sets the function, and the
//! first user rule that does; the stricter of the two decides (a tie goes to the org rule).
//! With neither, Weir's built-in behaviour decides (`default`).

mod error;
mod log;
mod merge;
mod org_file;
mod rules;

pub use error::PolicyError;
pub use log::{DecisionLog, RecentDecision};
pub(crate) use merge::refusals;
pub use merge::Refusal;
pub use org_file::default_org_path;
pub(crate) use org_file::load as load_org;
pub(crate) use rules::validate_user_rules;
pub use rules::{FilePolicyOnly, FilePolicyRule};

use serde::Serialize;
use std::fmt;

/// Where a rule was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The organisation's policy file: a user rule may tighten it, never loosen it.
    Org,
    /// The user's config file.
    User,
    /// No rule: Weir's built-in behaviour.
    Default,
}

/// Which rule decided: `org:3` (the third `[[policy]]` of the org file), `user:1`, `default`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleRef {
    pub source: Source,
    /// 1-based position among its source's rules (0 for `default`).
    pub index: usize,
    /// The file and line it was written on (`/etc/weir/policy.toml:12`).
    pub at: String,
}

impl RuleRef {
    pub fn default_rule() -> RuleRef {
        RuleRef {
            source: Source::Default,
            index: 0,
            at: String::new(),
        }
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Source::Org => write!(f, "org:{}", self.index),
            Source::User => write!(f, "user:{}", self.index),
            Source::Default => f.write_str("default"),
        }
    }
}

/// The functions a rule can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Function {
    List,
    Create,
    Model,
}

impl Function {
    pub const ALL: [Function; 3] = [Function::List, Function::Create, Function::Model];
    pub fn as_str(self) -> &'static str {
        match self {
            Function::List => "list",
            Function::Create => "create",
            Function::Model => "model",
        }
    }
}

/// One action of one function. Each function's actions are listed from the most permissive to
/// the strictest (see [`Action::rank`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// list: ask the upstream as usual (stale copies only as rescue).
    Pass,
    /// list: the cache only, nothing upstream for this request.
    Cache,
    /// create: hand it to the configured local agent (after the developer confirms).
    Local,
    /// create: the upstream's fallback origin may get one try, then the queue (built-in).
    Fallback,
    /// create: the primary origin only, then the durable queue.
    Queue,
    /// create: the primary origin only, then a `policy_failed` problem (no queue).
    Fail,
    /// model: model fallback may run where `[[model_fallback]]` configures it.
    ModelFallback,
    /// model: never rewrite the model for this repository.
    Never,
}

impl Action {
    pub fn function(self) -> Function {
        match self {
            Action::Pass | Action::Cache => Function::List,
            Action::Local | Action::Fallback | Action::Queue | Action::Fail => Function::Create,
            Action::ModelFallback | Action::Never => Function::Model,
        }
    }

    /// Strictness within the function: a higher rank keeps more in the cloud / sends less.
    /// list: pass < cache. create: local < fallback < queue < fail. model: fallback < never.
    pub fn rank(self) -> u8 {
        match self {
            Action::Pass | Action::Local | Action::ModelFallback => 0,
            Action::Cache | Action::Fallback | Action::Never => 1,
            Action::Queue => 2,
            Action::Fail => 3,
        }
    }

    /// The word written in config (`model = "fallback"` is [`Action::ModelFallback`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pass => "pass",
            Action::Cache => "cache",
            Action::Local => "local",
            Action::Fallback | Action::ModelFallback => "fallback",
            Action::Queue => "queue",
            Action::Fail => "fail",
            Action::Never => "never",
        }
    }

    pub fn parse(function: Function, word: &str) -> Option<Action> {
        let all: &[Action] = match function {
            Function::List => &[Action::Pass, Action::Cache],
            Function::Create => &[Action::Local, Action::Fallback, Action::Queue, Action::Fail],
            Function::Model => &[Action::ModelFallback, Action::Never],
        };
        all.iter().copied().find(|a| a.as_str() == word)
    }

    /// What Weir does with no rule: lists ask the upstream, creates keep today's rescue
    /// (fallback origin if any, then the queue), model fallback runs where configured.
    pub fn default_for(function: Function) -> Action {
        match function {
            Function::List => Action::Pass,
            Function::Create => Action::Fallback,
            Function::Model => Action::ModelFallback,
        }
    }

    /// The words of a function's actions, most permissive first (for messages and docs).
    pub fn order(function: Function) -> &'static str {
        match function {
            Function::List => "pass < cache",
            Function::Create => "local < fallback < queue < fail",
            Function::Model => "fallback < never",
        }
    }
}

/// Serialised as the word written in config (`"fallback"` for both functions that have one).
impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The network condition a rule asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkCond {
    Any,
    /// The OS (or the developer's override) says the network is metered.
    Metered,
    /// Weir is offline: every managed upstream unreachable at the network level.
    Offline,
}

impl NetworkCond {
    pub fn parse(s: &str) -> Option<NetworkCond> {
        match s {
            "any" => Some(NetworkCond::Any),
            "metered" => Some(NetworkCond::Metered),
            "offline" => Some(NetworkCond::Offline),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkCond::Any => "any",
            NetworkCond::Metered => "metered",
            NetworkCond::Offline => "offline",
        }
    }
}

/// The upstream situation a rule asks for (several can hold at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Situation {
    Any,
    /// The upstream's breaker is open or half-open (probing).
    BreakerOpen,
    /// The breaker is degraded: recent calls failed or were slow, not enough to open.
    Degraded,
    /// At least [`SURGE_429_COUNT`] answers of this upstream were rate limits (429, or a 403
    /// rate limit) within the last [`SURGE_429_WINDOW`].
    Surge429,
    /// The upstream asked for a pause (everyone's, or this credential's) that still runs.
    Cooldown,
}

/// A 429 surge: this many rate-limit answers of one upstream ...
pub const SURGE_429_COUNT: usize = 5;
/// ... within this window.
pub const SURGE_429_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

impl Situation {
    pub const ALL: [Situation; 5] = [
        Situation::Any,
        Situation::BreakerOpen,
        Situation::Degraded,
        Situation::Surge429,
        Situation::Cooldown,
    ];
    pub fn parse(s: &str) -> Option<Situation> {
        Situation::ALL.into_iter().find(|x| x.as_str() == s)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Situation::Any => "any",
            Situation::BreakerOpen => "breaker_open",
            Situation::Degraded => "degraded",
            Situation::Surge429 => "surge_429",
            Situation::Cooldown => "cooldown",
        }
    }
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The situations holding for one request's upstream now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Situations(u8);

impl Situations {
    pub fn with(mut self, s: Situation) -> Situations {
        self.0 |= s.bit();
        self
    }
    pub fn has(self, s: Situation) -> bool {
        s == Situation::Any || self.0 & s.bit() != 0
    }
    /// The names of the situations holding, for explanations.
    pub fn names(self) -> Vec<&'static str> {
        Situation::ALL[1..]
            .iter()
            .filter(|s| self.has(**s))
            .map(|s| s.as_str())
            .collect()
    }
}

/// A repository pattern: `*`, `owner/*`, `*/repo` or `owner/repo` (a whole segment is a name
/// or `*`; names compare case-insensitively, as GitHub's do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoGlob {
    owner: Option<String>,
    repo: Option<String>,
    any: bool,
}

impl RepoGlob {
    pub fn parse(s: &str) -> Result<RepoGlob, String> {
        let s = s.trim();
        if s == "*" {
            return Ok(RepoGlob {
                owner: None,
                repo: None,
                any: true,
            });
        }
        let seg = |x: &str| -> Result<Option<String>, String> {
            if x == "*" {
                Ok(None)
            } else if x.is_empty() || x.contains(['*', '?', '[', ' ']) {
                Err(format!("`{s}`: write `owner/repo`, `owner/*`, `*/repo` or `*` (a segment is a whole name or `*`)"))
            } else {
                Ok(Some(x.to_ascii_lowercase()))
            }
        };
        match s.split_once('/') {
            Some((o, r)) if !r.contains('/') => Ok(RepoGlob {
                owner: seg(o)?,
                repo: seg(r)?,
                any: false,
            }),
            _ => Err(format!(
                "`{s}`: write `owner/repo`, `owner/*`, `*/repo` or `*`"
            )),
        }
    }

    /// Whether `repo` (`owner/name`, or `None` for a request that names none) matches: a
    /// request without a repository matches only `*`.
    pub fn matches(&self, repo: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some((o, r)) = repo.and_then(|r| r.split_once('/')) else {
            return false;
        };
        let eq = |p: &Option<String>, v: &str| p.as_ref().is_none_or(|p| p.eq_ignore_ascii_case(v));
        eq(&self.owner, o) && eq(&self.repo, r)
    }

    /// Some repository could match both patterns.
    pub fn overlaps(&self, other: &RepoGlob) -> bool {
        if self.any || other.any {
            return true;
        }
        let seg = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        seg(&self.owner, &other.owner) && seg(&self.repo, &other.repo)
    }
}

impl fmt::Display for RepoGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.any {
            return f.write_str("*");
        }
        let s = |x: &Option<String>| x.clone().unwrap_or_else(|| "*".into());
        write!(f, "{}/{}", s(&self.owner), s(&self.repo))
    }
}

/// One validated rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub at: RuleRef,
    pub repo: RepoGlob,
    pub network: NetworkCond,
    pub situation: Situation,
    pub list: Option<Action>,
    pub create: Option<Action>,
    pub model: Option<Action>,
}

impl Rule {
    pub fn action(&self, f: Function) -> Option<Action> {
        match f {
            Function::List => self.list,
            Function::Create => self.create,
            Function::Model => self.model,
        }
    }

    pub fn matches(&self, cx: &Context) -> bool {
        let net = match self.network {
            NetworkCond::Any => true,
            NetworkCond::Metered => cx.metered,
            NetworkCond::Offline => cx.offline,
        };
        net && cx.situations.has(self.situation) && self.repo.matches(cx.repo.as_deref())
    }

    /// The rule as written, for explanations: `repo = "acme/*", network = "metered"`.
    pub fn describe(&self) -> String {
        let mut s = format!("repo = \"{}\"", self.repo);
        if self.network != NetworkCond::Any {
            s.push_str(&format!(", network = \"{}\"", self.network.as_str()));
        }
        if self.situation != Situation::Any {
            s.push_str(&format!(", situation = \"{}\"", self.situation.as_str()));
        }
        s
    }
}

/// What a request looks like to policy.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// `owner/repo`, from the request path.
    pub repo: Option<String>,
    pub metered: bool,
    pub offline: bool,
    pub situations: Situations,
}

/// The action of one function for one request, and the rule that chose it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub function: Function,
    pub action: Action,
    pub rule: RuleRef,
    /// Why, in words (the rule's conditions, a tightening, an overruled user rule). The
    /// built-in default's fixed text is not copied: every list request is decided.
    pub why: std::borrow::Cow<'static, str>,
    /// The rule matched on a named situation (not `any`): the action applies before any
    /// attempt while that situation holds.
    #[serde(skip)]
    pub situational: bool,
}

impl Decision {
    /// The decision when no rule matches: Weir's built-in behaviour for `function`.
    pub fn built_in(function: Function) -> Decision {
        Decision {
            function,
            action: Action::default_for(function),
            rule: RuleRef::default_rule(),
            why: std::borrow::Cow::Borrowed("no rule matches: Weir's built-in behaviour"),
            situational: false,
        }
    }

    /// For a `model` decision: whether model fallback may run (`never` forbids it).
    pub fn allows_model_fallback(&self) -> bool {
        self.action != Action::Never
    }

    /// The `Weir-Policy` header value: `org:3 create=queue`, `default list=pass`.
    pub fn header(&self) -> String {
        format!(
            "{} {}={}",
            self.rule,
            self.function.as_str(),
            self.action.as_str()
        )
    }
}

/// Every rule in force: the org file's (above) and the user's, and the user rules refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicySet {
    pub org: Vec<Rule>,
    pub user: Vec<Rule>,
    /// The org file read (`None`: none in force).
    pub org_file: Option<String>,
    /// User rules refused because they would loosen an org rule.
    pub refused: Vec<Refusal>,
    /// The org policy file's `[identity] share`: the loosest sharing a user may set.
    pub org_share: Option<crate::view::ShareMode>,
}

impl PolicySet {
    /// The decision for `function` in `cx`.
    pub fn decide(&self, function: Function, cx: &Context) -> Decision {
        let first = |rules: &[Rule]| {
            rules
                .iter()
                .find(|r| r.action(function).is_some() && r.matches(cx))
                .cloned()
        };
        let (org, user) = (first(&self.org), first(&self.user));
        let pick = |r: &Rule, why: String| Decision {
            function,
            action: r.action(function).unwrap_or(Action::default_for(function)),
            rule: r.at.clone(),
            why: why.into(),
            situational: r.situation != Situation::Any,
        };
        match (org, user) {
            (Some(o), Some(u)) => {
                let (oa, ua) = (o.action(function), u.action(function));
                if ua.map(Action::rank) > oa.map(Action::rank) {
                    pick(
                        &u,
                        format!(
                            "{} ({}) tightens org rule {} ({})",
                            u.at,
                            u.describe(),
                            o.at,
                            o.describe()
                        ),
                    )
                } else if ua == oa {
                    pick(&o, format!("{} ({}); {} agrees", o.at, o.describe(), u.at))
                } else {
                    pick(
                        &o,
                        format!(
                            "{} ({}) is binding: {} may not loosen it to `{}` (order {})",
                            o.at,
                            o.describe(),
                            u.at,
                            ua.map_or("", |a| a.as_str()),
                            Action::order(function)
                        ),
                    )
                }
            }
            (Some(o), None) => pick(&o, format!("{} ({})", o.at, o.describe())),
            (None, Some(u)) => pick(&u, format!("{} ({})", u.at, u.describe())),
            (None, None) => Decision::built_in(function),
        }
    }

    /// The decisions of every function (the control API's and the dashboard's table).
    pub fn table(&self, cx: &Context) -> Vec<Decision> {
        Function::ALL.iter().map(|f| self.decide(*f, cx)).collect()
    }
}

/// `owner/repo` named by an agent-API path: creates and job views
/// (`/agents/swe/v1/jobs/{owner}/{repo}…`), a repository's session list
/// (`/agents/sessions/nwo/{owner}/{repo}`), its custom agents.
pub fn repo_of(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let at = match segs.as_slice() {
        ["agents", "swe", "v1", "jobs", ..] => 4,
        ["agents", "sessions", "nwo", ..] => 3,
        ["agents", "swe", "custom-agents", ..] => 3,
        _ => return None,
    };
    match (segs.get(at), segs.get(at + 1)) {
        (Some(o), Some(r)) if !o.is_empty() && !r.is_empty() => Some(format!("{o}/{r}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
