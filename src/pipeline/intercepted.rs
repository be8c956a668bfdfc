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
    let (mark, life) = crate::server::TunnelOpened::new();
    proxy.bus.clone().spawn(async move {
        let _slot = slot;
        // Held while the connection inside runs: its HTTP/2 stream counts as open until then.
        let _life = life;
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
    let mut resp = Response::new(empty());
    resp.extensions_mut().insert(mark);
    resp
}

async fn serve(proxy: Arc<Proxy>, upgraded: Upgraded, authority: Authority, i: &Interceptor) {
    // The ClientHello is read first and its server name matched to the CONNECT target before
    // any leaf is made: a client cannot CONNECT to one managed host and speak to another
    // inside, nor make Weir sign a key for every name it cares to send.
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let hello = LazyConfigAcceptor::new(Acceptor::default(), TokioIo::new(upgraded));
    let failed = |cause: HandshakeFailure, error: Option<&std::io::Error>| {
        i.count_failure(cause);
        log_failure(i, &authority, cause, error);
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
        // Weir's first flight, its certificate with it, went out before anything more was
        // read: a close from here on is one after the certificate.
        Ok(Err(e)) => return failed(after_certificate(HandshakeFailure::of(&e)), Some(&e)),
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
    // Negotiated in the handshake: HTTP/2's streams are counted for its idle limit
    // (`server::idle`), HTTP/1's is hyper's own.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let activity = h2.then(crate::server::idle::Activity::new);
    let streams = activity.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        seen.store(true, std::sync::atomic::Ordering::Relaxed);
        let version = req.version();
        let open = streams.as_ref().map(|a| a.open());
        // Small, as the plain listener's is (`server::connection`): a fresh cache hit is
        // answered at once, and what waits is boxed by the pipeline (`pipeline::Handled`).
        let answer = handle(p.clone(), &base, req);
        let hint = hint.clone();
        async move {
            let mut resp = answer.await;
            crate::server::fit_to_connection(version, &mut resp, &hint);
            Ok::<_, std::convert::Infallible>(crate::server::idle::track(resp, open))
        }
    });
    // Polled again in place when an HTTP/2 answer wakes it (see `server::SelfWakeLoop`); on
    // HTTP/2 the answers of one poll leave in one write (`server::cork`).
    let (io, cork) = crate::server::cork::for_protocol(h2, tls);
    let conn = crate::server::SelfWakeLoop::for_protocol(
        h2,
        builder.serve_connection(TokioIo::new(io), svc),
    )
    .corked(cork);
    let mut stopping = proxy.bus.stopping();
    // The connection's last credential is remembered in its task, and its timers are reused
    // there (hyper's header-read timer, an attempt's per-try timeout), as on the plain
    // listener (`identity::per_connection`: one scope for both).
    let limit = limits.header_read_timeout;
    let target = authority.clone();
    let any_request = first.clone();
    let ended = crate::identity::per_connection(async move {
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => return Ended::Closed(r),
            () = tokio::time::sleep(limit) => {}
        }
        if !first.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(target = %target, "no request within header_read_timeout; closed");
            return Ended::NoRequestInTime;
        }
        let idle = async {
            match &activity {
                Some(a) => a.idle(limit).await,
                None => std::future::pending().await,
            }
        };
        Ended::Closed(tokio::select! {
            r = conn.as_mut() => r,
            () = idle => {
                // HTTP/2 with no stream open for header_read_timeout, HTTP/1's idle limit:
                // GOAWAY, then close. h2's graceful close waits for the client to answer a
                // PING (and for the streams it opens meanwhile): a client that reads nothing
                // more would hold the connection and its CONNECT slot. It gets one more limit
                // with no stream open (a stream opened meanwhile is served whole), then the
                // connection is dropped.
                tracing::debug!(target = %target, "HTTP/2 connection idle for header_read_timeout; closing");
                conn.as_mut().inner().graceful_shutdown();
                let goaway = tokio::time::Instant::now();
                let unanswered = async {
                    match &activity {
                        Some(a) => a.idle_after(goaway, limit).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = conn.as_mut() => r,
                    () = unanswered => {
                        tracing::debug!(target = %target, "HTTP/2 client did not finish its close within header_read_timeout of the GOAWAY; dropped");
                        Ok(())
                    }
                }
            }
            _ = async { stopping.wait_for(|s| *s).await.map(|_| ()) } => {
                // Shutdown: finish the request in flight, then close (bounded by the engine's
                // drain).
                conn.as_mut().inner().graceful_shutdown();
                conn.await
            }
        })
    })
    .await;
    let Ended::Closed(result) = ended else {
        return;
    };
    if !any_request.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(cause) = closed_before_request(&result) {
            return failed(cause, None);
        }
    }
    if let Err(e) = result {
        tracing::debug!(target = %authority, error = %e, "intercepted connection ended with error");
    }
}

/// A close (no alert) once Weir sent its certificate is [`HandshakeFailure::ClosedAfterCertificate`].
fn after_certificate(cause: HandshakeFailure) -> HandshakeFailure {
    match cause {
        HandshakeFailure::Closed => HandshakeFailure::ClosedAfterCertificate,
        other => other,
    }
}

/// How an intercepted connection's task ended.
enum Ended {
    /// The connection ended (the client closed, or Weir after an answer, an idle limit or at
    /// shutdown).
    Closed(Result<(), Box<dyn std::error::Error + Send + Sync>>),
    /// Weir closed it: no request head within `header_read_timeout`.
    NoRequestInTime,
}

/// Why a connection whose handshake finished ended before its first request, when that is the
/// client's doing: it closed (or reset) with no alert
/// ([`HandshakeFailure::ClosedAfterCertificate`]), or it sent an alert after all (counted by
/// the alert, as during the handshake). `None` for a connection that ended otherwise (a
/// malformed request head, say): not a handshake matter.
fn closed_before_request(
    result: &Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> Option<HandshakeFailure> {
    let e = match result {
        Ok(()) => return Some(HandshakeFailure::ClosedAfterCertificate),
        Err(e) => e,
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match after_certificate(HandshakeFailure::of(io)) {
                HandshakeFailure::Other => None,
                cause => Some(cause),
            };
        }
        source = err.source();
    }
    None
}

/// Only a client's `unknown_ca`/`bad_certificate` alert says it does not trust Weir's CA: that
/// one is a warning with the fix. A client that closed after Weir's certificate, with no alert
/// and no request, is what Node (VS Code) does when it does not trust the CA, but also what a
/// client that gave up or did not need its connection does: an info line that says both, with
/// the fix, once a minute per host. A client that closed, timed out or disliked something else
/// is no news (probes, cancelled requests, clients retrying): it is logged plainly.
fn log_failure(
    i: &Interceptor,
    authority: &Authority,
    cause: HandshakeFailure,
    error: Option<&std::io::Error>,
) {
    let error = error.map(ToString::to_string);
    match cause {
        HandshakeFailure::UntrustedCa => {
            tracing::warn!(target = %authority, ?error, "a client refused Weir's certificate: it does not trust Weir's CA. Trust it: {}", i.ca_cert().how_to_trust());
        }
        // Once a minute per host at most: a client retrying in a loop, or Chromium's
        // pre-connects, would log a line per connection (the count counts each).
        HandshakeFailure::ClosedAfterCertificate if i.hint_due(authority.host()) => tracing::info!(
            target = %authority,
            "a client closed its connection after Weir's certificate, before any request and without a TLS alert. Node (VS Code) does this when it does not trust Weir's CA; if that is the client, trust the CA: {} (said once a minute per host; `interception.handshake_failures.closed_after_certificate` in the status counts each)",
            i.ca_cert().how_to_trust()
        ),
        _ => {
            tracing::debug!(target = %authority, cause = cause.as_str(), ?error, "TLS handshake with a client failed");
        }
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

fn handle(proxy: Arc<Proxy>, base: &Base, req: Request<Incoming>) -> super::Handled {
    match rewrite(req, base) {
        Ok(req) => super::handle(proxy, req),
        Err(p) => super::Handled::Ready(Some(p.with_base(&proxy.base_url).into_response(None))),
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
