//! The one place that picks this platform's OS watcher (`cfg(target_os)`): NetworkManager over
//! D-Bus on Linux ([`super::linux`]), Network.framework's path monitor on macOS
//! ([`super::macos`]), WinRT's `NetworkInformation` on Windows ([`super::windows`]). What the
//! macOS and Windows answers mean is decided here, in plain functions compiled and tested on
//! every platform ([`macos_meaning`], [`windows_meaning`]); only Linux's watcher runs in this
//! project's CI.

use super::Network;
use crate::config::NetworkSettings;
use crate::events::Bus;
use std::sync::Arc;

/// Starts the watcher that keeps `network`'s OS value current (nothing when `[network]
/// detect_os = false`). Never fails: without an OS answer the value stays unknown and the
/// status says why.
pub(crate) fn spawn_watcher(network: Arc<Network>, settings: &NetworkSettings, bus: &Bus) {
    if !settings.detect_os {
        return;
    }
    #[cfg(not(feature = "metered"))]
    {
        let _ = bus;
        network.set_os_watch(
            None,
            super::OsWatch::NotBuilt {
                feature: "metered".into(),
            },
        );
    }
    #[cfg(all(feature = "metered", target_os = "linux"))]
    {
        let address = super::linux::BusAddress::choose(settings.system_bus_address.clone());
        bus.spawn(super::linux::watch(network, address, bus.stopping()));
    }
    #[cfg(all(feature = "metered", target_os = "macos"))]
    bus.spawn(super::macos::watch(network, bus.stopping()));
    #[cfg(all(feature = "metered", target_os = "windows"))]
    bus.spawn(super::windows::watch(network, bus.stopping()));
    #[cfg(all(
        feature = "metered",
        not(any(target_os = "linux", target_os = "macos", target_os = "windows"))
    ))]
    {
        let _ = bus;
        network.set_os_watch(
            None,
            super::OsWatch::Unsupported {
                platform: std::env::consts::OS.into(),
                api: "none known".into(),
            },
        );
    }
}

/// What Network.framework's path says: expensive (cellular, a personal hotspot) or constrained
/// (Low Data Mode) is metered; neither is not. Its own words for the status.
#[cfg_attr(not(any(target_os = "macos", test)), allow(dead_code))]
pub(super) fn macos_meaning(expensive: bool, constrained: bool) -> (Option<bool>, String) {
    let value = match (expensive, constrained) {
        (true, true) => "expensive, constrained",
        (true, false) => "expensive",
        (false, true) => "constrained (Low Data Mode)",
        (false, false) => "not expensive, not constrained",
    };
    (Some(expensive || constrained), value.to_string())
}

/// What a Windows connection cost says. `kind` is `NetworkCostType`'s value (0 Unknown,
/// 1 Unrestricted, 2 Fixed, 3 Variable); roaming or being over the plan's data limit is metered
/// whatever the type. Windows' own words for the status.
#[cfg_attr(not(any(target_os = "windows", test)), allow(dead_code))]
pub(super) fn windows_meaning(
    kind: i32,
    roaming: bool,
    over_limit: bool,
) -> (Option<bool>, String) {
    let (by_kind, word) = match kind {
        0 => (None, "Unknown".to_string()),
        1 => (Some(false), "Unrestricted".to_string()),
        2 => (Some(true), "Fixed".to_string()),
        3 => (Some(true), "Variable".to_string()),
        n => (None, format!("{n} (not a known NetworkCostType)")),
    };
    let mut value = word;
    if roaming {
        value.push_str(", roaming");
    }
    if over_limit {
        value.push_str(", over the data limit");
    }
    let metered = if roaming || over_limit {
        Some(true)
    } else {
        by_kind
    };
    (metered, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macos_expensive_or_constrained_paths_are_metered() {
        assert_eq!(macos_meaning(false, false).0, Some(false));
        assert_eq!(
            macos_meaning(true, false),
            (Some(true), "expensive".to_string())
        );
        assert_eq!(macos_meaning(false, true).0, Some(true));
        assert_eq!(macos_meaning(true, true).0, Some(true));
    }

    #[test]
    fn windows_costs_map_to_metered_and_roaming_or_over_the_limit_always_is() {
        assert_eq!(
            windows_meaning(0, false, false),
            (None, "Unknown".to_string())
        );
        assert_eq!(
            windows_meaning(1, false, false),
            (Some(false), "Unrestricted".to_string())
        );
        assert_eq!(windows_meaning(2, false, false).0, Some(true));
        assert_eq!(windows_meaning(3, false, false).0, Some(true));
        assert_eq!(
            windows_meaning(1, true, false),
            (Some(true), "Unrestricted, roaming".to_string())
        );
        assert_eq!(windows_meaning(0, false, true).0, Some(true));
        assert_eq!(windows_meaning(9, false, false).0, None);
        assert!(windows_meaning(9, false, false).1.contains("not a known"));
    }
}
