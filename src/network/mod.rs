//! The network this machine is on, as fallback policy sees it: metered or not.
//!
//! Two sources, the forced one winning: what the OS says (NetworkManager's `Metered` property
//! on Linux; each OS's own API elsewhere), and a developer's override (the tray toggle, the
//! control API). Read once per request by the policy phase, so it is two atomics, no lock.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

fn to_u8(v: Option<bool>) -> u8 {
    match v {
        None => UNKNOWN,
        Some(true) => YES,
        Some(false) => NO,
    }
}

fn from_u8(v: u8) -> Option<bool> {
    match v {
        YES => Some(true),
        NO => Some(false),
        _ => None,
    }
}

/// Whether the network is metered, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeteredState {
    /// What the OS reports (`None`: unknown, or no OS API on this platform).
    pub os: Option<bool>,
    /// The developer's override (`None`: follow the OS).
    pub forced: Option<bool>,
    /// The answer policy uses: the override, else the OS, else not metered.
    pub metered: bool,
}

/// The shared view of the network (one per engine).
#[derive(Debug, Default)]
pub struct Network {
    os: AtomicU8,
    forced: AtomicU8,
}

impl Network {
    /// Metered, as policy sees it now.
    pub fn metered(&self) -> bool {
        self.state().metered
    }

    pub fn state(&self) -> MeteredState {
        let os = from_u8(self.os.load(Relaxed));
        let forced = from_u8(self.forced.load(Relaxed));
        MeteredState {
            os,
            forced,
            metered: forced.or(os).unwrap_or(false),
        }
    }

    /// The developer's override (`None` returns to following the OS).
    pub fn force(&self, metered: Option<bool>) {
        self.forced.store(to_u8(metered), Relaxed);
    }

    /// What the OS reports, set by the platform watcher.
    pub fn set_os(&self, metered: Option<bool>) {
        self.os.store(to_u8(metered), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_wins_over_the_os_and_unknown_is_not_metered() {
        let n = Network::default();
        assert!(!n.metered());
        n.set_os(Some(true));
        assert!(n.metered());
        n.force(Some(false));
        assert!(!n.metered());
        n.force(None);
        assert!(n.metered());
        assert_eq!(n.state().os, Some(true));
    }
}
