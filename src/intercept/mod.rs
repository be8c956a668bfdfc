//! TLS interception of the managed https upstreams, and nothing else.
//!
//! A `CONNECT` to a managed `https://` upstream is answered `200`, then the client's TLS is
//! terminated with a leaf from Weir's local, name-constrained CA ([`weir_tls::LeafIssuer`]); the
//! decrypted requests go through the same [`crate::proxy::handle`] pipeline as plain proxy
//! requests, so coalescing, caching and `Cache-Status` apply to HTTPS clients too. Every other
//! `CONNECT` stays a blind byte tunnel (`proxy::tunnel`), never decrypted.
//!
//! # Layout
//! - this file: [`Interceptor`] (the CA and the one shared rustls `ServerConfig`) and the
//!   decision which CONNECTs are intercepted.
//! - [`ca_store`]: the CA's lifecycle: certificate in `<data_dir>/ca/`, private key in the OS
//!   keychain, never on disk.
//! - [`cert_info`]: a readable summary of the CA certificate (`weir ca show`, `weir doctor`).
//! - `serve`: TLS accept and HTTP/1.1 + HTTP/2 serving of one intercepted connection.

pub mod ca_store;
pub mod cert_info;
mod serve;

pub use ca_store::{CaError, CaStore, LoadOutcome};
pub use cert_info::CertInfo;

use crate::body::{empty, Body};
use crate::engine::Shared;
use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use rustls::ServerConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use weir_tls::{LeafIssuer, LocalCa, TlsError};

/// What interception needs at run time: the CA and the server configuration built from it once.
pub struct Interceptor {
    issuer: LeafIssuer,
    server_config: Arc<ServerConfig>,
    connections: AtomicU64,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// Builds the leaf issuer and its rustls `ServerConfig` (ALPN h2, http/1.1) for `ca`.
    pub fn new(ca: Arc<LocalCa>) -> Result<Interceptor, TlsError> {
        let issuer = LeafIssuer::new(ca);
        let server_config = issuer.server_config()?;
        Ok(Interceptor {
            issuer,
            server_config,
            connections: AtomicU64::new(0),
        })
    }

    pub fn ca(&self) -> &LocalCa {
        self.issuer.ca()
    }

    /// Intercepted connections so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Leaf certificates issued so far (one per managed host per day, normally).
    pub fn leaves_issued(&self) -> u64 {
        self.issuer.issued_count()
    }
}

/// The interceptor when a CONNECT to `authority` must be intercepted: interception is on, the
/// CA is loaded, the target is a managed `https://` upstream (host and port), and the CA may
/// issue for it. `None` means: a blind tunnel.
pub fn should_intercept(shared: &Shared, authority: &Authority) -> Option<Arc<Interceptor>> {
    let i = shared.intercept.as_ref()?;
    let port = authority.port_u16()?;
    let host = authority.host();
    let managed = shared.settings.intercept
        && shared.settings.upstream_for("https", host, port).is_some()
        && i.ca().is_managed(host);
    managed.then(|| i.clone())
}

/// Answers the CONNECT with 200 and serves the decrypted connection in the background.
pub fn accept(
    shared: &Arc<Shared>,
    i: Arc<Interceptor>,
    req: Request<Incoming>,
    authority: Authority,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Response<Body> {
    i.connections.fetch_add(1, Ordering::Relaxed);
    let shared = shared.clone();
    let mut stop = shared.stopping.subscribe();
    tokio::spawn(async move {
        let _slot = slot;
        let work = async {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    serve::serve(shared.clone(), upgraded, authority, i.server_config.clone()).await
                }
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
        };
        tokio::select! {
            _ = work => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    });
    Response::new(empty())
}

/// The interceptor the engine runs with: only when `intercept` is on and a CA was loaded. A CA
/// that cannot serve (rustls refuses its config) is logged and leaves interception off.
pub fn interceptor_for(
    settings: &crate::config::Settings,
    ca: Option<Arc<LocalCa>>,
) -> Option<Arc<Interceptor>> {
    let ca = ca.filter(|_| settings.intercept)?;
    match Interceptor::new(ca) {
        Ok(i) => Some(Arc::new(i)),
        Err(e) => {
            tracing::warn!(error = %e, "TLS interception is off: the local CA cannot be used");
            None
        }
    }
}
