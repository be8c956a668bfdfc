//! The account directory's way to `GET /user` ([`crate::accounts::UserApi`]): one buffered
//! call through admission (cooldown → breaker → bulkhead) and the retry layer, like any
//! idempotent request. Implemented here, so `accounts` never imports the upstreams.

use super::{AttemptPolicy, Replayable, UpstreamIndex, Upstreams};
use crate::accounts::UserApi;
use crate::config::{Route, RouteClass};
use crate::identity::Identity;
use bytes::Bytes;
use http::{HeaderMap, Method, Response, Uri};

impl UserApi for Upstreams {
    async fn get_user(
        &self,
        up: UpstreamIndex,
        id: Identity,
        headers: HeaderMap,
    ) -> Result<Response<Bytes>, String> {
        let uri = Uri::from_static("/user");
        let req = Replayable {
            method: &Method::GET,
            uri: &uri,
            headers: &headers,
            body: Bytes::new(),
            identity: Some(id),
        };
        let policy = AttemptPolicy::for_request(&Method::GET, true);
        match self
            .attempt_buffered(
                &self.settings_now(),
                up,
                Route::upstream(RouteClass::Other),
                req,
                policy,
                None,
            )
            .await
        {
            Ok(a) => Ok(a.response),
            Err(e) => Err(e.to_string()),
        }
    }
}
