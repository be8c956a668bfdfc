//! Org rules above user rules. Each function has a strictness order (most permissive first):
//!
//! - list: `pass < cache`
//! - create: `local < fallback < queue < fail`
//! - model: `fallback < never`
//!
//! A user rule may tighten an org rule (move right), never loosen it (move left). At load, a
//! user rule whose repositories overlap an org rule's and whose action for a function is
//! looser is *refused* for that overlap: the refusal is logged and shown in status, naming
//! both rules. At request time the stricter of the two first matches decides, so where both
//! apply the org rule decides; where only the user rule applies, it does.

use super::{Action, Function, Rule, RuleRef};
use serde::Serialize;

/// A user rule that would loosen an org rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub user: RuleRef,
    pub org: RuleRef,
    pub function: super::Function,
    pub user_action: Action,
    pub org_action: Action,
    /// The explanation, naming both rules (file:line).
    pub message: String,
}

/// Every (user rule, org rule, function) where the user rule would loosen the org rule.
pub(crate) fn refusals(org: &[Rule], user: &[Rule]) -> Vec<Refusal> {
    let mut out = vec![];
    for u in user {
        for f in Function::ALL {
            let Some(ua) = u.action(f) else { continue };
            for o in org {
                let Some(oa) = o.action(f) else { continue };
                // Network conditions and situations can hold together, so only the
                // repositories decide whether both rules can apply to one request.
                if ua.rank() < oa.rank() && u.repo.overlaps(&o.repo) {
                    out.push(Refusal {
                        message: format!(
                            "user rule {} at {} ({}) sets {} = \"{}\", looser than org rule {} at {} ({}) which sets {} = \"{}\"; an organisation's rule can be tightened, never loosened (order {}), so where both apply the org rule decides",
                            u.at, u.at.at, u.describe(), f.as_str(), ua.as_str(),
                            o.at, o.at.at, o.describe(), f.as_str(), oa.as_str(),
                            Action::order(f),
                        ),
                        user: u.at.clone(),
                        org: o.at.clone(),
                        function: f,
                        user_action: ua,
                        org_action: oa,
                    });
                }
            }
        }
    }
    out
}
