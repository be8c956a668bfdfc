//! One JSON endpoint fetched with conditional requests: remembers the validators
//! (`ETag`, `Last-Modified`) and the last good document, so a 304 reuses it.

use std::sync::Arc;
use std::time::Duration;

use http::header::{ACCEPT, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::de::DeserializeOwned;

use crate::fetch::{Fetch, FetchError};

/// Why one request produced no usable document. All of these mean "unknown", not "down".
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("{url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: FetchError,
    },
    #[error("{url}: no response within {}s", after.as_secs_f32())]
    Timeout { url: String, after: Duration },
    #[error("{url}: unexpected HTTP status {status}")]
    Status { url: String, status: StatusCode },
    #[error("{url}: not a Statuspage v2 document: {source}")]
    Parse {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{url}: 304 Not Modified for a request that had nothing cached")]
    NotModifiedUncached { url: String },
}

impl PollError {
    /// Whether no HTTP answer came at all (no connection, no name, no answer in time): another
    /// request to the same host now would most likely fare the same.
    pub fn got_no_answer(&self) -> bool {
        matches!(
            self,
            PollError::Timeout { .. }
                | PollError::Fetch {
                    source: FetchError::Connect(_) | FetchError::Timeout,
                    ..
                }
        )
    }
}

/// How the last document was obtained; tests and logs use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// 200 with a body that parsed.
    Full,
    /// 304: the cached document is still current.
    NotModified,
}

/// A URL plus what a conditional GET needs to remember about it.
pub struct Endpoint<T> {
    url: String,
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
    last: Option<Arc<T>>,
}

impl<T: DeserializeOwned> Endpoint<T> {
    pub fn new(url: String) -> Self {
        Self {
            url,
            etag: None,
            last_modified: None,
            last: None,
        }
    }

    /// GETs the document, conditionally when something is cached.
    ///
    /// Validators and document are replaced only by a 200 whose body parses, so a broken
    /// answer never poisons the cache.
    pub async fn get(
        &mut self,
        fetch: &dyn Fetch,
        timeout: Option<Duration>,
    ) -> Result<(Arc<T>, Freshness), PollError> {
        let request = fetch.get(&self.url, self.request_headers());
        let result = match timeout {
            Some(after) => {
                tokio::time::timeout(after, request)
                    .await
                    .map_err(|_| PollError::Timeout {
                        url: self.url.clone(),
                        after,
                    })?
            }
            None => request.await,
        };
        let resp = result.map_err(|source| PollError::Fetch {
            url: self.url.clone(),
            source,
        })?;

        match resp.status {
            StatusCode::NOT_MODIFIED => match &self.last {
                Some(doc) => Ok((Arc::clone(doc), Freshness::NotModified)),
                None => {
                    // Our validators and the server disagree; start clean next time.
                    self.etag = None;
                    self.last_modified = None;
                    Err(PollError::NotModifiedUncached {
                        url: self.url.clone(),
                    })
                }
            },
            StatusCode::OK => {
                let doc: T =
                    serde_json::from_slice(&resp.body).map_err(|source| PollError::Parse {
                        url: self.url.clone(),
                        source,
                    })?;
                let doc = Arc::new(doc);
                self.etag = resp.headers.get(ETAG).cloned();
                self.last_modified = resp.headers.get(LAST_MODIFIED).cloned();
                self.last = Some(Arc::clone(&doc));
                Ok((doc, Freshness::Full))
            }
            status => Err(PollError::Status {
                url: self.url.clone(),
                status,
            }),
        }
    }

    fn request_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_static("application/json"));
        // Validators are only worth sending when a 304 can be answered from the cache.
        if self.last.is_some() {
            if let Some(etag) = &self.etag {
                h.insert(IF_NONE_MATCH, etag.clone());
            }
            if let Some(lm) = &self.last_modified {
                h.insert(IF_MODIFIED_SINCE, lm.clone());
            }
        }
        h
    }
}
