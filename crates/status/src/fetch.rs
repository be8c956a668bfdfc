//! The HTTP seam: the watcher asks a [`Fetch`] for URLs, so the engine can hand in its own
//! client (which honours Weir's `upstream_proxy`) and tests can hand in a plain hyper client.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// A boxed, sendable future; spelled out here so the crate needs no `async-trait`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed error from whatever client implements [`Fetch`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A complete HTTP response: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct FetchResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why a GET produced no HTTP response at all.
///
/// Every variant ends up as `Reachability::Unknown`: none of them says anything about
/// whether GitHub itself is up.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// TCP/TLS/proxy connection could not be set up.
    #[error("connection failed: {0}")]
    Connect(#[source] BoxError),
    /// The client's own deadline passed (the watcher also applies `request_timeout`).
    #[error("request timed out")]
    Timeout,
    /// Anything else: the connection broke mid-request, the body could not be read...
    #[error("request failed: {0}")]
    Transport(#[source] BoxError),
}

impl FetchError {
    /// Wraps a connection error from any client.
    pub fn connect(err: impl Into<BoxError>) -> Self {
        Self::Connect(err.into())
    }

    /// Wraps any other client error.
    pub fn transport(err: impl Into<BoxError>) -> Self {
        Self::Transport(err.into())
    }
}

/// Performs one HTTP GET and returns the full response.
///
/// The implementation must not follow redirects silently into another host's credentials,
/// must not add authentication (the status page is public), and should return 304 responses
/// as they are: the watcher sends its own `If-None-Match` / `If-Modified-Since` in `headers`.
pub trait Fetch: Send + Sync {
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: HeaderMap,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>>;
}
