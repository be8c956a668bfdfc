//! Weir's own requests through its own front door: an HTTP/1.1 request in absolute form
//! (`GET https://api.githubcopilot.com/agents/sessions…`) sent to Weir's loopback listener, so
//! it passes the whole pipeline like any tool's request: the same cache and coalescing (an IDE
//! polling the same list fills the entry the companion reads), the same breaker, the same
//! create dedupe and durable queue, and whatever sharing rule the identity phase applies.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// The `User-Agent` of Weir's own requests (counted as surface `other`).
pub const USER_AGENT: &str = concat!("Weir-sessions/", env!("CARGO_PKG_VERSION"));

/// Why a loopback request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    #[error("cannot reach Weir's own listener at {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("request to Weir's own listener failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("Weir's own listener did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("bad request: {0}")]
    Build(String),
}

/// One request to Weir itself.
pub struct Loopback {
    pub addr: SocketAddr,
    /// Bounds the whole exchange (the class deadline plus a margin).
    pub timeout: Duration,
    pub max_body_bytes: usize,
}

impl Loopback {
    /// Sends `method url` (absolute, on a managed upstream) with `token` as a bearer
    /// credential (marked sensitive: never logged) and `extra` headers.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        token: &str,
        extra: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<Response<Bytes>, LoopbackError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| LoopbackError::Build(e.to_string()))?;
        let host = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| LoopbackError::Build("no host".into()))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| LoopbackError::Build("the stored token is not a header value".into()))?;
        auth.set_sensitive(true);
        let b = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, host)
            .header(header::USER_AGENT, USER_AGENT)
            .header(header::ACCEPT, "application/json")
            .header(header::AUTHORIZATION, auth);
        let mut req = b
            .body(Full::new(body))
            .map_err(|e| LoopbackError::Build(e.to_string()))?;
        // An extra header replaces a default one of its name (the poller sends gh's `Accept`).
        for (k, v) in extra {
            let v = HeaderValue::from_str(v).map_err(|e| LoopbackError::Build(e.to_string()))?;
            req.headers_mut().insert(*k, v);
        }
        match tokio::time::timeout(self.timeout, self.exchange(req)).await {
            Ok(r) => r,
            Err(_) => Err(LoopbackError::Timeout(self.timeout)),
        }
    }

    async fn exchange(&self, req: Request<Full<Bytes>>) -> Result<Response<Bytes>, LoopbackError> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|source| LoopbackError::Connect {
                addr: self.addr,
                source,
            })?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // The connection task ends when the exchange is done and `send` is dropped.
        let driver = tokio::spawn(conn);
        let resp = send.send_request(req).await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                driver.abort();
                return Err(e.into());
            }
        };
        let (parts, body) = resp.into_parts();
        let limit = self.max_body_bytes;
        let bytes = crate::body::read_whole(body, limit)
            .await
            .map_err(|_| LoopbackError::TooLarge(limit))?;
        drop(send);
        driver.abort();
        Ok(Response::from_parts(parts, bytes))
    }
}
