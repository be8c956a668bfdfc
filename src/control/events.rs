//! `/_weir/api/events`: a server-sent event stream. It opens with a `status` snapshot, repeats
//! the snapshot every second (the dashboard's live rates), and forwards every engine event as
//! it happens, so the dashboard never polls.

use crate::body::Body;
use crate::engine::Shared;
use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderValue, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

struct State {
    shared: Arc<Shared>,
    events: tokio::sync::broadcast::Receiver<crate::events::Event>,
    tick: tokio::time::Interval,
    stop: tokio::sync::watch::Receiver<bool>,
}

pub fn stream_response(shared: &Arc<Shared>) -> Response<Body> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let state = State {
        events: shared.events.subscribe(),
        stop: shared.stopping.subscribe(),
        shared: shared.clone(),
        tick,
    };
    let s = stream::unfold(state, |mut st| async move {
        if *st.stop.borrow() {
            return None;
        }
        let chunk = tokio::select! {
            _ = st.tick.tick() => sse("status", &super::snapshot(&st.shared)),
            ev = st.events.recv() => match ev {
                Ok(e) => sse(e.name(), &e),
                // A slow reader missed events; the next status snapshot resynchronises it.
                Err(RecvError::Lagged(_)) => Bytes::from_static(b": lagged\n\n"),
                Err(RecvError::Closed) => return None,
            },
            _ = st.stop.changed() => return None,
        };
        Some((Ok::<_, std::convert::Infallible>(Frame::data(chunk)), st))
    });
    let mut r = Response::new(StreamBody::new(s).map_err(|never| match never {}).boxed());
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn sse<T: serde::Serialize>(event: &str, data: &T) -> Bytes {
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}
