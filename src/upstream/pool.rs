//! How Weir's own upstream connections are made: a connector that honours each upstream's
//! `connect_to` (TCP elsewhere, SNI/Host unchanged) and the top-level `upstream_proxy` (HTTP
//! CONNECT chaining), and a certificate verifier that adds an upstream's `ca_file` roots to the
//! platform roots for that upstream's host only. Both plug into the one pooled client of
//! [`crate::upstream::UpstreamClient`].

use crate::body::BoxError;
use crate::config::{HostPort, Settings};
use crate::upstream::resolve::Resolver;
use crate::upstream::roots::{platform_roots, provider};
use crate::upstream::UpstreamClient;
use http::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tower_service::Service;

/// One `connect_to` override: requests for `scheme://host:port` connect to `to`.
#[derive(Debug, Clone)]
struct Route {
    scheme: &'static str,
    host: String,
    port: u16,
    to: HostPort,
}

/// The TCP half of the upstream connector (TLS is layered on top by hyper-rustls).
#[derive(Clone)]
pub struct RoutingConnector {
    http: HttpConnector<Resolver>,
    routes: Arc<Vec<Route>>,
    proxy: Option<Uri>,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, BoxError>> + Send>>;

impl RoutingConnector {
    /// The overrides of `settings`: every upstream's `connect_to`, and `upstream_proxy`.
    pub fn for_settings(http: HttpConnector<Resolver>, settings: &Settings) -> RoutingConnector {
        let routes = settings
            .upstreams
            .iter()
            .filter_map(|u| {
                let to = u.net.connect_to.clone()?;
                let scheme = if u.origin.scheme().as_str() == "https" {
                    "https"
                } else {
                    "http"
                };
                Some(Route {
                    scheme,
                    host: u.origin.host().to_string(),
                    port: u.origin.port(),
                    to,
                })
            })
            .collect();
        let proxy = settings
            .upstream_proxy
            .as_ref()
            .and_then(|p| p.uri().parse::<Uri>().ok());
        RoutingConnector {
            http,
            routes: Arc::new(routes),
            proxy,
        }
    }

    /// TCP to `host:port` for a client's blind CONNECT tunnel: to a managed upstream's
    /// `connect_to` if it has one, else through `upstream_proxy` if set, else directly.
    pub fn connect_tunnel(&self, host: &str, port: u16) -> Connecting {
        let to = self
            .routes
            .iter()
            .find(|r| r.host.eq_ignore_ascii_case(host) && r.port == port)
            .map(|r| r.to.clone());
        let hp = to.unwrap_or_else(|| HostPort {
            host: host.to_string(),
            port,
        });
        // The scheme only selects the route (none for a connect_to target, already applied).
        let mut me = RoutingConnector {
            http: self.http.clone(),
            routes: Arc::new(Vec::new()),
            proxy: self.proxy.clone(),
        };
        if hp.host != host || hp.port != port {
            me.proxy = None;
        }
        let target = format!("http://{hp}");
        Box::pin(async move {
            let uri: Uri = target.parse()?;
            me.call(uri).await
        })
    }

    fn route(&self, scheme: &str, host: &str, port: u16) -> Option<&HostPort> {
        self.routes
            .iter()
            .find(|r| {
                r.scheme.eq_ignore_ascii_case(scheme)
                    && r.host.eq_ignore_ascii_case(host)
                    && r.port == port
            })
            .map(|r| &r.to)
    }
}

/// The TLS connector over [`RoutingConnector`] as hyper-util's client keeps it: shared, and
/// copied only for a connect. hyper-util clones its connector for every request (a connect is
/// made ready lazily beside each pool checkout), and a copy of this one is five reference
/// counts and a resolver, each taken and given back again: ~0.29k instructions of every
/// pass-through request (callgrind), for a connect a pooled connection never makes. A connect
/// gets its own copy, as before, made when it is first asked whether it is ready.
pub struct SharedConnector {
    inner: Arc<hyper_rustls::HttpsConnector<RoutingConnector>>,
    /// This connect's own copy (`None` until it is asked for).
    own: Option<hyper_rustls::HttpsConnector<RoutingConnector>>,
}

impl SharedConnector {
    fn new(inner: hyper_rustls::HttpsConnector<RoutingConnector>) -> SharedConnector {
        SharedConnector {
            inner: Arc::new(inner),
            own: None,
        }
    }

    fn own(&mut self) -> &mut hyper_rustls::HttpsConnector<RoutingConnector> {
        let inner = &self.inner;
        self.own.get_or_insert_with(|| (**inner).clone())
    }
}

impl Clone for SharedConnector {
    fn clone(&self) -> SharedConnector {
        SharedConnector {
            inner: self.inner.clone(),
            own: None,
        }
    }
}

impl Service<Uri> for SharedConnector {
    type Response = <hyper_rustls::HttpsConnector<RoutingConnector> as Service<Uri>>::Response;
    type Error = <hyper_rustls::HttpsConnector<RoutingConnector> as Service<Uri>>::Error;
    type Future = <hyper_rustls::HttpsConnector<RoutingConnector> as Service<Uri>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.own().poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // The copy made ready (hyper-util asks first), or one made now.
        let mut own = self.own.take().unwrap_or_else(|| (*self.inner).clone());
        own.call(dst)
    }
}

impl Service<Uri> for RoutingConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Connecting {
        let scheme = dst.scheme_str().unwrap_or("http").to_ascii_lowercase();
        let default_port = if scheme == "https" { 443 } else { 80 };
        let host = dst
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_string();
        let port = dst.port_u16().unwrap_or(default_port);
        let mut http = self.http.clone();
        // A connect_to target is reached directly, even with an upstream proxy: it is a local
        // stand-in for the origin (a mirror, a test server), not a place on the internet.
        if let Some(to) = self.route(&scheme, &host, port) {
            let target = format!("http://{to}");
            return Box::pin(async move {
                let uri: Uri = target.parse()?;
                http.call(uri).await.map_err(Into::into)
            });
        }
        if let Some(proxy) = &self.proxy {
            // Always with an explicit port: hyper-util's tunnel assumes 443 when there is none.
            let hp = HostPort { host, port };
            let target = format!("{scheme}://{hp}");
            let mut tunnel = Tunnel::new(proxy.clone(), http);
            return Box::pin(async move {
                let uri: Uri = target.parse()?;
                tunnel.call(uri).await.map_err(Into::into)
            });
        }
        Box::pin(async move { http.call(dst).await.map_err(Into::into) })
    }
}

/// Platform roots for every host, plus extra roots for the hosts of upstreams with `ca_file`.
#[derive(Debug)]
struct PerHostVerifier {
    /// `None` when the platform has no roots at all: every non-extra host then fails to verify.
    default: Option<Arc<WebPkiServerVerifier>>,
    by_host: Vec<(String, Arc<WebPkiServerVerifier>)>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PerHostVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let special = match server_name {
            ServerName::DnsName(d) => self
                .by_host
                .iter()
                .find(|(h, _)| h.eq_ignore_ascii_case(d.as_ref()))
                .map(|(_, v)| v),
            _ => None,
        };
        match special.or(self.default.as_ref()) {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn verifier(roots: RootCertStore) -> Option<Arc<WebPkiServerVerifier>> {
    match WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "cannot build a certificate verifier");
            None
        }
    }
}

/// The client TLS configuration for `settings`: platform roots, plus `ca_file` roots per host.
pub fn client_tls(settings: &Settings) -> rustls::ClientConfig {
    let platform = platform_roots();
    let mut by_host: Vec<(String, Arc<WebPkiServerVerifier>)> = Vec::new();
    for u in settings
        .upstreams
        .iter()
        .filter(|u| !u.net.extra_roots.is_empty())
    {
        let mut roots = platform.clone();
        // Another upstream on the same host may have brought roots too: trust both.
        for other in settings
            .upstreams
            .iter()
            .filter(|o| o.origin.host() == u.origin.host())
        {
            roots.add_parsable_certificates(other.net.extra_roots.iter().cloned());
        }
        if by_host.iter().all(|(h, _)| *h != u.origin.host()) {
            if let Some(v) = verifier(roots) {
                by_host.push((u.origin.host().to_string(), v));
            }
        }
    }
    let provider = provider();
    let verifier = PerHostVerifier {
        default: verifier(platform),
        by_host,
        algorithms: provider.signature_verification_algorithms,
    };
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        })
        .unwrap_or_else(|e| unreachable!("ring supports the default protocol versions: {e}"))
}

/// The TCP connector every upstream connection starts from; `refuse_private` makes its one
/// lookup refuse names that resolve to private addresses (connections Weir makes for hosts it
/// does not manage).
pub fn http_connector(refuse_private: bool) -> HttpConnector<Resolver> {
    let mut http = HttpConnector::new_with_resolver(Resolver { refuse_private });
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    http.set_nodelay(true);
    http
}

impl UpstreamClient {
    /// The pooled client with the overrides of `settings` (`connect_to`, `ca_file`,
    /// `upstream_proxy`).
    pub fn for_settings(settings: &Settings) -> UpstreamClient {
        UpstreamClient::build(settings, http_connector(false))
    }

    /// The client for requests to hosts Weir does not manage: no `connect_to` routes, and
    /// unless `allow_private_targets` (or an `upstream_proxy`, which resolves names itself),
    /// its lookup refuses private addresses, so the addresses checked are the ones connected to.
    pub fn for_unmanaged(settings: &Settings) -> UpstreamClient {
        let refuse = !settings.allow_private_targets && settings.upstream_proxy.is_none();
        let mut unrouted = settings.clone();
        for u in &mut unrouted.upstreams {
            u.net.connect_to = None;
        }
        UpstreamClient::build(&unrouted, http_connector(refuse))
    }

    fn build(settings: &Settings, http: HttpConnector<Resolver>) -> UpstreamClient {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_tls(settings))
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(RoutingConnector::for_settings(http, settings));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(SharedConnector::new(https));
        UpstreamClient { client }
    }
}
