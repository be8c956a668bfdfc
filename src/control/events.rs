//! `/_weir/api/events`: a server-sent event stream. It opens with a `status` snapshot, repeats
//! the snapshot every second (the dashboard's live rates), and forwards every engine event as
//! it happens, so the dashboard never polls.
//!
//! A producer task writes into a small channel that the response body reads; the task ends
//! when the client goes away (send fails) or Weir shuts down.

use super::Control;
use crate::body::Body;
use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderValue, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// `private`: the caller holds the control secret, so status snapshots keep logins and
/// repository names (a browser's EventSource cannot send the header: the dashboard reads them
/// from `/_weir/api/status` with its secret).
pub(crate) fn stream_response(ctl: &Arc<Control>, private: bool) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    ctl.proxy.bus.spawn(produce(ctl.clone(), tx, private));
    let s = stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Frame::data(chunk)), rx))
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

async fn produce(ctl: Arc<Control>, tx: mpsc::Sender<Bytes>, private: bool) {
    let mut events = ctl.proxy.bus.subscribe();
    let mut stop = ctl.proxy.bus.stopping();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        if *stop.borrow() {
            return;
        }
        let chunk = tokio::select! {
            _ = tick.tick() => {
                let mut s = super::snapshot_full(&ctl).await;
                if !private {
                    super::snapshot::redact_private(&mut s);
                }
                sse("status", &s)
            }
            ev = events.recv() => match ev {
                Ok(e) => sse(e.name(), &public(&e)),
                // A slow reader missed events; the next status snapshot resynchronises it.
                Err(RecvError::Lagged(_)) => Bytes::from_static(b": lagged\n\n"),
                Err(RecvError::Closed) => return,
            },
            _ = stop.changed() => return,
        };
        if tx.send(chunk).await.is_err() {
            return;
        }
    }
}

/// An event as the stream (readable without the secret) carries it: a session's title and
/// repository are private, so a session event names only the change, the id and the group;
/// the dashboard reads the rest from `/_weir/api/sessions` with its secret.
fn public(e: &crate::events::Event) -> serde_json::Value {
    match e {
        crate::events::Event::Session {
            change,
            session,
            at,
        } => serde_json::json!({
            "type": "session",
            "change": change,
            "id": session.id,
            "group": session.group,
            "at": crate::time_fmt::rfc3339(*at),
        }),
        crate::events::Event::Handoff { change, id, at, .. } => serde_json::json!({
            "type": "handoff",
            "change": change,
            "id": id,
            "at": crate::time_fmt::rfc3339(*at),
        }),
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

fn sse<T: serde::Serialize>(event: &str, data: &T) -> Bytes {
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, SessionChange};
    use crate::status::{SessionGroup, SessionSummary};

    #[test]
    fn session_events_on_the_open_stream_leave_the_private_fields_out() {
        let e = Event::Session {
            change: SessionChange::NeedsReview,
            session: SessionSummary {
                id: "s-1".into(),
                group: SessionGroup::ReadyForReview,
                state: "completed".into(),
                repository: Some("octo/secret-repo".into()),
                title: Some("Rotate the prod keys".into()),
                created_at: None,
                updated_at: None,
                pull_request_url: Some("https://github.com/octo/secret-repo/pull/1".into()),
                url: "https://github.com/octo/secret-repo/pull/1/agent-sessions/s-1".into(),
            },
            at: std::time::UNIX_EPOCH,
        };
        let v = public(&e);
        assert_eq!(v["type"], "session");
        assert_eq!(v["change"], "needs_review");
        assert_eq!(v["id"], "s-1");
        let text = v.to_string();
        assert!(
            !text.contains("secret-repo") && !text.contains("prod keys"),
            "{text}"
        );
        let h = Event::Handoff {
            change: crate::events::HandoffChange::Offered,
            id: 7,
            repo: "octo/secret-repo".into(),
            rule: "r".into(),
            excerpt: "Rotate the prod keys".into(),
            detail: "octo/secret-repo could not reach the cloud".into(),
            at: std::time::UNIX_EPOCH,
        };
        let v = public(&h);
        assert_eq!(
            (v["type"].as_str(), v["change"].as_str(), v["id"].as_i64()),
            (Some("handoff"), Some("offered"), Some(7))
        );
        assert!(!v.to_string().contains("secret-repo") && !v.to_string().contains("prod keys"));
        // The typed event (for the tray, in-process) keeps everything.
        assert!(serde_json::to_string(&e)
            .unwrap()
            .contains("Rotate the prod keys"));
    }
}
