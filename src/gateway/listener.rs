//! A TLS-only listener for the gateway's two doors (clients, admin). Each accepted connection
//! is checked against the allow-list (the verdict travels with every request as a
//! [`ClientPeer`] extension, so the refusal is a proper 403 problem over TLS), a first byte that
//! is not a TLS handshake gets a plain-text 400 saying to use `https://`, and the handshake is
//! bounded by `limits.header_read_timeout`. Shutdown drains like the laptop listener.

use crate::body::Body;
use crate::config::{Cidr, Limits};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
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

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

pub(crate) async fn serve_tls<H, Fut>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    allow: Option<Arc<Vec<Cidr>>>,
    limits: Limits,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let builder = Arc::new(crate::server::http_builder(&limits));
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Over the limit: close at once (no TLS yet, so no problem document can be sent).
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let peer = ClientPeer {
            addr,
            allowed: allow
                .as_ref()
                .is_none_or(|list| list.iter().any(|n| n.contains(addr.ip()))),
        };
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let h = handler.clone();
        let handshake_timeout = limits.header_read_timeout;
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Some(stream) = handshake(acceptor, stream, handshake_timeout).await else {
                return;
            };
            let svc = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(peer);
                let fut = h(req);
                async move { Ok::<_, std::convert::Infallible>(fut.await) }
            });
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(peer = %addr, error = %e, "gateway connection ended with error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.drain_timeout) => tracing::warn!("drain timeout reached; closing remaining gateway connections"),
    }
}

/// The TLS handshake, or `None` (a plain-HTTP client is told to use TLS first).
async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => {
            refuse_plain(stream).await;
            return None;
        }
        _ => return None,
    }
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "gateway TLS handshake failed");
            None
        }
        Err(_) => None,
    }
}

/// A plain-HTTP request to a TLS-only port: a short problem document, then close.
async fn refuse_plain(mut stream: TcpStream) {
    let p = crate::problem::Problem::new(
        http::StatusCode::BAD_REQUEST,
        crate::problem::ProblemKind::TlsRequired,
        "this Weir gateway speaks TLS only: use an https:// proxy URL (e.g. HTTPS_PROXY=https://gateway:port); plain HTTP is refused so tokens never cross the network in the clear",
    );
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
