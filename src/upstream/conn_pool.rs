//! Weir's own upstream connection pool. An HTTP/1 connection is driven inside the task of the
//! request that uses it (its `Connection` future polled next to the response future, then by
//! the response body, see [`super::pooled_body`]), and handed back idle to a small keep-alive
//! pool: per origin, at most `max_idle` connections, each for at most `idle_timeout`, checked
//! for a close before it is reused. hyper-util's pooled client ran every connection in a task
//! of its own, so each request and its response crossed tasks through channels: that was most
//! of the gap to nginx (BENCHMARKS.md §2). An upstream that speaks HTTP/2 (ALPN `h2`) gets one
//! shared connection per origin, which does need its own task (many streams share it).

use super::pooled_body::PooledBody;
use crate::body::{Body, BoxError};
use http::uri::{Authority, Scheme};
use http::{header, HeaderValue, Method, Request, Response, Uri};
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection as _;
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

/// The stream a connection runs over: TCP, or TLS over TCP (either maybe through a CONNECT
/// tunnel of `upstream_proxy`).
pub(crate) type Io = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;

/// What a pooled connection is pooled under. The origin, as hyper-util keyed it: the
/// connector's resolution (`connect_to`, the private-address check) is fixed per origin, and a
/// connection to an address checked when it was made stays that address, so resolving again
/// per request (a DNS lookup each time) would buy nothing. The scheme carries TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    scheme: Scheme,
    authority: Authority,
}

impl Key {
    fn of(uri: &Uri) -> Option<Key> {
        Some(Key {
            scheme: uri.scheme().cloned().unwrap_or(Scheme::HTTP),
            authority: uri.authority()?.clone(),
        })
    }
}

/// One HTTP/1 connection: the handle requests are sent on and the future that does its I/O.
/// Whoever holds it polls `conn`; there is no task behind it.
pub(crate) struct H1 {
    pub sender: http1::SendRequest<Body>,
    pub conn: http1::Connection<Io, Body>,
}

impl H1 {
    /// Polls the connection once without a waker of interest: an upstream's close (EOF) or a
    /// finished exchange is noticed. False when the connection is over.
    fn settle(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.settle_in(&mut cx)
    }

    /// The same, registering `cx` (the caller is about to let go or to wait anyway).
    pub(crate) fn settle_in(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.conn).poll(cx).is_pending() && self.sender.is_ready()
    }
}

struct IdleConn {
    h1: H1,
    since: Instant,
}

/// Why a request got no response head.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made (TCP, the private-address check, TLS, the proxy tunnel).
    Connect(BoxError),
    /// The exchange failed on a connection (the upstream's or the request body's fault).
    Http(hyper::Error),
    /// The upstream closed the connection before it answered.
    Closed,
    /// The request has no authority to connect to.
    NoAuthority,
}

/// The pool's bounds. `max_idle` per origin: the bench's nginx keeps `keepalive 64`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_idle: usize,
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_idle: 64,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

pub(crate) struct Inner {
    limits: Limits,
    idle: Mutex<HashMap<Key, Vec<IdleConn>>>,
    h2: Mutex<HashMap<Key, http2::SendRequest<Body>>>,
    /// Connections made, for tests and the bench (a reused one is not counted again).
    pub(crate) opened: std::sync::atomic::AtomicU64,
}

/// The pool (cheap to clone; clones share it).
#[derive(Clone)]
pub(crate) struct ConnPool {
    inner: Arc<Inner>,
}

impl ConnPool {
    pub fn new(limits: Limits) -> ConnPool {
        ConnPool {
            inner: Arc::new(Inner {
                limits,
                idle: Mutex::new(HashMap::new()),
                h2: Mutex::new(HashMap::new()),
                opened: Default::default(),
            }),
        }
    }

    /// Connections this pool has opened so far.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn opened(&self) -> u64 {
        self.inner.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Idle HTTP/1 connections held now, over every origin.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn idle_count(&self) -> usize {
        lock(&self.inner.idle).values().map(Vec::len).sum()
    }

    /// Sends `req` (absolute URI) on a pooled or new connection made by `connector`, and
    /// returns the response with its body still streaming; the body drives the connection.
    pub async fn send<C>(
        &self,
        connector: &C,
        mut req: Request<Body>,
    ) -> Result<Response<PooledBody>, SendError>
    where
        C: Service<Uri, Response = Io, Error = BoxError> + Clone,
    {
        let uri = req.uri().clone();
        let key = Key::of(&uri).ok_or(SendError::NoAuthority)?;
        if let Some(h2) = self.h2_for(&key) {
            return send_h2(h2, req).await;
        }
        for_h1(&mut req, &uri);
        // Idle connections first; one the upstream closed in the meantime gives the request
        // back unsent, and the next is tried (hyper-util's `retry_canceled_requests`).
        while let Some(h1) = self.checkout(&key) {
            match send_h1(h1, req).await {
                Ok((resp, h1)) => return Ok(self.wrap(key, resp, h1)),
                Err(H1Failed::Unsent(r)) => req = *r,
                Err(H1Failed::Failed(e)) => return Err(e),
            }
        }
        let mut connector = connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(SendError::Connect)?;
        self.inner
            .opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if io.connected().is_negotiated_h2() {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .handshake(io)
                .await
                .map_err(SendError::Http)?;
            // Many streams share this one: it needs a task of its own.
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
                }
            });
            lock(&self.inner.h2).insert(key, sender.clone());
            *req.uri_mut() = uri;
            return send_h2(sender, req).await;
        }
        let (sender, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(SendError::Http)?;
        match send_h1(H1 { sender, conn }, req).await {
            Ok((resp, h1)) => Ok(self.wrap(key, resp, h1)),
            Err(H1Failed::Unsent(_)) => Err(SendError::Closed),
            Err(H1Failed::Failed(e)) => Err(e),
        }
    }

    /// The response with a body that drives `h1` and hands it back here when it ends. A body
    /// that is over already (HEAD, 204, 304, an empty one) hands it back now.
    fn wrap(
        &self,
        key: Key,
        resp: Response<hyper::body::Incoming>,
        mut h1: H1,
    ) -> Response<PooledBody> {
        use http_body::Body as _;
        if resp.body().is_end_stream() {
            if h1.settle() {
                self.put(key, h1);
            }
            return resp.map(PooledBody::detached);
        }
        let pool = self.clone();
        resp.map(|b| PooledBody::driving(b, h1, pool, key))
    }

    /// A live shared HTTP/2 connection to `key`, if there is one.
    fn h2_for(&self, key: &Key) -> Option<http2::SendRequest<Body>> {
        let mut h2 = lock(&self.inner.h2);
        match h2.get(key) {
            Some(s) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                h2.remove(key);
                None
            }
            None => None,
        }
    }

    /// The most recently idled live connection to `key`. Expired and closed ones are dropped
    /// (outside the lock: dropping closes a socket).
    fn checkout(&self, key: &Key) -> Option<H1> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut map = lock(&self.inner.idle);
                let list = map.get_mut(key)?;
                let idle = list.pop();
                if list.is_empty() {
                    map.remove(key);
                }
                idle?
            };
            let IdleConn { mut h1, since } = idle;
            if now.saturating_duration_since(since) < self.inner.limits.idle_timeout && h1.settle()
            {
                return Some(h1);
            }
        }
    }

    /// Hands an idle connection back: kept unless the origin already has `max_idle` (the
    /// oldest then goes) or it is not ready for another request.
    pub(crate) fn put(&self, key: Key, h1: H1) {
        if !h1.sender.is_ready() || self.inner.limits.max_idle == 0 {
            return;
        }
        let now = Instant::now();
        let timeout = self.inner.limits.idle_timeout;
        let dropped: Vec<IdleConn> = {
            let mut map = lock(&self.inner.idle);
            let list = map.entry(key).or_default();
            let mut dropped = Vec::new();
            // Oldest first: expired ones sit at the front.
            let expired = list
                .iter()
                .take_while(|c| now.saturating_duration_since(c.since) >= timeout)
                .count();
            dropped.extend(list.drain(..expired));
            if list.len() >= self.inner.limits.max_idle {
                let over = list.len() + 1 - self.inner.limits.max_idle;
                dropped.extend(list.drain(..over));
            }
            list.push(IdleConn { h1, since: now });
            dropped
        };
        drop(dropped);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps stay consistent at every await-free step; a panic elsewhere does not poison them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What hyper-util did to a request for an HTTP/1 connection: origin-form target (authority
/// form for CONNECT), and a `Host` header when there is none.
fn for_h1(req: &mut Request<Body>, uri: &Uri) {
    if !req.headers().contains_key(header::HOST) {
        if let Some(a) = uri.authority() {
            let default = match uri.scheme_str() {
                Some("https") => 443,
                _ => 80,
            };
            let host = match a.port_u16() {
                Some(p) if p != default => a.as_str(),
                _ => a.host(),
            };
            if let Ok(v) = HeaderValue::from_str(host) {
                req.headers_mut().insert(header::HOST, v);
            }
        }
    }
    if req.method() == Method::CONNECT {
        if let Some(a) = uri.authority() {
            if let Ok(u) = Uri::try_from(a.as_str()) {
                *req.uri_mut() = u;
            }
        }
        return;
    }
    let origin_form = match uri.path_and_query() {
        Some(pq) if pq.as_str() != "/" => Uri::from(pq.clone()),
        _ => Uri::from_static("/"),
    };
    *req.uri_mut() = origin_form;
}

enum H1Failed {
    /// The connection was closed before the request was written: it may go elsewhere.
    Unsent(Box<Request<Body>>),
    Failed(SendError),
}

/// Sends on `h1`, polling its connection in this task until the response head is in.
async fn send_h1(
    mut h1: H1,
    req: Request<Body>,
) -> Result<(Response<hyper::body::Incoming>, H1), H1Failed> {
    let res = {
        let mut fut = std::pin::pin!(h1.sender.try_send_request(req));
        let mut conn = Some(&mut h1.conn);
        poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                return Poll::Ready(r.map_err(|e| Ended::Request(Box::new(e))));
            }
            if let Some(c) = conn.as_mut() {
                if let Poll::Ready(end) = Pin::new(&mut **c).poll(cx) {
                    conn = None;
                    // Whatever it had to say went to the request's callback, if anything.
                    if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                        return Poll::Ready(r.map_err(|e| Ended::Request(Box::new(e))));
                    }
                    return Poll::Ready(Err(Ended::Connection(end.err())));
                }
            }
            Poll::Pending
        })
        .await
    };
    match res {
        Ok(resp) => Ok((resp, h1)),
        Err(Ended::Request(mut e)) => match e.take_message() {
            Some(req) => Err(H1Failed::Unsent(Box::new(req))),
            None => Err(H1Failed::Failed(SendError::Http(e.into_error()))),
        },
        Err(Ended::Connection(Some(e))) => Err(H1Failed::Failed(SendError::Http(e))),
        Err(Ended::Connection(None)) => Err(H1Failed::Failed(SendError::Closed)),
    }
}

/// How an exchange ended without a response head.
enum Ended {
    Request(Box<hyper::client::conn::TrySendError<Request<Body>>>),
    /// The connection ended first (with its error, if it had one).
    Connection(Option<hyper::Error>),
}

async fn send_h2(
    mut sender: http2::SendRequest<Body>,
    req: Request<Body>,
) -> Result<Response<PooledBody>, SendError> {
    sender
        .send_request(req)
        .await
        .map(|r| r.map(PooledBody::detached))
        .map_err(SendError::Http)
}

#[cfg(test)]
mod tests;
