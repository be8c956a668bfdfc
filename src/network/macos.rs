//! macOS: the metered answer is Network.framework's `NWPathMonitor`: a path update's
//! `isExpensive` (cellular, a personal hotspot) or `isConstrained` (Low Data Mode) means
//! metered.
//!
//! Not wired up yet: it needs Objective-C/Swift bindings (a block-based callback on a dispatch
//! queue), and this code is built and tested on Linux only, where it cannot be compiled or run.
//! Until then the OS value stays unknown, the status says "no OS information yet on this
//! platform", and the override (tray toggle, `weir network metered on`) is the way to say
//! "metered".
//!
//! TODO(#14): `nw_path_monitor_create()` + `nw_path_monitor_set_update_handler` →
//! `nw_path_is_expensive(path) || nw_path_is_constrained(path)` → `Network::set_os_watch`.

use super::{Network, OsWatch};

pub(super) fn start(network: &Network) {
    network.set_os_watch(
        None,
        OsWatch::Unsupported {
            platform: "macOS".into(),
            api: "NWPathMonitor isExpensive/isConstrained".into(),
        },
    );
}
