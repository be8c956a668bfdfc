//! The gateway's two doors. The clients' door admits allow-listed peers to the request
//! pipeline and refuses control calls; the admin door serves the control API to whoever shows
//! the admin token (`Authorization: Bearer …`), in place of the laptop's Host/Origin checks and
//! control secret.

use super::listener::ClientPeer;
use crate::body::Body;
use crate::control::Control;
use crate::pipeline::{self, Proxy};
use crate::problem::{Problem, ProblemKind};
use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

#[derive(Clone)]
pub(crate) struct Doors {
    pub proxy: Arc<Proxy>,
    pub control: Arc<Control>,
    pub admin_token: Arc<str>,
}

impl Doors {
    /// The clients' listener.
    pub async fn client(self, req: Request<Incoming>) -> Response<Body> {
        let peer = req.extensions().get::<ClientPeer>().copied();
        let refused = match peer {
            Some(p) if p.allowed => None,
            Some(p) => Some(Problem::new(
                StatusCode::FORBIDDEN,
                ProblemKind::ForbiddenClient,
                format!(
                    "{} is not in this gateway's allow-list (gateway.allow)",
                    p.addr.ip().to_canonical()
                ),
            )),
            None => Some(Problem::new(
                StatusCode::FORBIDDEN,
                ProblemKind::ForbiddenClient,
                "the client's address is unknown",
            )),
        }
        .or_else(|| {
            pipeline::is_for_weir(&self.proxy, &req).then(|| {
                Problem::new(
                    StatusCode::FORBIDDEN,
                    ProblemKind::AdminOnly,
                    "this is the gateway's clients' listener; the control API is on the admin listener (gateway.admin_listen) with the admin token",
                )
            })
        });
        // The problem pages are public explanations (the `type` URLs of the clients' own
        // problems point here); nothing else of the control API is on this door.
        let page = (peer.is_some_and(|p| p.allowed) && req.method() == http::Method::GET)
            .then(|| req.uri().path().strip_prefix("/_weir/problems/"))
            .flatten()
            .filter(|_| pipeline::is_for_weir(&self.proxy, &req));
        if let Some(kind) = page {
            let rid = pipeline::request_id(req.headers());
            let page = crate::control::pages::problem_page(kind);
            return pipeline::finish(&self.proxy, page, rid);
        }
        match refused {
            Some(p) => {
                let rid = pipeline::request_id(req.headers());
                pipeline::finish(&self.proxy, Err(p), rid)
            }
            None => pipeline::handle(self.proxy, req).await,
        }
    }

    /// The admin listener.
    pub async fn admin(self, req: Request<Incoming>) -> Response<Body> {
        let (control, token) = (&self.control, &self.admin_token);
        let seen = pipeline::Outcome::default();
        pipeline::front(&self.proxy, &seen, req, |mut req, _, _| async move {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if !crate::control::constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
                return Err(Problem::new(
                    StatusCode::UNAUTHORIZED,
                    ProblemKind::Unauthorized,
                    "the gateway's admin listener needs the admin token: Authorization: Bearer <token> (gateway.admin_token_file, or the keychain)",
                ));
            }
            req.extensions_mut().insert(crate::control::AdminAccess);
            crate::control::handle(control, req).await
        })
        .await
    }
}
