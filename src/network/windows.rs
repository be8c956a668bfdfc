//! Windows: the metered answer is WinRT's
//! `NetworkInformation::GetInternetConnectionProfile().GetConnectionCost().NetworkCostType()`
//! (`Fixed` or `Variable` mean metered, `Unrestricted` not, `Unknown` unknown; `Roaming` and
//! `OverDataLimit` too), followed through `NetworkInformation::NetworkStatusChanged`.
//!
//! Not wired up yet: it needs the `windows` crate's `Networking_Connectivity` feature, and this
//! code is built and tested on Linux only, where it cannot be compiled or run. Until then the
//! OS value stays unknown, the status says "no OS information yet on this platform", and the
//! override (tray toggle, `weir network metered on`) is the way to say "metered".
//!
//! TODO(#14): the call above, re-read on `NetworkStatusChanged` → `Network::set_os_watch`.

use super::{Network, OsWatch};

pub(super) fn start(network: &Network) {
    network.set_os_watch(
        None,
        OsWatch::Unsupported {
            platform: "Windows".into(),
            api: "NetworkInformation GetConnectionCost().NetworkCostType".into(),
        },
    );
}
