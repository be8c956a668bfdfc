//! The raw hyper client every simulated tool uses: pooled HTTP/1.1 connections, either straight
//! to the lab upstream or through Weir as an HTTP proxy.

mod connector;

pub use connector::{LabConnector, LabStream};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("request failed: {0}")]
    Request(#[from] hyper_util::client::legacy::Error),
    #[error("response body failed: {0}")]
    Body(#[from] hyper::Error),
    #[error("bad request: {0}")]
    Build(#[from] http::Error),
}

/// A whole answer (the lab reads every body to the end, as a real tool does).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct LabClient {
    inner: Client<LabConnector, Full<Bytes>>,
}

impl LabClient {
    /// Connects straight to the URL's (loopback) address.
    pub fn direct() -> LabClient {
        LabClient::with(LabConnector { proxy: None })
    }

    /// Sends every request to `proxy` in absolute form.
    pub fn via_proxy(proxy: SocketAddr) -> LabClient {
        LabClient::with(LabConnector { proxy: Some(proxy) })
    }

    /// Direct when `proxy` is `None`.
    pub fn new(proxy: Option<SocketAddr>) -> LabClient {
        LabClient::with(LabConnector { proxy })
    }

    fn with(connector: LabConnector) -> LabClient {
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        LabClient { inner }
    }

    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<Answer, ClientError> {
        let resp = self.inner.request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// `GET url` with `Authorization: token {token}` (or no credential when `token` is empty).
    pub async fn get(&self, url: &str, token: &str) -> Result<Answer, ClientError> {
        self.send(request(
            Method::GET,
            url,
            Credential::Token(token),
            Bytes::new(),
        )?)
        .await
    }
}

/// Who a request says it is.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// `Authorization: token …` (VS Code, `gh`, agents).
    Token(&'a str),
    /// `Cookie: user_session=…` (a browser tab).
    Cookie(&'a str),
}

/// Builds a request the way the simulated tools send it.
pub fn request(
    method: Method,
    url: &str,
    who: Credential<'_>,
    body: Bytes,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut b = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::ACCEPT, "application/json");
    b = match who {
        Credential::Token("") => b,
        Credential::Token(t) => b.header(http::header::AUTHORIZATION, format!("token {t}")),
        Credential::Cookie(c) => b.header(http::header::COOKIE, format!("user_session={c}")),
    };
    if !body.is_empty() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    b.body(Full::new(body))
}
