//! The front door: a request for Weir itself (dashboard, control API, PAC) goes to the control
//! API; everything else enters the request pipeline.

use crate::control::Control;
use crate::pipeline::{self, Proxy};
use http::Request;
use hyper::body::Incoming;
use std::sync::Arc;

#[derive(Clone)]
pub(super) struct Router {
    pub proxy: Arc<Proxy>,
    pub control: Arc<Control>,
}

impl Router {
    /// A proxied request's answer, made at once when it can be (a fresh cache hit), else its
    /// phases boxed ([`pipeline::Handled`]); the control API's is always boxed.
    pub fn route(self, req: Request<Incoming>) -> pipeline::Handled {
        if !pipeline::is_for_weir(&self.proxy, &req) {
            return pipeline::handle(self.proxy, req);
        }
        pipeline::Handled::Waiting(Box::pin(async move {
            // The control API's requests count only as refused when refused
            // (`pipeline::record`).
            let seen = pipeline::Outcome::default();
            let control = &self.control;
            pipeline::front(&self.proxy, &seen, req, |req, _, _| {
                crate::control::handle(control, req)
            })
            .await
        }))
    }
}

/// One client connection over `io`, served as the laptop listener serves its connections
/// (Weir's HTTP settings, the keep-alive hint, the router), except that a client's half close
/// still gets its answers: the fuzz targets' way in (`crate::fuzz_entry`), with no socket.
#[cfg(feature = "fuzzing")]
pub(crate) async fn serve_io<I>(h: &super::EngineHandle, io: I)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let router = Router {
        proxy: h.control.proxy.clone(),
        control: h.control.clone(),
    };
    let limits = router.proxy.settings().limits.clone();
    let graceful = crate::server::drain::Drain::new();
    let mut builder = crate::server::http_builder(&limits);
    // The fuzz input is all the client sends (then its write side closes): answer what it
    // asked before closing, as a client that waits for its answers would get.
    builder.http1().half_close(true);
    let conn = crate::server::connection(
        &builder,
        hyper_util::rt::TokioIo::new(io),
        graceful.watcher(),
        crate::server::keep_alive_value(limits.header_read_timeout),
        move |req| router.clone().route(req),
        None::<()>,
    );
    let _ = conn.await;
    drop(graceful);
}
