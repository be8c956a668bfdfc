//! `Fetch` implemented with hyper-util's legacy client: a real HTTP/1 client over TCP.

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use weir_status::{BoxFuture, Fetch, FetchError, FetchResponse};

pub struct HyperFetch {
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl HyperFetch {
    pub fn new() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl Fetch for HyperFetch {
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: HeaderMap,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        Box::pin(async move {
            let mut req = Request::get(url)
                .body(Empty::<Bytes>::new())
                .map_err(FetchError::transport)?;
            *req.headers_mut() = headers;
            let resp = self.client.request(req).await.map_err(|e| {
                if e.is_connect() {
                    FetchError::connect(e)
                } else {
                    FetchError::transport(e)
                }
            })?;
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map_err(FetchError::transport)?
                .to_bytes();
            Ok(FetchResponse {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        })
    }
}
