//! The lab upstream: a real HTTP/1.1 server on `127.0.0.1:0` standing in for
//! api.githubcopilot.com (and api.github.com, for the Task API). It counts what reaches it (see
//! [`UpstreamCounters`]) and can
//! "fail over": every open connection is dropped at once and the same address keeps serving,
//! as when a virtual IP moves to a standby.

mod mirror;
mod respond;
mod spec;
pub mod tasks;
pub mod world;

pub use mirror::Mirror;
pub use spec::{RateLimitSpec, UpstreamCounters, UpstreamSpec};
pub use tasks::Tasks;
pub use world::{SessionTiming, World};

use crate::LabError;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use respond::Responder;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running lab upstream; dropping it stops it.
pub struct Upstream {
    addr: SocketAddr,
    counters: Arc<UpstreamCounters>,
    generation: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl Upstream {
    /// Starts an upstream on `127.0.0.1:0`.
    pub async fn start(spec: UpstreamSpec) -> Result<Upstream, LabError> {
        Upstream::start_on(spec, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts an upstream on a given loopback address.
    pub async fn start_on(spec: UpstreamSpec, addr: SocketAddr) -> Result<Upstream, LabError> {
        if !addr.ip().is_loopback() {
            return Err(LabError::NotLoopback(addr.to_string()));
        }
        let listener = TcpListener::bind(addr).await.map_err(LabError::Bind)?;
        let addr = listener.local_addr().map_err(LabError::Bind)?;
        let counters = Arc::new(UpstreamCounters::default());
        let api = spec
            .api_origin
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        let responder = Arc::new(Responder::new(spec, counters.clone(), api));
        let (generation, _) = watch::channel(0u64);
        let accept = tokio::spawn(accept_loop(listener, responder, generation.clone()));
        Ok(Upstream {
            addr,
            counters,
            generation,
            accept,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn counters(&self) -> &Arc<UpstreamCounters> {
        &self.counters
    }

    /// Starts (or ends) a hard outage: every request fails with `500` until it ends.
    pub fn set_outage(&self, on: bool) {
        self.counters
            .outage
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drops every open connection (and the requests on them); new connections are served.
    pub fn fail_over(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Stops accepting and drops every connection.
    pub fn stop(&self) {
        self.accept.abort();
        self.fail_over();
    }
}

async fn accept_loop(
    listener: TcpListener,
    responder: Arc<Responder>,
    generation: watch::Sender<u64>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Usually EMFILE under a big fleet: wait for sockets to close instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let responder = responder.clone();
        let mut gen_rx = generation.subscribe();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let r = responder.clone();
                async move { Ok::<_, Infallible>(r.respond(req).await) }
            });
            let conn = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                // Failover or stop: dropping the connection closes the socket mid-request.
                _ = gen_rx.changed() => {}
            }
        });
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop();
    }
}
