//! Streaming forward: the request body and the response body flow through without being
//! buffered (true streams such as SSE, creates, and everything Weir does not manage).

use super::context::Ctx;
use super::headers::strip_hop_by_hop;
use crate::body::{boxed, Body};
use crate::problem::{Problem, ProblemKind};
use crate::upstream::{fetch_problem, AttemptError, Attempted, Timeouts, Upstreams};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Passes `req` through untouched (managed upstreams while paused).
pub(super) async fn untouched(
    upstreams: &Upstreams,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    pass(&upstreams.client, req).await
}

/// Passes a request for a host Weir does not manage through the unmanaged client, whose one
/// lookup refuses private addresses (see [`super::private_target`]).
pub(super) async fn unmanaged(
    upstreams: &Upstreams,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    pass(&upstreams.unmanaged, req).await
}

async fn pass(
    client: &crate::upstream::UpstreamClient,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let upstream_req = prepare(req)?;
    // Untouched means no deadline of Weir's own: long polls and slow servers are the client's
    // business (a day bounds a dead connection).
    let day = std::time::Duration::from_secs(24 * 3600);
    match client
        .send(
            upstream_req,
            Timeouts {
                headers: day,
                body: day,
            },
        )
        .await
    {
        Ok(resp) => Ok(relay(resp.map(boxed))),
        Err(e) => Err(fetch_problem(&e)),
    }
}

/// A managed, non-cacheable request (`other`, non-GET `stream` calls, a `stream` GET with a
/// body), streamed through admission and the attempt phase.
pub(super) async fn managed(
    upstreams: &Arc<Upstreams>,
    ctx: &Ctx<'_>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    send(upstreams, ctx, req).await
}

/// [`managed`]'s call, started: its attempt future made (boxed, owning what it reads), and
/// what its answer goes through. Made where the call is decided, so a plain forward's request
/// future holds this (a pointer and the watch), not the request and the frames around it
/// (`pipeline::Forwarding`).
pub(super) fn send(
    upstreams: &Arc<Upstreams>,
    ctx: &Ctx<'_>,
    req: Request<Incoming>,
) -> Sending<impl Future<Output = Result<Attempted<Body>, AttemptError>> + Send + 'static> {
    // gh learns its Copilot API host from GraphQL; so does Weir, from copies, when the
    // request is gh's own query to the `github-api` upstream.
    let watch = super::announce::GraphqlWatch::of(
        upstreams,
        &ctx.settings,
        ctx.up,
        ctx.who.scope(),
        req.method(),
        req.uri().path(),
    );
    // Only the hop-by-hop headers go here: the attempt sends it to the origin's own URI with
    // the origin's `Host` (`upstream::attempt`), so the client's are not rewritten first.
    let mut req = req;
    strip_hop_by_hop(req.headers_mut());
    let mut upstream_req = req.map(boxed);
    if let Some(w) = &watch {
        upstream_req = w.request(upstream_req);
    }
    // Boxed: the attempt's state (~1 KB) would otherwise sit inline in every request's future,
    // which is moved by value at each level of the pipeline (see `pipeline`'s module doc).
    let attempt = Box::pin(upstreams.call_streaming(
        &ctx.settings,
        ctx.up,
        ctx.route(),
        upstream_req,
        ctx.who.scope(),
    ));
    Sending { attempt, watch }
}

/// A forward's attempt, under way ([`send`]).
pub(super) struct Sending<F> {
    attempt: Pin<Box<F>>,
    watch: Option<super::announce::GraphqlWatch>,
}

/// The upstream's answer, relayed (or the attempt's failure as a problem). A future of its
/// own, not an `async fn`'s: the request's future awaits it in place, with no state machine
/// of its own around the attempt's box to build, copy and poll.
impl<F> Future for Sending<F>
where
    F: Future<Output = Result<Attempted<Body>, AttemptError>>,
{
    type Output = Result<Response<Body>, Problem>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Unpin`: the attempt is boxed, the watch is plain data.
        let this = self.get_mut();
        let attempted = match this.attempt.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
            Poll::Ready(Ok(a)) => a,
        };
        let resp = relay(attempted.response);
        Poll::Ready(Ok(match this.watch.take() {
            Some(w) => w.answer(resp),
            None => resp,
        }))
    }
}

fn prepare(req: Request<Incoming>) -> Result<Request<Body>, Problem> {
    let (mut parts, body) = req.into_parts();
    prepare_parts(&mut parts)?;
    Ok(Request::from_parts(parts, boxed(body)))
}

/// The head of a request as it goes upstream: absolute URI, no hop-by-hop headers, `Host`.
pub(super) fn prepare_parts(parts: &mut http::request::Parts) -> Result<(), Problem> {
    parts.uri = absolute_uri(&parts.uri)?;
    strip_hop_by_hop(&mut parts.headers);
    if let Some(a) = parts.uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            parts.headers.insert(header::HOST, v);
        }
    }
    Ok(())
}

pub(super) fn relay(mut resp: Response<Body>) -> Response<Body> {
    // In place: taking a response apart and putting it back together copies it twice.
    strip_hop_by_hop(resp.headers_mut());
    resp
}

fn absolute_uri(uri: &Uri) -> Result<Uri, Problem> {
    if uri.authority().is_some() && uri.scheme().is_some() {
        return Ok(uri.clone());
    }
    Err(Problem::new(
        StatusCode::BAD_REQUEST,
        ProblemKind::BadRequest,
        format!("`{uri}` is not an absolute URL; use Weir as an HTTP proxy"),
    ))
}
