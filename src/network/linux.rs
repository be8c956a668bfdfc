//! Linux: NetworkManager's global `Metered` property (`org.freedesktop.NetworkManager` at
//! `/org/freedesktop/NetworkManager` on the system bus), read at start and again on every
//! `org.freedesktop.DBus.Properties.PropertiesChanged` that names it, and whenever the service
//! appears; when the service goes away the OS value becomes unknown.
//!
//! NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no. NetworkManager's own advice is
//! to treat guess-yes like yes and the rest as not metered; unknown stays unknown here (so the
//! status can say "NetworkManager does not know").
//!
//! No bus, or no NetworkManager, is not an error: the value stays unknown, the status says why,
//! and the watcher tries the bus again. With no socket file at the bus's address (a machine
//! without a system bus: a container, WSL, an SSH remote; or a bus that stopped) it waits for
//! the file to appear, told by the OS ([`super::appears`]): nothing wakes it meanwhile, and a
//! bus that starts is found at once. Any other failure is tried again after [`RETRY_FIRST`],
//! doubling up to [`RETRY_MAX`] (also the fallback when the OS cannot watch for the file).
//! NetworkManager starting later is seen at once through `NameOwnerChanged`. The service is
//! never started by this watcher: its name is checked for an owner before any call, so a read
//! cannot trigger D-Bus activation.

use super::{Network, OsWatch};
use futures_util::StreamExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use zbus::proxy::CacheProperties;

const SERVICE: &str = "org.freedesktop.NetworkManager";
const PATH: &str = "/org/freedesktop/NetworkManager";
const API: &str = "NetworkManager";
/// How long to wait before trying the bus again after it could not be reached or went away:
/// the first time, and at most (doubling in between; back to the first after a connection).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// A bus that accepts the connection but never finishes the handshake must not hold the
/// watcher for ever.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[zbus::proxy(
    interface = "org.freedesktop.NetworkManager",
    default_service = "org.freedesktop.NetworkManager",
    default_path = "/org/freedesktop/NetworkManager"
)]
trait NetworkManager {
    #[zbus(property)]
    fn metered(&self) -> zbus::Result<u32>;
}

/// Which bus to ask: `[network] system_bus_address`, else `WEIR_SYSTEM_BUS_ADDRESS`, else the
/// system bus (zbus reads `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
#[derive(Debug, Clone)]
pub(super) enum BusAddress {
    System,
    Given(String),
}

impl BusAddress {
    pub fn choose(configured: Option<String>) -> BusAddress {
        configured
            .or_else(|| std::env::var("WEIR_SYSTEM_BUS_ADDRESS").ok())
            .filter(|a| !a.trim().is_empty())
            .map_or(BusAddress::System, BusAddress::Given)
    }

    /// The address, for the status line.
    fn shown(&self) -> String {
        match self {
            BusAddress::Given(a) => a.clone(),
            BusAddress::System => std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
                .unwrap_or_else(|_| "unix:path=/var/run/dbus/system_bus_socket".into()),
        }
    }

    /// The socket file the address names, when it is a plain `unix:path=` and no file is
    /// there.
    fn missing_socket(&self) -> Option<PathBuf> {
        let path = PathBuf::from(unix_socket_path(&self.shown())?);
        (!path.exists()).then_some(path)
    }

    async fn connect(&self) -> zbus::Result<zbus::Connection> {
        // No socket, no bus: said without asking zbus, which makes its unix connection on a
        // blocking thread. On a box with no system bus (a container, WSL, an SSH remote) each
        // retry started a thread that lived 10 s: ~7 of an idle Weir's wakeups a minute.
        if let Some(path) = self.missing_socket() {
            return Err(zbus::Error::Failure(format!(
                "no bus socket at {}",
                path.display()
            )));
        }
        let builder = match self {
            BusAddress::System => zbus::connection::Builder::system()?,
            BusAddress::Given(a) => zbus::connection::Builder::address(a.as_str())?,
        };
        tokio::time::timeout(CONNECT_TIMEOUT, builder.build())
            .await
            .map_err(|_| zbus::Error::Failure("the bus did not answer the handshake".into()))?
    }
}

/// The socket file of an address that is one plain `unix:path=…` and nothing else (no
/// options, no alternatives, no escapes); `None` for any other, which zbus reads.
fn unix_socket_path(address: &str) -> Option<&str> {
    let path = address.strip_prefix("unix:path=")?;
    (!path.is_empty() && !path.contains([',', ';', '%'])).then_some(path)
}

/// What an NMMetered value means for policy, and its name.
fn meaning(v: u32) -> (Option<bool>, String) {
    match v {
        0 => (None, "unknown".into()),
        1 => (Some(true), "yes".into()),
        2 => (Some(false), "no".into()),
        3 => (Some(true), "guess-yes".into()),
        4 => (Some(false), "guess-no".into()),
        n => (None, format!("{n} (not a known NMMetered value)")),
    }
}

/// Keeps `network`'s OS value current until the engine stops.
pub(super) async fn watch(
    network: Arc<Network>,
    address: BusAddress,
    mut stop: watch::Receiver<bool>,
) {
    let mut retry = RETRY_FIRST;
    loop {
        let (error, connected) = tokio::select! {
            e = follow(&network, &address) => e,
            _ = stop.wait_for(|s| *s) => return,
        };
        if connected {
            retry = RETRY_FIRST;
        }
        tracing::debug!(address = %address.shown(), error = %error, "network: no system bus");
        network.set_os_watch(
            None,
            OsWatch::NoBus {
                address: address.shown(),
                error: error.to_string(),
            },
        );
        let missing = address.missing_socket();
        let appeared = tokio::select! {
            a = before_retry(missing.as_deref(), retry) => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        retry = if appeared {
            RETRY_FIRST
        } else {
            (retry * 2).min(RETRY_MAX)
        };
    }
}

/// Until the bus is worth trying again: a missing socket file until it appears (the OS says
/// when; no timer runs meanwhile), anything else for `retry`. `true` when the socket appeared.
async fn before_retry(missing: Option<&Path>, retry: Duration) -> bool {
    if let Some(path) = missing {
        match super::appears::exists(path).await {
            Ok(()) => return true,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "network: cannot watch for the bus socket; trying the bus again on a timer");
            }
        }
    }
    tokio::time::sleep(retry).await;
    false
}

/// Follows NetworkManager on one connection; returns why the bus could not be used (or went
/// away), and whether a connection was made at all.
async fn follow(network: &Network, address: &BusAddress) -> (zbus::Error, bool) {
    let mut connected = false;
    let run = async {
        let conn = address.connect().await?;
        connected = true;
        let nm = NetworkManagerProxy::builder(&conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await?;
        let props = zbus::fdo::PropertiesProxy::builder(&conn)
            .destination(SERVICE)?
            .path(PATH)?
            .cache_properties(CacheProperties::No)
            .build()
            .await?;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
        // Subscribed before the first read, so a change between the two is not missed.
        let mut owners = nm.inner().receive_owner_changed().await?;
        let mut changes = props.receive_properties_changed().await?;
        let running = dbus
            .name_has_owner(SERVICE.try_into().map_err(zbus::Error::from)?)
            .await?;
        if running {
            read(network, &nm).await;
        } else {
            not_running(network, "the name has no owner".into());
        }
        loop {
            tokio::select! {
                o = owners.next() => match o {
                    None => break,
                    Some(Some(_)) => read(network, &nm).await,
                    Some(None) => not_running(network, "it left the bus".into()),
                },
                c = changes.next() => match c {
                    None => break,
                    Some(signal) => {
                        let Ok(args) = signal.args() else { continue };
                        let ours = args.interface_name().as_str() == SERVICE;
                        let named = args.changed_properties().contains_key("Metered")
                            || args.invalidated_properties().contains(&"Metered");
                        if ours && named {
                            read(network, &nm).await;
                        }
                    }
                },
            }
        }
        Ok::<_, zbus::Error>(zbus::Error::Failure("the bus connection closed".into()))
    };
    let error = run.await.unwrap_or_else(|e| e);
    (error, connected)
}

async fn read(network: &Network, nm: &NetworkManagerProxy<'_>) {
    match nm.metered().await {
        Ok(v) => {
            let (metered, value) = meaning(v);
            network.set_os_watch(
                metered,
                OsWatch::Watching {
                    api: API.into(),
                    value,
                },
            );
        }
        Err(e) => not_running(network, e.to_string()),
    }
}

fn not_running(network: &Network, error: String) {
    network.set_os_watch(
        None,
        OsWatch::NoService {
            service: API.into(),
            error,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guess_yes_counts_as_metered_and_unknown_stays_unknown() {
        assert_eq!(meaning(1).0, Some(true));
        assert_eq!(meaning(3), (Some(true), "guess-yes".to_string()));
        assert_eq!(meaning(2).0, Some(false));
        assert_eq!(meaning(4).0, Some(false));
        assert_eq!(meaning(0).0, None);
        assert_eq!(meaning(9).0, None);
    }

    #[test]
    fn only_a_plain_unix_path_is_read_here() {
        assert_eq!(
            unix_socket_path("unix:path=/run/dbus/s"),
            Some("/run/dbus/s")
        );
        assert_eq!(unix_socket_path("unix:path=/a,guid=1"), None);
        assert_eq!(unix_socket_path("unix:path=/a;tcp:host=x"), None);
        assert_eq!(unix_socket_path("unix:path=/a%20b"), None);
        assert_eq!(unix_socket_path("unix:abstract=x"), None);
        assert_eq!(unix_socket_path("unix:path="), None);
    }

    #[tokio::test]
    async fn a_missing_socket_is_said_without_zbus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-bus");
        let address = BusAddress::Given(format!("unix:path={}", path.display()));
        let e = address.connect().await.unwrap_err().to_string();
        assert!(
            e.contains("no bus socket at") && e.contains("no-bus"),
            "{e}"
        );
    }

    /// #32 item 4: with no bus socket the watcher waits for the file, not on a timer: it is
    /// seen as soon as it appears, long before the retry it would otherwise have slept.
    #[tokio::test]
    async fn a_missing_socket_is_waited_for_not_polled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dbus/system_bus_socket");
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { before_retry(Some(&path), Duration::from_secs(3600)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished());
        std::fs::create_dir(dir.path().join("dbus")).unwrap();
        std::fs::write(&path, b"").unwrap();
        let appeared = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("seen when it appeared, not after the hour's retry")
            .unwrap();
        assert!(appeared);
    }

    /// Any other failure (here: no socket path to wait for) keeps the timed retry.
    #[tokio::test(start_paused = true)]
    async fn other_failures_are_retried_on_the_timer() {
        let start = tokio::time::Instant::now();
        assert!(!before_retry(None, Duration::from_secs(8)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(8));
    }

    #[test]
    fn the_configured_address_wins() {
        assert!(matches!(
            BusAddress::choose(Some("unix:path=/tmp/x".into())),
            BusAddress::Given(a) if a == "unix:path=/tmp/x"
        ));
    }
}
