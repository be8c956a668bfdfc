//! The floor under any proxy built like Weir's: a forward proxy with nothing of Weir's in it.
//! hyper's HTTP/1 server takes the absolute-form request, hyper-util's pooled client (the one
//! Weir's upstream path uses) sends it on unchanged, and the answer streams back unchanged:
//! no classification, no breaker, no cache, no header rewriting. `scripts/bench-overhead.sh`
//! measures it in the same run as Weir and nginx, so the part of Weir's pass-through cost that
//! is hyper's own is a figure, not a guess. Loopback only, like everything in the lab.

use crate::LabError;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;

type Answer = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;

/// Serves on `listen` until the process ends; prints `http://ADDR` once listening.
pub async fn serve(listen: SocketAddr) -> Result<(), LabError> {
    if !listen.ip().is_loopback() {
        return Err(LabError::NotLoopback(listen.to_string()));
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(LabError::Bind)?;
    println!("http://{}", listener.local_addr()?);
    run(listener).await
}

/// Serves requests from `listener` until the process ends.
pub async fn run(listener: tokio::net::TcpListener) -> Result<(), LabError> {
    // TCP_NODELAY upstream, as Weir's connector sets it: without it the floor would be
    // measured with Nagle's delay on every request and look slower than it is.
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(http);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| forward(client.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn forward(
    client: Client<HttpConnector, Incoming>,
    req: Request<Incoming>,
) -> Result<Response<Answer>, std::convert::Infallible> {
    // Only loopback targets: the lab never sends traffic anywhere else.
    let loopback = req
        .uri()
        .host()
        .and_then(|h| h.parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_loopback());
    if !loopback {
        return Ok(refusal(StatusCode::FORBIDDEN, "loopback targets only"));
    }
    Ok(match client.request(req).await {
        Ok(resp) => resp.map(BodyExt::boxed),
        Err(e) => refusal(StatusCode::BAD_GATEWAY, &e.to_string()),
    })
}

fn refusal(status: StatusCode, why: &str) -> Response<Answer> {
    let body = Full::new(bytes::Bytes::from(why.to_string()))
        .map_err(|never| match never {})
        .boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r
}
