//! When to check next: the interval after a success, exponential backoff after failures.

use std::time::Duration;

use crate::config::StatusConfig;
use weir_resilience::Backoff;

/// Wait before the next check, given how many checks in a row have failed.
///
/// `interval` after a success; after `n` failures `interval * 2^n`, capped at
/// `max_backoff` (never below `interval`); plus one jitter sample either way.
pub fn next_delay(config: &StatusConfig, consecutive_failures: u32) -> Duration {
    base_delay(config, consecutive_failures) + config.jitter.sample()
}

fn base_delay(config: &StatusConfig, failures: u32) -> Duration {
    if failures == 0 {
        return config.interval;
    }
    // Weir's one backoff type: doubling from the interval, capped (never below the interval).
    Backoff::new(config.interval, config.max_backoff.max(config.interval)).ceiling(failures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Jitter;

    fn cfg(jitter: Jitter) -> StatusConfig {
        StatusConfig {
            interval: Duration::from_secs(60),
            max_backoff: Duration::from_secs(600),
            jitter,
            ..StatusConfig::default()
        }
    }

    #[test]
    fn doubles_then_caps() {
        let c = cfg(Jitter::None);
        let secs: Vec<u64> = (0..7).map(|n| next_delay(&c, n).as_secs()).collect();
        assert_eq!(secs, [60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(next_delay(&c, u32::MAX), Duration::from_secs(600));
    }

    #[test]
    fn jitter_is_added_on_top() {
        let c = cfg(Jitter::Fixed(Duration::from_secs(7)));
        assert_eq!(next_delay(&c, 0), Duration::from_secs(67));
        assert_eq!(next_delay(&c, 9), Duration::from_secs(607));
    }

    #[test]
    fn a_cap_below_the_interval_is_lifted_to_it() {
        let mut c = cfg(Jitter::None);
        c.max_backoff = Duration::from_secs(5);
        assert_eq!(next_delay(&c, 3), Duration::from_secs(60));
    }
}
