//! The account directory's way to `GET /user` ([`crate::accounts::UserApi`]): one buffered
//! call through admission (cooldown → breaker → bulkhead) and the retry layer, like any
//! idempotent request (one attempt, no retries, while the upstream was last seen unreachable).
//! Implemented here, so `accounts` never imports the upstreams.

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
        let mut policy = AttemptPolicy::for_request(&Method::GET, true);
        // Last seen unreachable at the network level (no name, no connection): one attempt. A
        // resolution is off every request path and a failure is not asked again for a minute,
        // so the retry layer's quick retries (meant for a client's request, and a blip) only
        // added name lookups in an outage: three in 200 ms for each credential seen while
        // offline. Whatever reached it last time keeps the retries.
        if self.reach.get(up) == super::Reach::Unreachable {
            policy.max_attempts = 1;
        }
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
