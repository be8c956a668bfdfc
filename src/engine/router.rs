//! The front door: a request for Weir itself (dashboard, control API, PAC) goes to the control
//! API; everything else enters the request pipeline.

use crate::body::Body;
use crate::control::Control;
use crate::pipeline::{self, Proxy};
use http::{Request, Response};
use hyper::body::Incoming;
use std::sync::Arc;

#[derive(Clone)]
pub(super) struct Router {
    pub proxy: Arc<Proxy>,
    pub control: Arc<Control>,
}

impl Router {
    pub async fn route(self, req: Request<Incoming>) -> Response<Body> {
        if !pipeline::is_for_weir(&self.proxy, &req) {
            return pipeline::handle(self.proxy, req).await;
        }
        let control = &self.control;
        // Boxed, as the pipeline's rare paths are: the control API's state is kilobytes, and
        // inline it would size every proxied request's future too.
        pipeline::front(&self.proxy, req, |req, _, _| {
            Box::pin(crate::control::handle(control, req))
        })
        .await
    }
}
