//! The one place that picks this platform's OS watcher (`cfg(target_os)`): NetworkManager over
//! D-Bus on Linux ([`super::linux`]); macOS ([`super::macos`]) and Windows ([`super::windows`])
//! name their API but report "no OS information yet on this platform" until it is wired up.

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
    #[cfg(target_os = "linux")]
    {
        let address = super::linux::BusAddress::choose(settings.system_bus_address.clone());
        tokio::spawn(super::linux::watch(network, address, bus.stopping()));
    }
    #[cfg(target_os = "macos")]
    {
        let _ = bus;
        super::macos::start(&network);
    }
    #[cfg(target_os = "windows")]
    {
        let _ = bus;
        super::windows::start(&network);
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
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
