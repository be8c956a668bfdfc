//! macOS: the metered answer is Network.framework's path monitor (`nw_path_monitor_*`, the C
//! API behind `NWPathMonitor`): a path that is expensive (cellular, a personal hotspot) or
//! constrained (Low Data Mode) means metered ([`super::os::macos_meaning`]). The monitor calls
//! its update handler (a block, made with `block2`) on a serial dispatch queue of its own at
//! start and on every path change; [`Network::set_os_watch`] is a lock and two atomics, so that
//! is fine. The monitor is cancelled when the engine stops.
//!
//! `nw_path_is_constrained` needs macOS 10.15, so that is Weir's minimum on macOS
//! (`.cargo/config.toml` sets `MACOSX_DEPLOYMENT_TARGET`, the tray bundle's
//! `minimumSystemVersion` says the same).
//!
//! Built only for macOS, so it is not run by this project's Linux CI (it was type-checked and
//! linted for `aarch64-apple-darwin` and `x86_64-apple-darwin`); the mapping it relies on is
//! tested on every platform.

use super::os::macos_meaning;
use super::{Network, OsWatch};
use block2::{Block, RcBlock};
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use tokio::sync::watch;

const API: &str = "Network.framework path monitor";

type NwPathMonitor = *mut c_void;
type NwPath = *mut c_void;
type DispatchQueue = *mut c_void;

#[link(name = "Network", kind = "framework")]
extern "C" {
    fn nw_path_monitor_create() -> NwPathMonitor;
    fn nw_path_monitor_set_queue(monitor: NwPathMonitor, queue: DispatchQueue);
    fn nw_path_monitor_set_update_handler(monitor: NwPathMonitor, handler: &Block<dyn Fn(NwPath)>);
    fn nw_path_monitor_start(monitor: NwPathMonitor);
    fn nw_path_monitor_cancel(monitor: NwPathMonitor);
    fn nw_path_is_expensive(path: NwPath) -> bool;
    fn nw_path_is_constrained(path: NwPath) -> bool;
    fn nw_release(obj: *mut c_void);
}

// libdispatch is part of libSystem, always linked.
extern "C" {
    fn dispatch_queue_create(label: *const c_char, attr: *mut c_void) -> DispatchQueue;
    fn dispatch_release(obj: *mut c_void);
}

/// The running monitor and its queue; cancelled and released when dropped.
struct Monitor {
    monitor: NwPathMonitor,
    queue: DispatchQueue,
}

// The raw handles are only used to cancel and release, which Network.framework and libdispatch
// allow from any thread.
unsafe impl Send for Monitor {}

impl Drop for Monitor {
    fn drop(&mut self) {
        unsafe {
            nw_path_monitor_cancel(self.monitor);
            nw_release(self.monitor);
            dispatch_release(self.queue);
        }
    }
}

/// Keeps `network`'s OS value current until the engine stops.
pub(super) async fn watch(network: Arc<Network>, mut stop: watch::Receiver<bool>) {
    let _monitor = start(network);
    let _ = stop.wait_for(|stopped| *stopped).await;
}

fn start(network: Arc<Network>) -> Monitor {
    let handler = RcBlock::new(move |path: NwPath| {
        // SAFETY: `path` is the monitor's current path, valid for the handler's duration.
        let (expensive, constrained) =
            unsafe { (nw_path_is_expensive(path), nw_path_is_constrained(path)) };
        let (metered, value) = macos_meaning(expensive, constrained);
        network.set_os_watch(
            metered,
            OsWatch::Watching {
                api: API.into(),
                value,
            },
        );
    });
    // SAFETY: plain C calls on objects made here; the monitor copies the handler block (so
    // dropping `handler` afterwards is fine) and retains the queue.
    unsafe {
        let queue = dispatch_queue_create(c"dev.weir.network".as_ptr(), std::ptr::null_mut());
        let monitor = nw_path_monitor_create();
        nw_path_monitor_set_queue(monitor, queue);
        nw_path_monitor_set_update_handler(monitor, &handler);
        nw_path_monitor_start(monitor);
        Monitor { monitor, queue }
    }
}
