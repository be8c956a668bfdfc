//! TLS interception of the managed https upstreams, and nothing else.
//!
//! A `CONNECT` to a managed `https://` upstream is answered `200`, then the client's TLS is
//! terminated with a leaf from Weir's local, name-constrained CA ([`weir_tls::LeafIssuer`]); the
//! decrypted requests go through the same request pipeline as plain proxy requests
//! (`pipeline::intercepted`), so coalescing, caching and `Cache-Status` apply to HTTPS clients
//! too. Every other `CONNECT` stays a blind byte tunnel (`pipeline::tunnel`), never decrypted.
//!
//! # Layout
//! - this file: [`Interceptor`] (the CA and the one shared rustls `ServerConfig`) and the
//!   decision which CONNECTs are intercepted.
//! - [`ca_store`]: the CA's lifecycle: certificate in `<data_dir>/ca/`, private key in the OS
//!   keychain (or, with no keychain, the owner-only file store), never beside the certificate.
//! - [`cert_info`]: a readable summary of the CA certificate (`weir ca show`, `weir doctor`).

pub mod ca_store;
pub mod cert_info;

pub use ca_store::{CaError, CaStore, LoadOutcome};
pub use cert_info::CertInfo;

use http::uri::Authority;
use rustls::ServerConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_tls::{LeafIssuer, LocalCa, TlsError};

/// What interception needs at run time: the CA and the server configuration built from it once.
pub struct Interceptor {
    issuer: LeafIssuer,
    server_config: Arc<ServerConfig>,
    connections: AtomicU64,
    /// The CA certificate clients must trust, named in the hints of the log.
    ca_cert: CaCertificate,
    /// Failed client handshakes, by [`HandshakeFailure`] (its index).
    failures: [AtomicU64; HandshakeFailure::ALL.len()],
    /// When the `closed_after_certificate` hint was last logged, per target host
    /// ([`Interceptor::hint_due`]). Only intercepted (managed) hosts: a few entries.
    hinted: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

/// The CA certificate clients must trust for interception, and so how they come to trust it:
/// the hints of the log name the file, and `weir ca install` only where it installs that CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaCertificate {
    /// This install's own CA (`<data_dir>/ca/weir-ca.pem`), which `weir ca install` trusts.
    Own(std::path::PathBuf),
    /// A team gateway's CA (the one `[gateway] intercept_ca_cert_file` names, else the
    /// replica's own), which the team hands out to the gateway's clients. `weir ca install` on
    /// a client would install that client's own CA, not this one.
    Gateway(std::path::PathBuf),
}

impl CaCertificate {
    /// The fix a hint names for a client that does not trust the CA.
    pub(crate) fn how_to_trust(&self) -> String {
        match self {
            CaCertificate::Own(path) => format!(
                "NODE_EXTRA_CA_CERTS={} for Node and VS Code, or `weir ca install`",
                path.display()
            ),
            CaCertificate::Gateway(path) => format!(
                "NODE_EXTRA_CA_CERTS={} for Node and VS Code, or the system's trust store: this is the team gateway's CA, handed out to its clients (a client's own `weir ca` installs its own CA, not this one)",
                path.display()
            ),
        }
    }
}

/// The `closed_after_certificate` hint is logged once per this long per host.
const HINT_EVERY: Duration = Duration::from_secs(60);

/// Why a client's TLS handshake with Weir failed: only the first says the client does not
/// trust Weir's CA. [`HandshakeFailure::ClosedAfterCertificate`] may also be a handshake that
/// finished: it is counted with these because it is what a Node client that does not trust
/// the CA does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The client sent an `unknown_ca` or `bad_certificate` alert: it does not trust the CA.
    UntrustedCa,
    /// The client sent another alert (a protocol or version it does not like, say).
    Alert,
    /// The client closed (or reset) its connection before Weir sent its certificate (during
    /// its ClientHello).
    Closed,
    /// The client closed (or reset) its connection, with no TLS alert and no request, after
    /// Weir sent its certificate: during the rest of the handshake, or right after it. Node
    /// (so VS Code) does this when it does not trust Weir's CA: it checks the certificate
    /// itself and drops the socket, with no alert (Node 20 before its `Finished` reaches
    /// Weir). A client that gave up or did not need its connection after all does the same:
    /// a hint, not proof.
    ClosedAfterCertificate,
    /// The ClientHello named another host than the CONNECT target: Weir closed.
    SniMismatch,
    /// The handshake did not finish in time.
    Timeout,
    /// Anything else (a malformed message, a failure on Weir's side).
    Other,
}

impl HandshakeFailure {
    pub const ALL: [HandshakeFailure; 7] = [
        HandshakeFailure::UntrustedCa,
        HandshakeFailure::Alert,
        HandshakeFailure::Closed,
        HandshakeFailure::ClosedAfterCertificate,
        HandshakeFailure::SniMismatch,
        HandshakeFailure::Timeout,
        HandshakeFailure::Other,
    ];

    /// The name in the status and the `cause` label of the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::UntrustedCa => "untrusted_ca",
            HandshakeFailure::Alert => "alert",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::ClosedAfterCertificate => "closed_after_certificate",
            HandshakeFailure::SniMismatch => "sni_mismatch",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Other => "other",
        }
    }

    /// The cause of a failed handshake, from the I/O error tokio-rustls gives (rustls' own
    /// error inside it, or the socket's).
    pub fn of(e: &std::io::Error) -> HandshakeFailure {
        use rustls::AlertDescription as A;
        use std::io::ErrorKind as K;
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::AlertReceived(A::UnknownCA | A::BadCertificate)) => {
                HandshakeFailure::UntrustedCa
            }
            Some(rustls::Error::AlertReceived(_)) => HandshakeFailure::Alert,
            Some(_) => HandshakeFailure::Other,
            None => match e.kind() {
                K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
                    HandshakeFailure::Closed
                }
                _ => HandshakeFailure::Other,
            },
        }
    }
}

/// What interception did so far (`interception` in the status).
#[derive(Debug, Clone, serde::Serialize)]
pub struct InterceptionStatus {
    /// CONNECTs to managed hosts answered for interception.
    pub connections: u64,
    /// Leaf certificates issued (one per managed host per day, normally).
    pub leaves_issued: u64,
    /// Failed client handshakes by cause (`untrusted_ca`, `alert`, `closed`,
    /// `closed_after_certificate`, `sni_mismatch`, `timeout`, `other`); every cause is listed,
    /// with 0 when none.
    pub handshake_failures: std::collections::BTreeMap<&'static str, u64>,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// Builds the leaf issuer and its rustls `ServerConfig` (ALPN h2, http/1.1) for `ca`, whose
    /// certificate is `ca_cert` (for the hints of the log).
    pub fn new(ca: Arc<LocalCa>, ca_cert: CaCertificate) -> Result<Interceptor, TlsError> {
        // Exactly the managed hosts, plus the Copilot API hosts learned at run time (the CA's
        // `githubcopilot.com` constraint covers them; `should_intercept` decides which).
        let issuer = LeafIssuer::with_subdomains_of(ca, &[crate::config::COPILOT_DOMAIN]);
        let server_config = issuer.server_config()?;
        Ok(Interceptor {
            issuer,
            server_config,
            connections: AtomicU64::new(0),
            ca_cert,
            failures: Default::default(),
            hinted: Default::default(),
        })
    }

    pub fn ca(&self) -> &LocalCa {
        self.issuer.ca()
    }

    /// The CA certificate clients must trust.
    pub fn ca_cert(&self) -> &CaCertificate {
        &self.ca_cert
    }

    pub(crate) fn count_connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config.clone()
    }

    /// Intercepted connections so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Leaf certificates issued so far (one per managed host per day, normally).
    pub fn leaves_issued(&self) -> u64 {
        self.issuer.issued_count()
    }

    pub(crate) fn count_failure(&self, cause: HandshakeFailure) {
        self.failures[cause as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the `closed_after_certificate` hint for `host` is to be logged now: once per
    /// [`HINT_EVERY`] per host. A client retrying in a loop, or Chromium's (Electron's)
    /// pre-connects it never uses, close like this once per connection: a line each would
    /// bury the log. The count still counts every one.
    pub(crate) fn hint_due(&self, host: &str) -> bool {
        self.hint_due_at(host, Instant::now())
    }

    fn hint_due_at(&self, host: &str, now: Instant) -> bool {
        let mut hinted = self
            .hinted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match hinted.get_mut(host) {
            Some(last) if now.saturating_duration_since(*last) < HINT_EVERY => false,
            Some(last) => {
                *last = now;
                true
            }
            None => {
                hinted.insert(host.to_string(), now);
                true
            }
        }
    }

    /// The counts for the status document.
    pub fn status(&self) -> InterceptionStatus {
        InterceptionStatus {
            connections: self.connections(),
            leaves_issued: self.leaves_issued(),
            handshake_failures: HandshakeFailure::ALL
                .iter()
                .map(|c| {
                    (
                        c.as_str(),
                        self.failures[*c as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
        }
    }
}

/// Whether a CONNECT to `authority` must be intercepted: `managed` says whether Weir manages
/// `https://authority` (a configured upstream, or a Copilot API host learned at run time), and
/// the CA must be allowed to issue for the host. Otherwise: a blind tunnel.
pub(crate) fn should_intercept(
    i: &Interceptor,
    settings: &crate::config::Settings,
    authority: &Authority,
    managed: impl Fn(&str, u16) -> bool,
) -> bool {
    let Some(port) = authority.port_u16() else {
        return false;
    };
    let host = authority.host();
    settings.intercept && managed(host, port) && i.issuer.covers(host)
}

/// The interceptor the engine runs with: only when `intercept` is on and a CA was loaded.
/// `ca_cert` is that CA's certificate, which hints tell clients to trust (the install's
/// `ca/weir-ca.pem`, or a gateway's `intercept_ca_cert_file`). A CA that cannot serve
/// (rustls refuses its config) is logged and leaves interception off.
pub fn interceptor_for(
    settings: &crate::config::Settings,
    ca: Option<Arc<LocalCa>>,
    ca_cert: CaCertificate,
) -> Option<Arc<Interceptor>> {
    let ca = ca.filter(|_| settings.intercept)?;
    match Interceptor::new(ca, ca_cert) {
        Ok(i) => Some(Arc::new(i)),
        Err(e) => {
            tracing::warn!(error = %e, "TLS interception is off: the local CA cannot be used");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `closed_after_certificate` hint: once a minute per host, each host on its own.
    #[test]
    fn the_hint_is_due_once_a_minute_per_host() {
        let hosts = vec!["api.githubcopilot.com".to_string()];
        let ca = LocalCa::generate(&hosts, weir_tls::OffsetDateTime::now_utc()).unwrap();
        let i = Interceptor::new(Arc::new(ca), CaCertificate::Own("weir-ca.pem".into())).unwrap();
        let t = Instant::now();
        let a = "api.githubcopilot.com";
        let b = "api.github.com";
        assert!(i.hint_due_at(a, t));
        assert!(!i.hint_due_at(a, t), "a second close at once");
        assert!(!i.hint_due_at(a, t + Duration::from_secs(59)));
        assert!(
            i.hint_due_at(b, t + Duration::from_secs(59)),
            "another host"
        );
        assert!(
            i.hint_due_at(a, t + Duration::from_secs(60)),
            "a minute later"
        );
        assert!(!i.hint_due_at(a, t + Duration::from_secs(61)));
    }
}
