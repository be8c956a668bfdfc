//! The floor under Weir's intercepted cache hit (#32 item 2): a TLS server with nothing of
//! Weir's in it that answers every request from memory with the answer Weir gives for a hit
//! (the same status, header names, count and value shapes, a new `Age` and a new 32-digit
//! `X-Request-Id` each time, the same body bytes). `scripts/profile-h2-floor.sh` measures it
//! in the same run as Weir and nginx, HTTP/1.1 and HTTP/2 on one kept-alive connection, so
//! what any server built on rustls + hyper (+ h2) pays per request is a figure.
//!
//! Three engines, one TLS setup (rustls with ring, ALPN `h2` then `http/1.1`, as Weir's
//! interception has):
//! - [`Engine::Hyper`]: hyper's own HTTP/1 or HTTP/2 server by ALPN, stock settings; HTTP/2
//!   streams spawned as tasks (hyper-util's `TokioExecutor`), as a plain hyper server does;
//! - [`Engine::HyperInline`]: the same, but an HTTP/2 stream's future is polled once in place
//!   before it would be spawned, by Weir's own executor (`weir::bench_api::InlineFirst`): the
//!   lightest way to run hyper's HTTP/2 server;
//! - [`Engine::H2`]: the `h2` crate's server without hyper (HTTP/2 only): the only lighter
//!   HTTP/2 on this stack.
//!
//! Loopback only, like everything in the lab.

use crate::LabError;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Which HTTP server answers on the TLS connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// hyper, HTTP/2 streams spawned (stock).
    Hyper,
    /// hyper, HTTP/2 streams polled in place first.
    HyperInline,
    /// The h2 crate alone (HTTP/2 only).
    H2,
}

/// The fixed answer: its status, the header fields every answer repeats, and its body. `Age`
/// and `X-Request-Id` are added to each answer, in that order, after the fixed fields.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    /// The fixed fields on HTTP/1.1.
    pub fixed: HeaderMap,
    /// The same less `Keep-Alive` (HTTP/2 forbids it; Weir sends it on HTTP/1.1 only).
    pub fixed_h2: HeaderMap,
    /// `fixed_h2` with `Content-Length`, which hyper writes itself and the h2 crate does not.
    pub fixed_h2_alone: HeaderMap,
    pub body: Bytes,
    started: Instant,
    ids: Arc<AtomicU64>,
}

impl Answer {
    /// `fields` are `name: value` lines (as curl `-D` prints them); `age` and `x-request-id`
    /// are skipped (made per answer), and so are `connection` and `content-length`, which
    /// hyper writes itself on every answer. A `date` is kept as is (Weir sends the stored
    /// answer's, and hyper then writes none).
    pub fn new(status: StatusCode, fields: &[String], body: Bytes) -> Result<Answer, LabError> {
        let mut fixed = HeaderMap::new();
        for line in fields {
            let Some((name, value)) = line.split_once(':') else {
                return Err(LabError::Settings(format!("not a header field: {line}")));
            };
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|e| LabError::Settings(format!("header name {name:?}: {e}")))?;
            if matches!(
                name.as_str(),
                "age" | "x-request-id" | "connection" | "content-length"
            ) {
                continue;
            }
            let value = HeaderValue::from_str(value.trim())
                .map_err(|e| LabError::Settings(format!("header value of {name}: {e}")))?;
            fixed.append(name, value);
        }
        let mut fixed_h2 = fixed.clone();
        fixed_h2.remove(http::header::HeaderName::from_static("keep-alive"));
        let mut fixed_h2_alone = fixed_h2.clone();
        fixed_h2_alone.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        Ok(Answer {
            status,
            fixed,
            fixed_h2,
            fixed_h2_alone,
            body,
            started: Instant::now(),
            ids: Arc::default(),
        })
    }

    /// The head of one answer: the fixed fields, then a new `Age` and `X-Request-Id`.
    /// On HTTP/2 (`h2`) the id is a never-indexed HPACK literal, as Weir sends it (a value
    /// that never repeats would only churn the connection's table).
    fn head(&self, h2: bool) -> Response<()> {
        self.head_of(if h2 { &self.fixed_h2 } else { &self.fixed }, h2)
    }

    fn head_of(&self, fixed: &HeaderMap, h2: bool) -> Response<()> {
        let mut headers = fixed.clone();
        headers.insert(
            http::header::AGE,
            HeaderValue::from(self.started.elapsed().as_secs()),
        );
        let mut id = request_id(self.ids.fetch_add(1, Ordering::Relaxed));
        id.set_sensitive(h2);
        headers.insert(HeaderName::from_static("x-request-id"), id);
        let mut r = Response::new(());
        *r.status_mut() = self.status;
        *r.headers_mut() = headers;
        r
    }
}

/// A new id, 32 lower-case hex digits as Weir's (a fixed half and a counter), written by hand:
/// `format!` cost the floor ~2.3k instructions an answer, more than the id is worth.
fn request_id(n: u64) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = *b"0000000000005eed0000000000000000";
    for (i, digit) in text[16..].iter_mut().rev().enumerate() {
        *digit = HEX[((n >> (4 * i)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static("0"))
}

/// The TLS setup: the chain and key from PEM files, ALPN `h2` then `http/1.1`.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, LabError> {
    let bad = |what: &str, e: String| LabError::Settings(format!("{what}: {e}"));
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("certificate", e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad("tls", e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| bad("key", e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves on `listen` until the process ends; prints `https://ADDR` once listening.
pub async fn serve(
    listen: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    engine: Engine,
    answer: Answer,
) -> Result<(), LabError> {
    if !listen.ip().is_loopback() {
        return Err(LabError::NotLoopback(listen.to_string()));
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(LabError::Bind)?;
    println!("https://{}", listener.local_addr()?);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let answer = Arc::new(answer);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let answer = answer.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            match (engine, h2) {
                (Engine::H2, true) => {
                    let _ = h2_alone(tls, &answer).await;
                }
                (Engine::H2, false) => {} // HTTP/2 only: an HTTP/1 client is closed.
                (Engine::Hyper, true) => {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service(answer, true))
                        .await;
                }
                (Engine::HyperInline, true) => {
                    let _ = hyper::server::conn::http2::Builder::new(weir::bench_api::InlineFirst)
                        .serve_connection(TokioIo::new(tls), service(answer, true))
                        .await;
                }
                (_, false) => {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service(answer, false))
                        .await;
                }
            }
        });
    }
}

type Served = std::future::Ready<Result<Response<Full<Bytes>>, std::convert::Infallible>>;

/// Every request gets the fixed answer; its body is not read (the benchmark sends GETs).
fn service(
    answer: Arc<Answer>,
    h2: bool,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = Served,
> + Clone {
    service_fn(move |_req: Request<Incoming>| {
        let (head, ()) = answer.head(h2).into_parts();
        std::future::ready(Ok(Response::from_parts(
            head,
            Full::new(answer.body.clone()),
        )))
    })
}

/// The h2 crate's server alone: each stream is answered as it is accepted (head, then the
/// body in one DATA frame that ends the stream); the next `accept` flushes them.
async fn h2_alone<T>(io: T, answer: &Answer) -> Result<(), h2::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut conn = h2::server::handshake(io).await?;
    while let Some(stream) = conn.accept().await {
        let (_req, mut respond) = stream?;
        let head = answer.head_of(&answer.fixed_h2_alone, true);
        let mut send = respond.send_response(head, answer.body.is_empty())?;
        if !answer.body.is_empty() {
            send.send_data(answer.body.clone(), true)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_keeps_the_fixed_fields_and_makes_age_and_a_new_id() {
        let fields = [
            "content-type: application/json".to_string(),
            "age: 3".to_string(),
            "x-request-id: 00".to_string(),
            "connection: keep-alive".to_string(),
            "keep-alive: timeout=9".to_string(),
            "x-weir-cache: hit".to_string(),
        ];
        let a = Answer::new(StatusCode::OK, &fields, Bytes::from_static(b"{}")).unwrap();
        let one = a.head(true);
        let two = a.head(false);
        assert_eq!(one.headers().len(), 4);
        assert_eq!(two.headers().len(), 5);
        assert_eq!(two.headers()["keep-alive"], "timeout=9");
        assert_eq!(one.headers()["content-type"], "application/json");
        assert_eq!(one.headers()["x-weir-cache"], "hit");
        assert!(one.headers().get("connection").is_none());
        let id = |r: &Response<()>| r.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_eq!(id(&one).len(), 32);
        assert_eq!(
            request_id(0xabc).to_str().unwrap(),
            "0000000000005eed0000000000000abc"
        );
        assert_ne!(id(&one), id(&two));
        assert!(one.headers()["x-request-id"].is_sensitive());
        assert!(!two.headers()["x-request-id"].is_sensitive());
    }

    #[test]
    fn a_line_without_a_colon_is_refused() {
        let fields = ["no colon".to_string()];
        assert!(Answer::new(StatusCode::OK, &fields, Bytes::new()).is_err());
    }
}
