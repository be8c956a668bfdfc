//! Caution: outside signals that an upstream is in trouble (a GitHub Status incident on a
//! component watched for it, teammates' Weirs seeing failures) make its breaker need fewer
//! calls to open while they last. Caution never opens a breaker by itself; it is shown in the
//! status as the reason the thresholds are lower.

use serde::Serialize;
use std::collections::BTreeMap;

/// Where a caution comes from. `pub` (not `pub(crate)`) because it appears in the public
/// status document ([`crate::status`]); the module itself is crate-private.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CautionSource {
    /// An unresolved GitHub Status incident, or a non-operational status, on a component
    /// watched for this upstream.
    GithubStatus,
    /// Other Weirs of the team report this upstream failing.
    Peers,
}

impl CautionSource {
    /// Words for reasons ("GitHub Status", "team").
    pub fn label(self) -> &'static str {
        match self {
            CautionSource::GithubStatus => "GitHub Status",
            CautionSource::Peers => "team",
        }
    }
}

/// One active caution in the status document (`upstreams[].breaker.caution[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Caution {
    pub source: CautionSource,
    /// What the source said, e.g. the incident's name; `None` when it gave nothing.
    pub detail: Option<String>,
}

/// The active cautions of one upstream, by source.
#[derive(Debug, Default)]
pub(crate) struct Cautions(BTreeMap<CautionSource, Option<String>>);

impl Cautions {
    /// Sets or clears `source`; `Some(detail)` replaces the detail, `on` without one keeps the
    /// detail already there. Returns whether anything changed.
    pub fn set(&mut self, source: CautionSource, on: bool, detail: Option<String>) -> bool {
        if !on {
            return self.0.remove(&source).is_some();
        }
        match self.0.get_mut(&source) {
            Some(d) if detail.is_none() || *d == detail => false,
            Some(d) => {
                *d = detail;
                true
            }
            None => {
                self.0.insert(source, detail);
                true
            }
        }
    }

    /// The breaker's reason in words (`None`: not cautious), e.g.
    /// `GitHub Status: Disruption with Copilot; team`.
    pub fn reason(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(s, d)| match d {
                Some(d) => format!("{}: {d}", s.label()),
                None => s.label().to_owned(),
            })
            .collect();
        Some(parts.join("; "))
    }

    pub fn list(&self) -> Vec<Caution> {
        self.0
            .iter()
            .map(|(s, d)| Caution {
                source: *s,
                detail: d.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_combine_and_clear_independently() {
        let mut c = Cautions::default();
        assert_eq!(c.reason(), None);
        assert!(c.set(CautionSource::Peers, true, None));
        assert!(!c.set(CautionSource::Peers, true, None), "already on");
        assert!(c.set(
            CautionSource::GithubStatus,
            true,
            Some("Disruption with Copilot".into())
        ));
        assert_eq!(
            c.reason().as_deref(),
            Some("GitHub Status: Disruption with Copilot; team")
        );
        assert!(c.set(CautionSource::Peers, false, None));
        assert!(!c.set(CautionSource::Peers, false, None));
        assert_eq!(
            serde_json::to_value(c.list()).unwrap(),
            serde_json::json!([{"source": "github_status", "detail": "Disruption with Copilot"}])
        );
    }
}
