//! Which sessions finished, failed or started waiting for review since the last poll: a pure
//! comparison of two lists, so the notification rule is tested without a server.
//!
//! The first list after start (or after the token changed) is the baseline and notifies
//! nothing: a tray that starts must not announce every session of the past week. After that a
//! session notifies when its group becomes finished, failed or ready for review, including a
//! session first seen already in such a group (it was created and ended between two polls).

use crate::events::SessionChange;
use crate::status::{SessionGroup, SessionSummary};
use std::collections::HashMap;

/// The most sessions remembered (a session that leaves the list and comes back later in the
/// same group would otherwise notify twice; beyond this the oldest memories go).
const MAX_KNOWN: usize = 2000;

/// The groups of the sessions seen so far.
#[derive(Debug, Default)]
pub struct Known {
    groups: HashMap<String, SessionGroup>,
    baseline_taken: bool,
}

impl Known {
    /// Forgets everything: the next list is a new baseline (a token was stored or removed).
    pub fn reset(&mut self) {
        *self = Known::default();
    }

    /// The changes `list` shows against what was known; remembers `list`.
    pub fn update(&mut self, list: &[SessionSummary]) -> Vec<(SessionChange, SessionSummary)> {
        let mut out = Vec::new();
        for s in list {
            let before = self.groups.insert(s.id.clone(), s.group);
            if !self.baseline_taken || before == Some(s.group) {
                continue;
            }
            let change = match s.group {
                SessionGroup::Finished => SessionChange::Finished,
                SessionGroup::Failed => SessionChange::Failed,
                SessionGroup::ReadyForReview => SessionChange::NeedsReview,
                SessionGroup::Running | SessionGroup::Other => continue,
            };
            out.push((change, s.clone()));
        }
        self.baseline_taken = true;
        if self.groups.len() > MAX_KNOWN {
            // Keep the sessions of this list; forget the rest (they are old news).
            let current: std::collections::HashSet<&str> =
                list.iter().map(|s| s.id.as_str()).collect();
            self.groups.retain(|id, _| current.contains(id.as_str()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str, group: SessionGroup) -> SessionSummary {
        SessionSummary {
            id: id.into(),
            group,
            state: String::new(),
            repository: None,
            title: None,
            created_at: None,
            updated_at: None,
            pull_request_url: None,
            url: String::new(),
        }
    }

    #[test]
    fn baseline_is_silent_then_changes_notify_once() {
        use SessionGroup::*;
        let mut k = Known::default();
        assert!(k.update(&[s("a", Running), s("old", Failed)]).is_empty());
        let c = k.update(&[s("a", ReadyForReview), s("old", Failed), s("n", Failed)]);
        let got: Vec<_> = c.iter().map(|(c, s)| (*c, s.id.as_str())).collect();
        assert_eq!(
            got,
            [
                (SessionChange::NeedsReview, "a"),
                (SessionChange::Failed, "n")
            ]
        );
        assert!(k.update(&[s("a", ReadyForReview)]).is_empty(), "no repeat");
        let c = k.update(&[s("a", Finished), s("r", Running)]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, SessionChange::Finished);
        k.reset();
        assert!(k.update(&[s("a", Failed)]).is_empty(), "new baseline");
    }
}
