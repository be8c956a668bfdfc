//! Phase 4a: the fallback policy graph ([`crate::policy`]) for one request. It reads the
//! request's repository (from the path), the network (metered: [`crate::network`]; offline:
//! the mode) and the upstream's situations (breaker, cooldown, 429 surge), and decides the
//! `list` or `create` function's action once; the cache and create phases carry it out:
//!
//! - list `cache`: this request is answered like cache-only mode ([`super::held`]), nothing
//!   upstream; a miss is a `policy_cache_miss` problem naming the rule;
//! - create `fallback` (built-in): the one attempt may use the upstream's fallback origin, then
//!   the durable queue; `queue`: the primary origin only, then the queue; `fail`: the primary
//!   only, then a `policy_failed` problem (503) naming the rule; `local`: the primary only,
//!   then an offer to the local agent (202 with the offer's `Location`); when no offer can be
//!   made, the queue, and the answer says so.
//!
//! A create rule that names a situation (`situation = "surge_429"`) acts *before* the attempt
//! while the situation holds: the create is not sent upstream at all (that is the point during
//! a 429 surge). Every list and create response carries `Weir-Policy: <rule> <function>=<action>`.

use super::identity::Caller;
use super::record::Outcome;
use crate::config::{RouteClass, Settings, UpstreamIndex};
use crate::mode::{Behaviour, Hold, Modes};
use crate::policy::{Action, Context, Decision, DecisionLog, Function, Situation, Situations};
use crate::problem::{Problem, ProblemKind};
use crate::upstream::Upstreams;
use http::{HeaderValue, StatusCode};
use weir_resilience::State;

/// The response header naming the rule that decided.
pub(super) const HEADER: &str = "weir-policy";
/// [`HEADER`] as a name made at compile time: given as text, the name was parsed and hashed
/// byte by byte on every answer (~0.25k instructions of a cache hit, callgrind).
pub(super) const HEADER_NAME: http::HeaderName = http::HeaderName::from_static(HEADER);

/// What the policy phase reads (the upstreams' situations, the network, the mode). A rule's
/// decision goes on the request's outcome, for the decision log (`super::record`).
#[derive(Clone, Copy)]
pub(crate) struct PolicyHandles<'a> {
    pub upstreams: &'a Upstreams,
    pub network: &'a crate::network::Network,
    pub modes: &'a Modes,
}

/// The situations holding for upstream `up` now, as `who` sees them.
pub(super) fn situations(
    h: PolicyHandles<'_>,
    up: UpstreamIndex,
    who: Option<&crate::identity::Identity>,
) -> Situations {
    let u = h.upstreams.get(up);
    let mut s = Situations::default();
    match u.gate.breaker.state() {
        State::Open | State::HalfOpen => s = s.with(Situation::BreakerOpen),
        State::Degraded => s = s.with(Situation::Degraded),
        State::Closed => {}
    }
    if u.gate.cooling(who) {
        s = s.with(Situation::Cooldown);
    }
    if u.counters.rate_limit_surge() {
        s = s.with(Situation::Surge429);
    }
    s
}

/// The policy context of one managed request.
pub(crate) fn context(
    h: PolicyHandles<'_>,
    up: UpstreamIndex,
    path: &str,
    who: Option<&crate::identity::Identity>,
) -> Context {
    Context {
        repo: crate::policy::repo_of(path),
        metered: h.network.metered(),
        offline: matches!(h.modes.behaviour(), Behaviour::Hold(Hold::Offline)),
        situations: situations(h, up, who),
    }
}

/// The decision for this request's function (`list` or `create`; other classes have none),
/// under the request's one settings snapshot; a rule's decision is noted on `seen`.
pub(super) fn decide(
    h: PolicyHandles<'_>,
    settings: &Settings,
    up: UpstreamIndex,
    class: RouteClass,
    path: &str,
    who: &Caller,
    seen: &Outcome,
) -> Option<Decision> {
    let function = match class {
        RouteClass::List => Function::List,
        RouteClass::Create => Function::Create,
        _ => return None,
    };
    let set = &settings.policy;
    // No rules at all (the usual case): the built-in behaviour, without reading any state or
    // making a context to match no rule against.
    if set.org.is_empty() && set.user.is_empty() {
        return Some(Decision::built_in(function));
    }
    let scope = who.scope();
    let cx = context(h, up, path, scope.as_ref());
    let d = set.decide(function, &cx);
    seen.decided(DecisionLog::entry(&d, cx.repo.as_deref()));
    Some(d)
}

/// Whether model fallback may run for a request to upstream `up` about `repo` (`None`:
/// the request names no repository, so only `repo = "*"` rules apply). The model path calls
/// this before rewriting a model: `Action::Never` forbids it; the decision names the rule
/// (and a rule's decision is noted on `seen`).
pub(crate) fn model_fallback_allowed(
    h: PolicyHandles<'_>,
    settings: &Settings,
    up: UpstreamIndex,
    repo: Option<&str>,
    seen: &Outcome,
) -> Decision {
    let mut cx = context(h, up, "", None);
    cx.repo = repo.map(str::to_string);
    let d = settings.policy.decide(Function::Model, &cx);
    seen.decided(DecisionLog::entry(&d, repo));
    d
}

/// The hold a list decision asks for (`cache` → answered from the cache alone).
pub(super) fn list_hold(d: Option<&Decision>) -> Option<Hold> {
    d.filter(|d| d.action == Action::Cache)
        .map(|_| Hold::Policy)
}

/// The header value for a decision.
pub(super) fn header(d: &Decision) -> Option<HeaderValue> {
    // The built-in decision (no rule matched: the usual case) has a fixed text; every list and
    // create carries it, so it is not formatted per request.
    if d.rule.source == crate::policy::Source::Default
        && d.action == Action::default_for(d.function)
    {
        // Checked at compile time: a runtime `from_static` checks every byte per request.
        const LIST: HeaderValue = HeaderValue::from_static(default_header(Function::List));
        const CREATE: HeaderValue = HeaderValue::from_static(default_header(Function::Create));
        const MODEL: HeaderValue = HeaderValue::from_static(default_header(Function::Model));
        return Some(match d.function {
            Function::List => LIST,
            Function::Create => CREATE,
            Function::Model => MODEL,
        });
    }
    HeaderValue::from_str(&d.header()).ok()
}

/// `Decision::header()` of the built-in decision for `function` (a test keeps them equal).
const fn default_header(function: Function) -> &'static str {
    match function {
        Function::List => "default list=pass",
        Function::Create => "default create=fallback",
        Function::Model => "default model=fallback",
    }
}

/// Names the rule in a problem the policy caused (a cache miss under `list = "cache"`).
pub(super) fn explain(p: &mut Problem, d: &Decision) {
    if p.kind == ProblemKind::PolicyCacheMiss {
        p.detail = format!("{} Rule: {}.", p.detail, d.why);
    }
}

/// How the create phase carries out a create decision.
#[derive(Debug, Clone)]
pub(crate) struct CreatePlan {
    pub decision: Decision,
    /// Send nothing upstream: a rule named a situation that holds now.
    pub skip_attempt: bool,
    /// The upstream's fallback origin may get the one try (`fallback` only).
    pub fallback_origin: bool,
}

impl CreatePlan {
    pub fn new(decision: Decision) -> CreatePlan {
        let action = decision.action;
        CreatePlan {
            skip_attempt: decision.situational && action != Action::Fallback,
            fallback_origin: action == Action::Fallback,
            decision,
        }
    }

    /// Why a create was not sent upstream (`skip_attempt`).
    pub fn skip_reason(&self) -> String {
        format!("policy rule {} says create = \"{}\" while its situation holds, so Weir did not send this create upstream ({})", self.decision.rule, self.decision.action.as_str(), self.decision.why)
    }

    /// The `policy_failed` problem of a create the rule says to fail.
    pub fn fail(&self, reason: &str, upstream: &str) -> Problem {
        let mut p = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::PolicyFailed,
            format!(
                "this create was not delivered to {upstream} ({reason}), and policy rule {} says create = \"fail\": Weir does not queue it or send it elsewhere. Rule: {}. Try again when the upstream is healthy.",
                self.decision.rule, self.decision.why
            ),
        )
        .upstream(upstream);
        p.headers.push((HEADER, self.decision.header()));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RuleRef;

    #[test]
    fn the_fixed_default_header_is_what_the_decision_would_format() {
        for function in [Function::List, Function::Create, Function::Model] {
            let d = Decision {
                function,
                action: Action::default_for(function),
                rule: RuleRef::default_rule(),
                why: std::borrow::Cow::Borrowed(""),
                situational: false,
            };
            assert_eq!(default_header(function), d.header());
            assert_eq!(header(&d).unwrap(), d.header().as_str());
            // The decision made without rules is the rule set's own when it has none.
            let none = crate::policy::PolicySet::default();
            assert_eq!(
                Decision::built_in(function),
                none.decide(function, &Context::default())
            );
        }
    }
}
