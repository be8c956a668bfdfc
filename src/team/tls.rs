//! TLS to the NATS server: the rustls client configuration the NATS client uses (the OS roots
//! plus `[team] ca_file`, on the ring provider like the rest of Weir), and a diagnosis for when
//! connecting fails. async-nats reports a failed handshake to its event callback only as "IO
//! error" (the cause is dropped), so when a connection attempt fails this module repeats the
//! first steps itself (TCP, the server's `INFO` line, the TLS handshake with the same
//! configuration) and names the cause: "team: NATS TLS handshake failed: invalid peer
//! certificate: UnknownIssuer". It never sends a login or subscribes: it only looks.

use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

/// How long each step of the diagnosis may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(3);
/// The server's `INFO` line is small; anything longer is not a NATS server.
const MAX_INFO: usize = 64 * 1024;

/// The client configuration for `tls://` (and for a `nats://` server that asks for TLS, which
/// async-nats then upgrades to): the OS roots plus `extra` (the `ca_file`'s certificates).
pub(super) fn client_config(extra: &[CertificateDer<'static>]) -> rustls::ClientConfig {
    crate::upstream::roots::client_config_trusting(extra)
}

/// Why connecting to `url` fails, when the cause is TLS: `None` when the handshake works (the
/// failure is elsewhere: login, network) or the server could not be reached at all (the
/// reconnect loop's own message says so).
pub(super) async fn diagnose(
    url: &str,
    wants_tls: bool,
    config: Arc<rustls::ClientConfig>,
) -> Option<String> {
    let addr: async_nats::ServerAddr = url.parse().ok()?;
    let host = addr.host().to_string();
    let tcp = tokio::time::timeout(
        STEP_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), addr.port())),
    )
    .await
    .ok()?
    .ok()?;
    let mut reader = tokio::io::BufReader::new(tcp);
    let mut line = Vec::new();
    let read = tokio::time::timeout(STEP_TIMEOUT, async {
        let mut limited = (&mut reader).take(MAX_INFO as u64);
        limited.read_until(b'\n', &mut line).await
    })
    .await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return None;
    }
    let info = std::str::from_utf8(&line).ok()?.trim();
    let json = info.strip_prefix("INFO")?.trim();
    let info: serde_json::Value = serde_json::from_str(json).ok()?;
    let server_requires = info["tls_required"].as_bool().unwrap_or(false)
        || (wants_tls && info["tls_available"].as_bool().unwrap_or(false));
    if !server_requires {
        return wants_tls.then(|| {
            format!("team: NATS TLS handshake failed: the server at {url} does not offer TLS, but nats_url asks for it (tls://)")
        });
    }
    let name = ServerName::try_from(host.clone()).ok()?;
    let tcp = reader.into_inner();
    let connector = tokio_rustls::TlsConnector::from(config);
    let hint = if wants_tls {
        "check [team] ca_file: it must hold the CA that signed the server's certificate"
    } else {
        "the server requires TLS: use tls:// in [team] nats_url, and [team] ca_file for a private CA"
    };
    match tokio::time::timeout(STEP_TIMEOUT, connector.connect(name, tcp)).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!("team: NATS TLS handshake failed: {e} ({hint})")),
        Err(_) => Some(format!(
            "team: NATS TLS handshake failed: the server did not finish the handshake within {}s",
            STEP_TIMEOUT.as_secs()
        )),
    }
}
