//! The prologue every test fake shares: a received request read whole into owned parts, so
//! each fake's own code starts at what it answers. Part of `common` (`common::read_request`);
//! a fake included by `#[path]` without `common` includes this file the same way.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// One request as a fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: HeaderMap,
    /// The whole body (empty if it could not be read).
    pub body: Bytes,
}

impl Received {
    /// Path and query exactly as sent (`/` when there is none).
    pub fn path_and_query(&self) -> String {
        self.uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default()
    }

    pub fn path(&self) -> &str {
        self.uri.path()
    }

    /// The `Host` header, else the URI's authority (port included, as sent).
    pub fn host(&self) -> String {
        self.headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| self.uri.authority().map(|a| a.to_string()))
            .unwrap_or_default()
    }

    /// A header as text (`None` when absent or not visible ASCII).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Reads `req` whole.
pub async fn read_request(req: Request<Incoming>) -> Received {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Received {
        method: parts.method,
        uri: parts.uri,
        version: parts.version,
        headers: parts.headers,
        body,
    }
}
