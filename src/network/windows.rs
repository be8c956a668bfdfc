//! Windows: the metered answer is WinRT's
//! `NetworkInformation::GetInternetConnectionProfile().GetConnectionCost()`: its
//! `NetworkCostType` (`Fixed` or `Variable` mean metered, `Unrestricted` not, `Unknown`
//! unknown), and `Roaming` / `OverDataLimit`, which mean metered whatever the type says
//! ([`super::os::windows_meaning`]). It is read at start and again on every
//! `NetworkInformation::NetworkStatusChanged` (the handler runs on a WinRT thread-pool thread;
//! [`Network::set_os_watch`] is a lock and two atomics, so that is fine).
//!
//! Built only for Windows, so it never runs in this project's Linux CI;
//! `scripts/check-windows.sh` type-checks and lints it (with the whole engine) for
//! `x86_64-pc-windows-gnu`, and the mapping it relies on is tested on every platform. The
//! `windows` crate initialises the multithreaded apartment itself when a factory call finds
//! none.

use super::os::windows_meaning;
use super::{Network, OsWatch};
use std::sync::Arc;
use tokio::sync::watch;
use windows::Networking::Connectivity::{NetworkInformation, NetworkStatusChangedEventHandler};

const API: &str = "Windows NetworkInformation";

/// The registered change handler; unregistered when dropped (the engine stopped).
struct Registration(i64);

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = NetworkInformation::RemoveNetworkStatusChanged(self.0);
    }
}

/// Keeps `network`'s OS value current until the engine stops.
pub(super) async fn watch(network: Arc<Network>, mut stop: watch::Receiver<bool>) {
    // The handler object is only needed to register (the system keeps its own reference), so
    // nothing but the plain token is held across the wait.
    let _registration = {
        let for_changes = network.clone();
        let handler = NetworkStatusChangedEventHandler::new(move |_| {
            read_into(&for_changes);
            Ok(())
        });
        match NetworkInformation::NetworkStatusChanged(&handler) {
            Ok(token) => Some(Registration(token)),
            Err(e) => {
                // The first reading stands; later changes are not seen. Say so once.
                tracing::warn!("network: cannot follow {API} changes ({e}); the value read at start stays until restart");
                None
            }
        }
    };
    // Read after registering, so a change between the two is not missed.
    read_into(&network);
    let _ = stop.wait_for(|stopped| *stopped).await;
}

fn read_into(network: &Network) {
    match read() {
        Ok((metered, value)) => network.set_os_watch(
            metered,
            OsWatch::Watching {
                api: API.into(),
                value,
            },
        ),
        Err(e) => network.set_os_watch(
            None,
            OsWatch::Failed {
                api: API.into(),
                error: e.message(),
            },
        ),
    }
}

/// The metered answer and Windows' own words for it.
fn read() -> windows::core::Result<(Option<bool>, String)> {
    let profile = match NetworkInformation::GetInternetConnectionProfile() {
        Ok(profile) => profile,
        // No internet connection profile (offline): windows-rs turns the null answer into an
        // error whose code is S_OK. Nothing to be metered on.
        Err(e) if e.code().is_ok() => return Ok((None, "no internet connection profile".into())),
        Err(e) => return Err(e),
    };
    let cost = profile.GetConnectionCost()?;
    let kind = cost.NetworkCostType()?.0;
    let roaming = cost.Roaming().unwrap_or(false);
    let over_limit = cost.OverDataLimit().unwrap_or(false);
    Ok(windows_meaning(kind, roaming, over_limit))
}
