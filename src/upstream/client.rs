//! The upstream HTTP client: hyper-util's pooled client over rustls (with the platform's
//! roots), plus the buffered fetch used by coalesced/cached classes and its typed failures.

use crate::body::{read_whole, Body, ReadWholeError};
use bytes::Bytes;
use http::{Request, Response};
use hyper_util::client::legacy::Client;
use std::time::Duration;

pub type Connector = super::pool::SharedConnector;

/// Why an upstream exchange failed before a complete response was in hand.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    #[error("could not connect to {target}: {message}")]
    Connect { target: String, message: String },
    /// A host Weir does not manage resolved to a private address (the unmanaged client's one
    /// lookup refused it; nothing was connected).
    #[error("`{target}` is not a managed upstream and {refused}")]
    Forbidden {
        target: String,
        refused: super::resolve::Refused,
    },
    #[error("{target} did not answer within {after:?} ({phase})")]
    Timeout {
        target: String,
        phase: TimeoutPhase,
        after: Duration,
    },
    #[error("exchange with {target} failed: {message}")]
    Protocol { target: String, message: String },
    #[error("response from {target} is larger than {limit} bytes")]
    TooLarge { target: String, limit: usize },
    /// The upstream's certificate was not accepted. Retrying cannot fix it; trusting the
    /// right root (`ca_file`) can.
    #[error("TLS with {target} failed: {message}. If the upstream uses a private CA, set ca_file on its [[upstream]]")]
    Tls { target: String, message: String },
    /// The client's own request body broke off (truncated, bad chunking) while it was being
    /// forwarded: the client's fault, never counted against the upstream.
    #[error("the request body from the client broke off while it was sent to {target}: {message}")]
    ClientBody { target: String, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    Connect,
    Headers,
    Body,
}

impl std::fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::Headers => "response headers",
            TimeoutPhase::Body => "response body",
        })
    }
}

impl FetchError {
    /// Whether the request may have reached the upstream: true unless it failed before a
    /// connection existed. A non-idempotent request that may have arrived must not be resent
    /// blind.
    pub fn maybe_sent(&self) -> bool {
        !matches!(
            self,
            FetchError::Connect { .. }
                | FetchError::Forbidden { .. }
                | FetchError::Tls { .. }
                | FetchError::Timeout {
                    phase: TimeoutPhase::Connect,
                    ..
                }
        )
    }

    /// Whether the upstream could not be reached at the network level at all (connection
    /// refused, name not resolved, connect timeout): evidence of being offline. Anything that
    /// got a connection (an HTTP error, a reset, a TLS refusal, a slow answer) proves the
    /// network works.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            FetchError::Connect { .. }
                | FetchError::Timeout {
                    phase: TimeoutPhase::Connect,
                    ..
                }
        )
    }

    /// The problem kind this failure is reported as.
    pub fn kind(&self) -> crate::problem::ProblemKind {
        use crate::problem::ProblemKind;
        match self {
            FetchError::Connect { .. } => ProblemKind::Connection,
            FetchError::Forbidden { .. } => ProblemKind::ForbiddenTarget,
            FetchError::Timeout { .. } => ProblemKind::Timeout,
            FetchError::Protocol { .. } => ProblemKind::Connection,
            FetchError::TooLarge { .. } => ProblemKind::UpstreamProtocol,
            FetchError::Tls { .. } => ProblemKind::Connection,
            FetchError::ClientBody { .. } => ProblemKind::BadRequest,
        }
    }
}

/// Timeouts of one upstream exchange.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub headers: Duration,
    pub body: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            headers: Duration::from_secs(30),
            body: Duration::from_secs(60),
        }
    }
}

#[derive(Clone)]
pub struct UpstreamClient {
    pub(crate) client: Client<Connector, Body>,
}

impl UpstreamClient {
    /// A client with the platform roots and no per-upstream routing (the CLI's client).
    pub fn new() -> UpstreamClient {
        UpstreamClient::for_settings(&crate::config::Settings::default())
    }

    /// Sends `req` and returns the response with its body still streaming.
    ///
    /// Not an `async fn`: the request is handed to hyper-util's client now (which only checks
    /// it and boxes its own future), so the future returned holds that box, the timer and the
    /// name for errors (160 bytes), not the request as well: an attempt's future holds this
    /// one, and every byte of that future is copied into its box (see
    /// `pipeline::forward::send`).
    pub fn send(
        &self,
        req: Request<Body>,
        t: Timeouts,
    ) -> impl std::future::Future<Output = Result<Response<hyper::body::Incoming>, FetchError>>
           + Send
           + 'static {
        self.send_made(Ok(req), t, tokio::time::Instant::now())
    }

    /// [`UpstreamClient::send`] of a request that may have failed to be made (`Err`: answered
    /// with that failure), its headers' timeout counted from `from` (an attempt's start, the
    /// clock read it made already). One future for both outcomes: an attempt's future
    /// awaiting a `Result` of a future kept both, the `Result` and the future taken out of it
    /// (~170 bytes more of a box that glibc serves from its per-thread cache only under 1,032
    /// bytes).
    pub fn send_made(
        &self,
        req: Result<Request<Body>, FetchError>,
        t: Timeouts,
        from: tokio::time::Instant,
    ) -> impl std::future::Future<Output = Result<Response<hyper::body::Incoming>, FetchError>>
           + Send
           + 'static {
        // On the connection's reused timer (`server::timers`): a timer registered with tokio's
        // wheel and removed again for every attempt cost each pass-through request ~0.8k
        // instructions, for a timeout that almost never fires.
        let deadline = from + t.headers;
        // Named in errors only: keep the (cheap, shared) authority, format it on failure.
        let (target, sent) = match req {
            Ok(req) => (req.uri().authority().cloned(), Ok(self.client.request(req))),
            Err(e) => (None, Err(e)),
        };
        async move {
            let sent = sent?;
            let name =
                |a: Option<http::uri::Authority>| a.map(|a| a.to_string()).unwrap_or_default();
            match crate::server::timers::until(deadline, sent).await {
                None => Err(FetchError::Timeout {
                    target: name(target),
                    phase: TimeoutPhase::Headers,
                    after: t.headers,
                }),
                Some(Err(e)) => Err(classify_client_error(name(target), &e)),
                Some(Ok(resp)) => Ok(resp),
            }
        }
    }

    /// Sends `req` and reads the whole body (at most `limit` bytes).
    pub async fn fetch(
        &self,
        req: Request<Body>,
        t: Timeouts,
        limit: usize,
    ) -> Result<Response<Bytes>, FetchError> {
        let target = target_of(&req);
        let resp = self.send(req, t).await?;
        let (parts, body) = resp.into_parts();
        // Copied frame by frame: a body trickled a few bytes per packet must not pin a read
        // buffer per frame (`crate::body::read_whole`).
        let deadline = tokio::time::Instant::now() + t.body;
        let collected = crate::server::timers::until(deadline, read_whole(body, limit)).await;
        match collected.ok_or(()) {
            Err(()) => Err(FetchError::Timeout {
                target,
                phase: TimeoutPhase::Body,
                after: t.body,
            }),
            Ok(Err(ReadWholeError::TooLarge)) => Err(FetchError::TooLarge { target, limit }),
            Ok(Err(ReadWholeError::Body(e))) => Err(FetchError::Protocol {
                target,
                message: error_chain(&e),
            }),
            Ok(Ok(bytes)) => Ok(Response::from_parts(parts, bytes)),
        }
    }
}

impl Default for UpstreamClient {
    fn default() -> Self {
        UpstreamClient::new()
    }
}

fn target_of<B>(req: &Request<B>) -> String {
    req.uri()
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

fn classify_client_error(target: String, e: &hyper_util::client::legacy::Error) -> FetchError {
    if let Some(refused) = super::resolve::refusal_in(e) {
        return FetchError::Forbidden { target, refused };
    }
    let message = error_chain(e);
    if is_client_body_error(e) {
        return FetchError::ClientBody { target, message };
    }
    // The connector boxes its errors (sometimes twice), which hides the typed rustls error
    // from downcasting; rustls's own wording is the fallback.
    if is_certificate_error(e)
        || message.contains("invalid peer certificate")
        || message.contains("peer sent no certificates")
    {
        return FetchError::Tls { target, message };
    }
    if e.is_connect() {
        if message.contains("timed out") || message.contains("timeout") {
            return FetchError::Timeout {
                target,
                phase: TimeoutPhase::Connect,
                after: Duration::from_secs(10),
            };
        }
        FetchError::Connect { target, message }
    } else {
        FetchError::Protocol { target, message }
    }
}

/// Whether hyper failed because of the request body it was given (our client's stream broke),
/// rather than because of the upstream.
fn is_client_body_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_user)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether a rustls certificate rejection is somewhere in the error's cause chain.
fn is_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if matches!(
            tls,
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
        ) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// `a: b: c` from an error and its sources, for messages a person can read.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
