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
        pipeline::front(&self.proxy, req, |req, _, _| {
            crate::control::handle(control, req)
        })
        .await
    }
}
