//! Why an upstream's breaker is cautious: outside evidence (GitHub Status, teammates' Weirs)
//! that the upstream is failing before this Weir has seen it fail itself. Each source sets
//! and clears its own flag; the breaker is cautious while any flag is on.

use std::sync::atomic::{AtomicU8, Ordering};

/// A source of outside evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CautionSource {
    // Set by the GitHub Status watcher's work; kept so both sources share one type.
    #[allow(dead_code)]
    GithubStatus,
    Peers,
}

impl CautionSource {
    const fn bit(self) -> u8 {
        match self {
            CautionSource::GithubStatus => 1,
            CautionSource::Peers => 2,
        }
    }
}

/// The set of sources currently asking for caution.
#[derive(Debug, Default)]
pub(crate) struct Caution(AtomicU8);

impl Caution {
    /// Sets or clears `source`; returns whether any source is on afterwards.
    pub fn set(&self, source: CautionSource, on: bool) -> bool {
        let after = if on {
            self.0.fetch_or(source.bit(), Ordering::Relaxed) | source.bit()
        } else {
            self.0.fetch_and(!source.bit(), Ordering::Relaxed) & !source.bit()
        };
        after != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_source_keeps_caution_on() {
        let c = Caution::default();
        assert!(c.set(CautionSource::Peers, true));
        assert!(c.set(CautionSource::GithubStatus, true));
        assert!(c.set(CautionSource::Peers, false), "GitHub Status still on");
        assert!(!c.set(CautionSource::GithubStatus, false));
    }
}
