//! Route classes: which requests are `list`, `view`, `stream`, `create`, `token`, `model`
//! (completions naming a model) or plain pass-through, and the per-class cache knobs.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What Weir does with a request depends only on its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteClass {
    List,
    View,
    /// A session's logs: an answer that is a complete document is cached like `view` (the
    /// real clients poll it whole), a true stream is relayed as it comes
    /// (`crate::pipeline` `stream`).
    Stream,
    Create,
    Token,
    Other,
    /// Completions on the Copilot API (`POST /chat/completions`, `/responses`,
    /// `/v1/messages`): the JSON body names a model; per-model breaker and model fallback
    /// (`crate::pipeline` `model`), never the upstream's agent-sessions breaker.
    Model,
}

impl RouteClass {
    pub const ALL: [RouteClass; 7] = [
        RouteClass::List,
        RouteClass::View,
        RouteClass::Stream,
        RouteClass::Create,
        RouteClass::Token,
        RouteClass::Other,
        RouteClass::Model,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteClass::List => "list",
            RouteClass::View => "view",
            RouteClass::Stream => "stream",
            RouteClass::Create => "create",
            RouteClass::Token => "token",
            RouteClass::Other => "other",
            RouteClass::Model => "model",
        }
    }

    pub fn parse(s: &str) -> Option<RouteClass> {
        RouteClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Classes whose responses are always coalesced and cached (`stream` answers are, when
    /// they are complete documents: the answer decides).
    pub fn is_cacheable(self) -> bool {
        matches!(
            self,
            RouteClass::List | RouteClass::View | RouteClass::Token
        )
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Cache knobs of one class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSettings {
    /// How long a stored response is served without asking the upstream.
    pub fresh_ttl: Duration,
    /// After `fresh_ttl`, for this long the stale copy is served while one request refreshes
    /// it — after waiting up to `revalidate_wait` for that refresh.
    pub stale_while_revalidate: Duration,
    /// How long a request that finds a stale copy waits for its refresh before the stale copy
    /// answers (zero: at once). A healthy upstream answers within it, so a client that polls
    /// just past `fresh_ttl` sees the current data, as it would direct, instead of its last
    /// poll's; a slow one costs the client this much at most.
    pub revalidate_wait: Duration,
    /// Maximum staleness of a copy served because the upstream failed or is unreachable.
    pub stale_if_error: Duration,
    /// Token class only: a token is refreshed this long before its `refresh_in`/`expires_at`
    /// (5 minutes: VS Code's own threshold).
    pub token_margin: Duration,
    /// Timeout of one upstream attempt (until the response headers).
    pub per_try_timeout: Duration,
    /// Overall budget for all attempts, retries and backoff included.
    pub deadline: Duration,
    /// Slower calls count as slow for the breaker even when they succeed.
    pub slow_call: Duration,
    /// What a healthy upstream usually takes for this class: the breaker's latency baseline
    /// until it has seen enough good calls of its own (zero: no prior). Without it a Weir
    /// started during a slowdown would never see it as slow (issue 22, item 9).
    pub normal_latency: Duration,
    /// Degradation-aware freshness (list, view, stream documents): while the upstream is slow or failing,
    /// each key is refreshed at most once per this interval and its cached answer served in
    /// between (`crate::cache::pace`). Zero, or not above `fresh_ttl`, turns it off.
    pub degraded_refresh: Duration,
}

impl ClassSettings {
    pub fn defaults(class: RouteClass) -> ClassSettings {
        let day = Duration::from_secs(24 * 3600);
        let (fresh, swr, sie) = match class {
            RouteClass::List => (Duration::from_secs(15), Duration::from_secs(60), day),
            RouteClass::View => (Duration::from_secs(3), Duration::from_secs(30), day),
            // Session logs, when answered as a document: read like one session (gh polls them
            // every 5 s, VS Code every 3 s).
            RouteClass::Stream => (Duration::from_secs(3), Duration::from_secs(30), day),
            // Token freshness comes from the token itself; these bound it when it says nothing.
            RouteClass::Token => (Duration::from_secs(60), Duration::ZERO, Duration::ZERO),
            _ => (Duration::ZERO, Duration::ZERO, Duration::ZERO),
        };
        let secs = Duration::from_secs;
        // Agent-session calls normally answer in well under a second; a list that takes 5 s is
        // a sign of the Oct 29 kind of trouble. Streams are long-lived, so only their headers
        // are timed.
        let (per_try, deadline, slow) = match class {
            RouteClass::List | RouteClass::View => (secs(10), secs(20), secs(5)),
            RouteClass::Token => (secs(5), secs(10), secs(3)),
            RouteClass::Create => (secs(30), secs(30), secs(10)),
            RouteClass::Stream => (secs(30), secs(30), secs(10)),
            RouteClass::Other => (secs(30), secs(60), secs(10)),
            // A non-streamed completion sends its headers only when the whole answer is
            // written: minutes are normal. One attempt, so the deadline is the per-try bound.
            RouteClass::Model => (secs(300), secs(300), secs(120)),
        };
        // Documented in docs/reliability.md ("Slow calls"): about twice what a healthy
        // api.githubcopilot.com answers in, so that `slow_multiplier × normal` (4 × 250 ms =
        // 1 s) catches the Oct 29 profile (1.2 s lists) and anything slower. A completion's
        // time depends on the answer's length: no prior.
        let ms = Duration::from_millis;
        let normal = match class {
            RouteClass::List | RouteClass::View | RouteClass::Token => ms(250),
            RouteClass::Create => secs(2),
            RouteClass::Stream | RouteClass::Other => secs(1),
            RouteClass::Model => Duration::ZERO,
        };
        // Two minutes: a running task's status a little older than that is still useful, and a
        // VS Code window polling each running session every 5 s then costs the upstream one
        // call per session in 2 minutes instead of 24 while it struggles.
        let degraded_refresh = match class {
            RouteClass::List | RouteClass::View | RouteClass::Stream => Duration::from_secs(120),
            _ => Duration::ZERO,
        };
        // The healthy latency of a list or view (`normal_latency`): a poll that comes just
        // after `fresh_ttl` (VS Code's 5 s session polls against the 3 s view TTL) waits for
        // the refresh like a direct call would, instead of getting data one poll old — which
        // also keeps a tool that sleeps after each answer (gh's `--follow`) at its direct pace.
        let revalidate_wait = match class {
            RouteClass::List | RouteClass::View | RouteClass::Stream => ms(250),
            _ => Duration::ZERO,
        };
        ClassSettings {
            fresh_ttl: fresh,
            degraded_refresh,
            revalidate_wait,
            stale_while_revalidate: swr,
            stale_if_error: sie,
            // VS Code refetches a token whose expiry (`now + refresh_in + 60`) is under 5 min
            // away, with a `copilot_internal/user` fetch beside it: a token Weir serves must
            // say `refresh_in` ≥ 300, or VS Code refetches on every use (docs/hosts.md).
            token_margin: Duration::from_secs(300),
            per_try_timeout: per_try,
            deadline,
            slow_call: slow,
            normal_latency: normal,
        }
    }
}

/// A Task API view is fresh for a third of its class's `fresh_ttl` (1 s of the view's
/// default 3 s): VS Code's `TaskTurnStreamer` asks for the task and every events page every
/// 2 s (`DEFAULT_POLL_INTERVAL_MS`), where the view's TTL was set for the 5 s session polls,
/// and a copy fresh for less than one poll is never a poll old (#29: with the view's 3 s,
/// every other poll got the copy of the poll before). A ratio, not a number, so that a
/// configured TTL (and the lab's scaled clock) moves both together.
const TASKS_FRESH_DIVISOR: u32 = 3;

impl ClassSettings {
    /// These knobs as `family`'s routes read them: the Task API's are fresh for a third as
    /// long (`TASKS_FRESH_DIVISOR`); every other family reads the class's own.
    pub fn for_family(&self, family: Family) -> std::borrow::Cow<'_, ClassSettings> {
        match family {
            Family::Tasks if !self.fresh_ttl.is_zero() => std::borrow::Cow::Owned(ClassSettings {
                fresh_ttl: self.fresh_ttl / TASKS_FRESH_DIVISOR,
                ..self.clone()
            }),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

/// Which circuit breaker a route's failures count against (issue #29, item 11): a family that
/// fails must not hold back the families that still work. Mission Control's events POSTs
/// failing (a probe saw five 503s open the whole Copilot API breaker) must not refuse its
/// commands polls, nor the agent-sessions calls on the same host; the Task API failing on
/// `api.github.com` must not refuse the token and user calls there.
///
/// [`Family::Upstream`] is the upstream's own breaker (the one the status document, team
/// signals and gateway holds speak of); every other family has a breaker of its own per
/// upstream, with the same settings, made when its first call is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// The agent-sessions and jobs API, tokens, settings, models, and anything not named below.
    Upstream,
    /// The Task API (VS Code's second cloud-sessions backend, `/cmc_internal/api/agents`) and
    /// GitHub's public Agent Tasks API (`/agents/tasks`, `/agents/repos/{o}/{r}/tasks`).
    Tasks,
    /// Mission Control's mirror of a local session: creating and deleting it.
    MirrorSessions,
    /// Mission Control: the events a local session sends every 500 ms.
    MirrorEvents,
    /// Mission Control: the commands a local session polls every 3 s.
    MirrorCommands,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Upstream => "upstream",
            Family::Tasks => "tasks",
            Family::MirrorSessions => "mirror-sessions",
            Family::MirrorEvents => "mirror-events",
            Family::MirrorCommands => "mirror-commands",
        }
    }
}

/// Settings of every class, indexed by class.
#[derive(Debug, Clone)]
pub struct ClassTable([ClassSettings; 7]);

impl Default for ClassTable {
    fn default() -> Self {
        ClassTable(RouteClass::ALL.map(ClassSettings::defaults))
    }
}

impl ClassTable {
    pub fn get(&self, class: RouteClass) -> &ClassSettings {
        &self.0[class.index()]
    }
    pub fn get_mut(&mut self, class: RouteClass) -> &mut ClassSettings {
        &mut self.0[class.index()]
    }
}

/// One `method + path pattern → class` rule. Patterns are `/`-separated; `{name}` matches
/// exactly one non-empty segment. The query string never takes part in matching.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteRule {
    pub method: http::Method,
    /// The pattern as written (`/agents/tasks/{id}`), for `weir routes` and messages.
    pub pattern: String,
    pub segments: Vec<Segment>,
    pub class: RouteClass,
    /// Whose breaker its failures count against ([`Family::Upstream`] for configured rules).
    pub family: Family,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Literal(String),
    Param,
}

impl RouteRule {
    pub fn new(method: &str, pattern: &str, class: RouteClass) -> Result<RouteRule, String> {
        let method = http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("`{method}` is not an HTTP method"))?;
        if !pattern.starts_with('/') {
            return Err(format!("path pattern `{pattern}` must start with `/`"));
        }
        let segments = pattern
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.starts_with('{') && s.ends_with('}') {
                    Ok(Segment::Param)
                } else if s.contains(['{', '}']) {
                    Err(format!(
                        "segment `{s}` of `{pattern}`: use `{{name}}` for a whole segment"
                    ))
                } else {
                    Ok(Segment::Literal(s.to_string()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(RouteRule {
            method,
            pattern: pattern.to_string(),
            segments,
            class,
            family: Family::Upstream,
        })
    }

    /// The same rule, counted against `family`'s breaker.
    pub fn in_family(mut self, family: Family) -> RouteRule {
        self.family = family;
        self
    }

    pub fn matches(&self, method: &http::Method, path: &str) -> bool {
        with_path_parts(path, |parts| self.matches_parts(method, parts))
    }

    /// [`RouteRule::matches`] on a path already split by [`path_parts`].
    fn matches_parts(&self, method: &http::Method, parts: &[&str]) -> bool {
        *method == self.method
            && parts.len() == self.segments.len()
            && self.segments.iter().zip(parts).all(|(seg, p)| match seg {
                Segment::Literal(l) => l == p,
                Segment::Param => true,
            })
    }
}

/// A path's non-empty segments, split once for every rule (a request is checked against up
/// to ~30 rules; splitting per rule was ~6 % of a pass-through request's instructions).
fn path_parts(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// [`path_parts`] handed to `f`, on the stack when there are at most 16 (every route is
/// shorter): classification runs for every request, and the `Vec` was an allocation each.
fn with_path_parts<R>(path: &str, f: impl FnOnce(&[&str]) -> R) -> R {
    const MAX: usize = 16;
    let mut parts = [""; MAX];
    let mut n = 0;
    for s in path.split('/').filter(|s| !s.is_empty()) {
        if n == MAX {
            return f(&path_parts(path));
        }
        parts[n] = s;
        n += 1;
    }
    f(&parts[..n])
}

/// The routes the real clients call (`tests/corpus/calls.json` lists each call and its class):
/// `gh agent-task`, VS Code's Copilot Chat (URLs from `@vscode/copilot-api`), the Copilot CLI,
/// and GitHub's public Agent Tasks REST API. Classification is by method and path only, on every
/// managed upstream. More specific patterns come first: the first match wins.
pub fn default_routes() -> Vec<RouteRule> {
    use RouteClass::*;
    let table: [(&str, &str, RouteClass); 27] = [
        ("GET", "/agents/sessions", List),
        ("GET", "/agents/sessions/nwo/{owner}/{repo}", List),
        // A pull request's sessions: VS Code's spelling, then gh's (`view <pr>`).
        ("GET", "/agents/sessions/resource/pull/{id}", List),
        ("GET", "/agents/resource/pull/{id}", List),
        ("GET", "/agents/sessions/{id}/logs", Stream),
        ("GET", "/agents/sessions/{id}", View),
        // VS Code asks these per repository on every window: the repository's custom agents (a
        // list that changes rarely) and whether the agent is enabled there (a setting read like
        // one session). Before the job view, whose pattern `enabled` would otherwise match.
        ("GET", "/agents/swe/custom-agents/{owner}/{repo}", List),
        // One custom agent's definition, read like one session.
        (
            "GET",
            "/agents/swe/custom-agents/{owner}/{repo}/{name}",
            View,
        ),
        // The cloud agent's model picker: a list that changes rarely.
        ("GET", "/agents/swe/models", List),
        ("GET", "/agents/swe/v1/jobs/{owner}/{repo}/enabled", View),
        // The job behind a session (VS Code reads its problem statement): it changes like the
        // job itself.
        (
            "GET",
            "/agents/swe/v1/jobs/{owner}/{repo}/session/{session_id}",
            View,
        ),
        ("GET", "/agents/swe/v1/jobs/{owner}/{repo}/{job_id}", View),
        ("POST", "/agents/swe/v1/jobs/{owner}/{repo}", Create),
        ("GET", "/copilot_internal/v2/token", Token),
        ("GET", "/copilot_internal/v2/token/", Token),
        // The Copilot CLI's start-up (and VS Code's user lookup): settings of one account,
        // asked several times within a second at every start. Read like one session, not like
        // a token: they carry no `refresh_in`.
        ("GET", "/copilot_internal/user", View),
        ("GET", "/copilot_internal/managed_settings", View),
        ("GET", "/copilot_internal/team_customizations", View),
        // On api.github.com: the signed-in user, which VS Code's Task API backend asks before
        // every repository's task list (`creator_id`), and a repository by its id (a task that
        // names no `html_url`). Read like one session.
        ("GET", "/user", View),
        ("GET", "/repositories/{id}", View),
        // The model catalogue on the Copilot API host (the CLI at start-up, VS Code's picker).
        ("GET", "/models", List),
        // The GitHub MCP server speaks JSON-RPC over POST: every message is its own exchange,
        // never cached. Named so that the table says so.
        ("POST", "/mcp/readonly", Other),
        // The Copilot API's completion endpoints (as api.githubcopilot.com serves them to VS
        // Code and the copilot-api proxies: chat completions, OpenAI Responses, Anthropic
        // Messages), and the `/v1/` spellings OpenAI-compatible clients use.
        ("POST", "/chat/completions", Model),
        ("POST", "/v1/chat/completions", Model),
        ("POST", "/responses", Model),
        ("POST", "/v1/responses", Model),
        ("POST", "/v1/messages", Model),
    ];
    let mut rules: Vec<RouteRule> = table
        .iter()
        .filter_map(|(m, p, c)| RouteRule::new(m, p, *c).ok())
        .collect();
    rules.extend(task_routes());
    rules.extend(mirror_routes());
    rules
}

/// The Task API, under both of its prefixes: VS Code's second cloud-sessions backend
/// (`@vscode/copilot-api` 0.5.2 `_buildAgentTaskURL`: `{dotcom}/cmc_internal/api/agents` +
/// the action's path) and GitHub's public Agent Tasks REST API (`/agents/...`, which the
/// Copilot CLI's `--connect` also asks on the Copilot API host). Lists and gets are read like
/// sessions; every page of a task's events is read like one session, so a live turn polled
/// every 2 s costs one upstream call per page per fresh window; the create is a create (never
/// lost, never doubled); steer, pull request, archive and unarchive are actions: sent once,
/// never cached. All of it counts against the Task API's own breaker.
fn task_routes() -> Vec<RouteRule> {
    use RouteClass::*;
    let table: [(&str, &str, RouteClass); 10] = [
        ("GET", "/tasks", List),
        ("GET", "/repos/{owner}/{repo}/tasks", List),
        ("POST", "/repos/{owner}/{repo}/tasks", Create),
        ("GET", "/repos/{owner}/{repo}/tasks/{id}", View),
        ("GET", "/tasks/{id}", View),
        ("GET", "/tasks/{id}/events", View),
        ("POST", "/tasks/{id}/steer", Other),
        ("POST", "/repos/{owner}/{repo}/tasks/{id}/pulls", Other),
        ("POST", "/tasks/{id}/archive", Other),
        ("POST", "/tasks/{id}/unarchive", Other),
    ];
    ["/cmc_internal/api/agents", "/agents"]
        .iter()
        .flat_map(|prefix| {
            table.iter().filter_map(move |(m, p, c)| {
                RouteRule::new(m, &format!("{prefix}{p}"), *c)
                    .ok()
                    .map(|r| r.in_family(Family::Tasks))
            })
        })
        .collect()
}

/// Mission Control's mirror of a local agent session on the Copilot API host
/// (`missionControlApiClient.ts`; see docs/real-clients.md for what the client does when each
/// call fails, which decides these): every call passes through once, never cached and never
/// retried by Weir when it has a body, each family with a breaker of its own, so that failing
/// events do not hold back the commands polls or the agent-sessions calls on the same host.
fn mirror_routes() -> Vec<RouteRule> {
    use Family::*;
    let table: [(&str, &str, Family); 4] = [
        ("POST", "/sessions", MirrorSessions),
        ("DELETE", "/sessions/{id}", MirrorSessions),
        ("POST", "/sessions/{id}/events", MirrorEvents),
        ("GET", "/sessions/{id}/commands", MirrorCommands),
    ];
    // VS Code: on the Copilot API host under `/agents`. The Copilot CLI 1.0.102's `/remote`:
    // `{githubApiUrl}/cmc_internal/api/agents` + `/sessions/…/events|commands`, read from
    // fragments of its binary, not traced call by call (docs/real-clients.md).
    ["/agents", "/cmc_internal/api/agents"]
        .iter()
        .flat_map(|prefix| {
            table.iter().filter_map(move |(m, p, f)| {
                RouteRule::new(m, &format!("{prefix}{p}"), RouteClass::Other)
                    .ok()
                    .map(|r| r.in_family(*f))
            })
        })
        .collect()
}

/// What the route table says of one request: its class, and whose breaker its failures count
/// against. Found once, when the request is classified, and carried to its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub class: RouteClass,
    pub family: Family,
}

impl Route {
    /// A call of `class` that Weir makes itself, counted against the upstream's own breaker.
    pub fn upstream(class: RouteClass) -> Route {
        Route {
            class,
            family: Family::Upstream,
        }
    }
}

/// The class of a request: the first matching rule, else `other`.
pub fn classify(rules: &[RouteRule], method: &http::Method, path: &str) -> RouteClass {
    route(rules, method, path).class
}

/// The class and breaker family of a request: the first matching rule's, else `other` in the
/// upstream's family.
pub fn route(rules: &[RouteRule], method: &http::Method, path: &str) -> Route {
    with_path_parts(path, |parts| {
        rules
            .iter()
            .find(|r| r.matches_parts(method, parts))
            .map(|r| Route {
                class: r.class,
                family: r.family,
            })
            .unwrap_or(Route::upstream(RouteClass::Other))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn default_routes_match_the_agent_api() {
        let r = default_routes();
        let c = |m: Method, p: &str| classify(&r, &m, p);
        assert_eq!(c(Method::GET, "/agents/sessions"), RouteClass::List);
        // Past the 16 parts kept on the stack, the same answer from the heap.
        let long = format!("/agents/sessions{}", "/x".repeat(20));
        assert_eq!(c(Method::GET, &long), RouteClass::Other);
        assert_eq!(
            c(Method::GET, "//agents//sessions//abc//logs/"),
            RouteClass::Stream
        );
        assert_eq!(c(Method::GET, "/agents/sessions/nwo/o/r"), RouteClass::List);
        assert_eq!(
            c(Method::GET, "/agents/sessions/resource/pull/7"),
            RouteClass::List
        );
        assert_eq!(c(Method::GET, "/agents/sessions/abc"), RouteClass::View);
        assert_eq!(
            c(Method::GET, "/agents/sessions/abc/logs"),
            RouteClass::Stream
        );
        assert_eq!(
            c(Method::GET, "/agents/swe/v1/jobs/o/r/9"),
            RouteClass::View
        );
        assert_eq!(
            c(Method::POST, "/agents/swe/v1/jobs/o/r"),
            RouteClass::Create
        );
        assert_eq!(
            c(Method::GET, "/copilot_internal/v2/token"),
            RouteClass::Token
        );
        assert_eq!(
            c(Method::GET, "/agents/swe/custom-agents/o/r"),
            RouteClass::List
        );
        assert_eq!(
            c(Method::GET, "/agents/swe/v1/jobs/o/r/enabled"),
            RouteClass::View
        );
        for p in [
            "/chat/completions",
            "/v1/chat/completions",
            "/responses",
            "/v1/responses",
            "/v1/messages",
        ] {
            assert_eq!(c(Method::POST, p), RouteClass::Model, "{p}");
            assert_eq!(c(Method::GET, p), RouteClass::Other, "{p}");
        }
        assert_eq!(c(Method::DELETE, "/agents/sessions/abc"), RouteClass::Other);
        assert_eq!(c(Method::DELETE, "/agents/tasks/abc"), RouteClass::Other);
        assert_eq!(c(Method::GET, "/agents/sessions/a/b/c"), RouteClass::Other);
    }

    /// One assertion per route the real clients call (`tests/corpus/calls.json`; the corpus
    /// itself is checked against this table by `tests/real_clients.rs`).
    #[test]
    fn the_real_clients_routes() {
        let r = default_routes();
        let c = |m: Method, p: &str| classify(&r, &m, p);
        use RouteClass::*;
        // gh agent-task view <pr>
        assert_eq!(c(Method::GET, "/agents/resource/pull/4001"), List);
        // VS Code: the job behind a session, not a job called `session`.
        assert_eq!(
            c(Method::GET, "/agents/swe/v1/jobs/o/r/session/0f2c7a4e"),
            View
        );
        assert_eq!(
            c(Method::GET, "/agents/swe/custom-agents/o/r/my-agent"),
            View
        );
        assert_eq!(c(Method::GET, "/agents/swe/models"), List);
        // The public Agent Tasks REST API (the Copilot CLI's --connect asks it on the Copilot
        // API host).
        assert_eq!(c(Method::GET, "/agents/repos/o/r/tasks"), List);
        assert_eq!(c(Method::POST, "/agents/repos/o/r/tasks"), Create);
        assert_eq!(c(Method::GET, "/agents/repos/o/r/tasks/abc"), View);
        assert_eq!(c(Method::GET, "/agents/tasks"), List);
        assert_eq!(c(Method::GET, "/agents/tasks/abc"), View);
        assert_eq!(c(Method::POST, "/agents/tasks"), Other);
        // The Copilot CLI's start-up.
        assert_eq!(c(Method::GET, "/copilot_internal/user"), View);
        assert_eq!(c(Method::GET, "/copilot_internal/managed_settings"), View);
        assert_eq!(
            c(Method::GET, "/copilot_internal/team_customizations"),
            View
        );
        assert_eq!(c(Method::GET, "/models"), List);
        assert_eq!(c(Method::GET, "/models/gpt-5"), Other);
        assert_eq!(c(Method::POST, "/mcp/readonly"), Other);
        assert!(!c(Method::POST, "/mcp/readonly").is_cacheable());
        assert_eq!(c(Method::GET, "/mcp/readonly"), Other);
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(RouteRule::new("GET", "agents", RouteClass::List).is_err());
        assert!(RouteRule::new("GET", "/a{b}", RouteClass::List).is_err());
        assert!(RouteRule::new("G ET", "/a", RouteClass::List).is_err());
    }
}
