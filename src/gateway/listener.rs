//! A TLS-only listener for the gateway's two doors (clients, admin). Each accepted connection
//! is checked against the allow-list (the verdict travels with every request as a
//! [`ClientPeer`] extension, so the refusal is a proper 403 problem over TLS), a first byte that
//! is not a TLS handshake gets a plain-text 400 saying to use `https://`, and the handshake is
//! bounded by `limits.header_read_timeout`. With `gateway.proxy_protocol`, a trusted load
//! balancer's PROXY header is read first and the allow-list applies to the client it names
//! (see [`super::proxy_protocol`]). Shutdown drains like the laptop listener.

use super::proxy_protocol::{self as pp, Opening, ProxyHeaderError};
use crate::body::Body;
use crate::config::{Cidr, Limits};
use crate::problem::ProblemKind;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Who sent a request, and whether the allow-list admits them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientPeer {
    pub addr: SocketAddr,
    pub allowed: bool,
}

/// Who may connect: the allow-list, and the load balancers whose PROXY headers are read.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    /// `None`: everyone (the admin listener, which has the token instead).
    pub allow: Option<Arc<Vec<Cidr>>>,
    /// `None`: PROXY headers are refused (`gateway.proxy_protocol` off).
    pub trusted_proxies: Option<Arc<Vec<Cidr>>>,
}

impl Admission {
    fn peer(&self, addr: SocketAddr) -> ClientPeer {
        ClientPeer {
            addr,
            allowed: self
                .allow
                .as_ref()
                .is_none_or(|list| list.iter().any(|n| n.contains(addr.ip()))),
        }
    }
}

pub(crate) async fn serve_tls<H, Fut>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    admission: Admission,
    limits: Limits,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + Unpin + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let builder = Arc::new(crate::server::http_builder(&limits));
    let graceful = crate::server::drain::Drain::new();
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    while let Some((stream, addr)) = crate::server::next_connection(&listener, &mut shutdown).await
    {
        // Over the limit: close at once (no TLS yet, so no problem document can be sent).
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            continue;
        };
        let admission = admission.clone();
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let h = handler.clone();
        let handshake_timeout = limits.header_read_timeout;
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Some((stream, peer)) =
                open(acceptor, stream, addr, &admission, handshake_timeout).await
            else {
                return;
            };
            let hint = crate::server::keep_alive_value(limits.header_read_timeout);
            // The first head's limit and HTTP/2's idle limit, as on the plain listener: a
            // client that finished its handshake and then sent nothing, or left an HTTP/2
            // connection idle, held a gateway slot for as long as it stayed connected.
            let watched = crate::server::Watched::new();
            let conn = crate::server::connection(
                &builder,
                TokioIo::new(stream),
                watched.watching(watcher),
                hint,
                watched.wrap(h),
                Some(peer),
            );
            let result = watched.drive(conn, limits.header_read_timeout, addr).await;
            if let Err(e) = result {
                tracing::debug!(peer = %addr, error = %e, "gateway connection ended with error");
            }
            drop(permit);
        });
    }
    drop(listener);
    crate::server::drain(graceful, limits.drain_timeout, " (gateway)").await;
}

/// The PROXY header (when one may come) and the TLS handshake, or `None` (a plain-HTTP client
/// is told to use TLS, a refused PROXY header is told why).
async fn open(
    acceptor: tokio_rustls::TlsAcceptor,
    mut stream: TcpStream,
    addr: SocketAddr,
    admission: &Admission,
    timeout: Duration,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, ClientPeer)> {
    let trusted = admission.trusted_proxies.as_deref().map(Vec::as_slice);
    let mut client = addr;
    match pp::sniff(&stream, timeout).await? {
        Opening::Tls if pp::is_trusted(trusted, addr) => {
            // No plain answer fits into a TLS handshake: close, and tell the operator.
            tracing::warn!(error = %ProxyHeaderError::Missing(addr.ip()), "gateway connection refused");
            return None;
        }
        Opening::Tls => {}
        Opening::Other => {
            refuse_plain(stream).await;
            return None;
        }
        opening @ (Opening::ProxyV1 | Opening::ProxyV2) => {
            let read = match pp::check_sender(trusted, addr) {
                Ok(()) => pp::read_header(&mut stream, opening, addr, timeout).await,
                Err(e) => Err(e),
            };
            match read {
                Ok(a) => client = a,
                Err(e) => {
                    tracing::debug!(peer = %addr, error = %e, "gateway PROXY header refused");
                    refuse(stream, ProblemKind::BadProxyHeader, &e.to_string()).await;
                    return None;
                }
            }
            match pp::sniff(&stream, timeout).await? {
                Opening::Tls => {}
                _ => {
                    refuse_plain(stream).await;
                    return None;
                }
            }
        }
    }
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some((s, admission.peer(client))),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "gateway TLS handshake failed");
            None
        }
        Err(_) => None,
    }
}

/// A plain-HTTP request to a TLS-only port: a short problem document, then close.
async fn refuse_plain(stream: TcpStream) {
    refuse(stream, ProblemKind::TlsRequired, "this Weir gateway speaks TLS only: use an https:// proxy URL (e.g. HTTPS_PROXY=https://gateway:port); plain HTTP is refused so tokens never cross the network in the clear").await;
}

/// A plain-text 400 problem before any TLS, then close.
async fn refuse(mut stream: TcpStream, kind: ProblemKind, detail: &str) {
    let p = crate::problem::Problem::new(http::StatusCode::BAD_REQUEST, kind, detail);
    let body = serde_json::to_string(&p).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    // Reading the request first would wait on the client; a short write then close is enough.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}
