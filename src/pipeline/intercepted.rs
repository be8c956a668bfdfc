//! One intercepted connection: the TLS handshake with a leaf for the CONNECT host (made only
//! once the ClientHello names that host), then HTTP/1.1
//! or HTTP/2 (hyper-util's auto builder) whose requests are rewritten to absolute form and handed
//! to the pipeline ([`super::handle`]), exactly like plain proxy requests.

use super::state::Proxy;
use crate::body::{empty, Body};
use crate::intercept::{HandshakeFailure, Interceptor};
use crate::problem::{Problem, ProblemKind};
use http::uri::{Authority, PathAndQuery};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use rustls::server::Acceptor;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::LazyConfigAcceptor;

/// A client gets this long to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers the CONNECT with 200 and serves the decrypted connection in the background.
pub(super) fn accept(
    proxy: &Arc<Proxy>,
    i: Arc<Interceptor>,
    req: Request<Incoming>,
    authority: Authority,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Response<Body> {
    i.count_connection();
    let proxy = proxy.clone();
    let mut stop = proxy.bus.stopping();
    proxy.bus.clone().spawn(async move {
        let _slot = slot;
        let work = async {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => serve(proxy.clone(), upgraded, authority, &i).await,
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

async fn serve(proxy: Arc<Proxy>, upgraded: Upgraded, authority: Authority, i: &Interceptor) {
    // The ClientHello is read first and its server name matched to the CONNECT target before
    // any leaf is made: a client cannot CONNECT to one managed host and speak to another
    // inside, nor make Weir sign a key for every name it cares to send.
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let hello = LazyConfigAcceptor::new(Acceptor::default(), TokioIo::new(upgraded));
    let failed = |cause: HandshakeFailure, error: Option<&std::io::Error>| {
        i.count_failure(cause);
        log_failure(&authority, cause, error);
    };
    let start = match tokio::time::timeout_at(deadline, hello).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return failed(HandshakeFailure::of(&e), Some(&e)),
        Err(_) => return failed(HandshakeFailure::Timeout, None),
    };
    let sni = start.client_hello().server_name().map(str::to_owned);
    // A fully qualified `host.` target is the same host; clients send SNI without the dot.
    let host = authority.host().trim_end_matches('.');
    if !sni
        .as_deref()
        .is_some_and(|s| s.trim_end_matches('.').eq_ignore_ascii_case(host))
    {
        tracing::info!(target = %authority, sni = ?sni, "TLS server name does not match the CONNECT target; closing");
        return i.count_failure(HandshakeFailure::SniMismatch);
    }
    let tls = match tokio::time::timeout_at(deadline, start.into_stream(i.server_config())).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return failed(HandshakeFailure::of(&e), Some(&e)),
        Err(_) => return failed(HandshakeFailure::Timeout, None),
    };
    let base = Base::of(&authority);

    let limits = proxy.settings().limits.clone();
    let builder = crate::server::http_builder(&limits);

    let p = proxy.clone();
    let hint = crate::server::keep_alive_value(limits.header_read_timeout);
    // As on the plain listener (`server::serve`): the first request head must come within
    // header_read_timeout, or an idle connection would hold its CONNECT slot forever.
    let first = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = first.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        seen.store(true, std::sync::atomic::Ordering::Relaxed);
        let version = req.version();
        // Boxed, as `server::connection` boxes the plain listener's: the request's future is
        // kilobytes, and hyper moves it (into an HTTP/2 stream's task, through its states).
        let answer = Box::pin(handle(p.clone(), base.clone(), req));
        let hint = hint.clone();
        async move {
            let mut resp = answer.await?;
            crate::server::fit_to_connection(version, &mut resp, &hint);
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    // Polled again in place when an HTTP/2 answer wakes it (see `server::SelfWakeLoop`).
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let conn = crate::server::SelfWakeLoop::for_protocol(
        h2,
        builder.serve_connection(TokioIo::new(tls), svc),
    );
    let mut stopping = proxy.bus.stopping();
    // The connection's last credential is remembered in its task, as on the plain listener
    // (`identity::per_connection`).
    let first_head = limits.header_read_timeout;
    let target = authority.clone();
    let result = crate::identity::per_connection(async move {
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => return r,
            () = tokio::time::sleep(first_head) => {}
        }
        if !first.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(target = %target, "no request within header_read_timeout; closed");
            return Ok(());
        }
        tokio::select! {
            r = conn.as_mut() => r,
            _ = async { stopping.wait_for(|s| *s).await.map(|_| ()) } => {
                // Shutdown: finish the request in flight, then close (bounded by the engine's
                // drain).
                conn.as_mut().inner().graceful_shutdown();
                conn.await
            }
        }
    })
    .await;
    if let Err(e) = result {
        tracing::debug!(target = %authority, error = %e, "intercepted connection ended with error");
    }
}

/// Only a client's `unknown_ca`/`bad_certificate` alert says it does not trust Weir's CA: that
/// one is a warning with the fix. A client that closed, timed out or disliked something else
/// is no news (probes, cancelled requests, clients retrying): it is logged plainly.
fn log_failure(authority: &Authority, cause: HandshakeFailure, error: Option<&std::io::Error>) {
    if cause == HandshakeFailure::UntrustedCa {
        tracing::warn!(target = %authority, error = ?error.map(ToString::to_string), "a client refused Weir's certificate: it does not trust Weir's CA (see `weir ca install`)");
    } else {
        tracing::debug!(target = %authority, cause = cause.as_str(), error = ?error.map(ToString::to_string), "TLS handshake with a client failed");
    }
}

/// The origin a CONNECT target's requests are rewritten to: `https://host` (or
/// `https://host:port` off 443), parsed once per connection, so a request's absolute URI is
/// put together from parts instead of formatted and parsed again (each request did both).
#[derive(Clone)]
struct Base {
    authority: Authority,
}

impl Base {
    fn of(target: &Authority) -> Base {
        // Without a fully qualified name's final dot: the upstream is named without it.
        let host = target.host().trim_end_matches('.');
        let authority = match target.port_u16() {
            Some(443) | None => Authority::try_from(host),
            Some(port) => Authority::try_from(format!("{host}:{port}")),
        }
        .unwrap_or_else(|_| target.clone());
        Base { authority }
    }

    /// `https://host[:port]` (for the tests).
    #[cfg(test)]
    fn origin(&self) -> String {
        format!("https://{}", self.authority)
    }
}

async fn handle(
    proxy: Arc<Proxy>,
    base: Base,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    match rewrite(req, &base) {
        Ok(req) => Ok(super::handle(proxy, req).await),
        Err(p) => Ok(p.with_base(&proxy.base_url).into_response(None)),
    }
}

/// Puts the request in the absolute form `https://host[:port]/path?query` the pipeline routes
/// by. The host is always the CONNECT target's, whatever the request itself says.
fn rewrite<B>(mut req: Request<B>, base: &Base) -> Result<Request<B>, Box<Problem>> {
    if req.method() == Method::CONNECT {
        return Err(Box::new(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::BadRequest,
            "CONNECT inside an intercepted connection is not allowed",
        )));
    }
    let pq = req
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTPS);
    parts.authority = Some(base.authority.clone());
    parts.path_and_query = Some(pq.clone());
    let uri = Uri::from_parts(parts).map_err(|_| {
        Box::new(Problem::new(
            StatusCode::BAD_REQUEST,
            ProblemKind::BadRequest,
            format!("`{pq}` is not a valid request target"),
        ))
    })?;
    *req.uri_mut() = uri;
    // The client's protocol version is a property of its connection, not of the request: the
    // upstream connection negotiates its own (HTTP/2 or HTTP/1.1).
    *req.version_mut() = Version::HTTP_11;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_drops_the_default_port() {
        assert_eq!(
            Base::of(&"api.github.com:443".parse().unwrap()).origin(),
            "https://api.github.com"
        );
        assert_eq!(
            Base::of(&"api.github.com:8443".parse().unwrap()).origin(),
            "https://api.github.com:8443"
        );
        assert_eq!(
            Base::of(&"api.github.com".parse().unwrap()).origin(),
            "https://api.github.com"
        );
        assert_eq!(
            Base::of(&"api.github.com.:8443".parse().unwrap()).origin(),
            "https://api.github.com:8443",
            "a fully qualified name's final dot is dropped"
        );
    }

    /// The absolute URI put together from parts is the one `https://host[:port]{pq}` parses to.
    #[test]
    fn rewritten_target_is_the_formatted_one() {
        for (target, pq) in [
            ("api.github.com:443", "/agents/sessions?per_page=5&page=1"),
            ("api.github.com:8443", "/"),
            ("[::1]:9443", "/x/y?z"),
        ] {
            let base = Base::of(&target.parse().unwrap());
            let req = Request::builder()
                .uri(pq)
                .version(Version::HTTP_2)
                .body(())
                .unwrap();
            let req = rewrite(req, &base).unwrap();
            let formatted: Uri = format!("{}{pq}", base.origin()).parse().unwrap();
            assert_eq!(req.uri(), &formatted, "{target}{pq}");
            assert_eq!(req.uri().to_string(), formatted.to_string());
            assert_eq!(req.version(), Version::HTTP_11);
        }
    }
}
