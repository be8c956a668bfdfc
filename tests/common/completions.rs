//! A fake Copilot completion endpoint on loopback (real hyper server): answers per model named
//! in the JSON body — a JSON answer, an error status, an SSE stream, or a stream that breaks
//! before or after its first bytes — and records every request it got.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// How the fake answers one model.
#[derive(Clone, Debug)]
pub enum Plan {
    /// 200 with a JSON completion naming the model.
    Json,
    /// This status with a small JSON error body.
    Status(u16),
    /// 200 `text/event-stream`: these events, then the end.
    Stream(Vec<String>),
    /// 200 `text/event-stream`: these events, then the connection breaks (empty: before the
    /// first byte).
    StreamThenBreak(Vec<String>),
}

#[derive(Clone, Debug)]
pub struct Call {
    pub path: String,
    pub model: Option<String>,
    pub body: Bytes,
    pub headers: http::HeaderMap,
}

pub struct Completions {
    pub addr: SocketAddr,
    plans: Arc<Mutex<HashMap<String, Plan>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

type B = BoxBody<Bytes, std::io::Error>;

impl Completions {
    pub async fn start() -> Completions {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let plans: Arc<Mutex<HashMap<String, Plan>>> = Arc::default();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let (p, c) = (plans.clone(), calls.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (p, c) = (p.clone(), c.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| answer(req, p.clone(), c.clone()));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Completions { addr, plans, calls }
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn plan(&self, model: &str, plan: Plan) {
        self.plans.lock().unwrap().insert(model.to_string(), plan);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls that named `model`.
    pub fn calls_for(&self, model: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.model.as_deref() == Some(model))
            .count()
    }
}

async fn answer(
    req: Request<Incoming>,
    plans: Arc<Mutex<HashMap<String, Plan>>>,
    calls: Arc<Mutex<Vec<Call>>>,
) -> Result<Response<B>, std::convert::Infallible> {
    let got = super::read_request(req).await;
    let body = got.body.clone();
    let model = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("model").and_then(|m| m.as_str()).map(str::to_string));
    calls.lock().unwrap().push(Call {
        path: got.path().to_string(),
        model: model.clone(),
        body: body.clone(),
        headers: got.headers.clone(),
    });
    let plan = model
        .as_ref()
        .and_then(|m| plans.lock().unwrap().get(m).cloned())
        .unwrap_or(Plan::Json);
    let full = |s: String| Full::new(Bytes::from(s)).map_err(|n| match n {}).boxed();
    let resp = match plan {
        Plan::Json => {
            let j = serde_json::json!({"object": "chat.completion", "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]});
            Response::builder()
                .header("content-type", "application/json")
                .body(full(j.to_string()))
        }
        Plan::Status(s) => Response::builder()
            .status(s)
            .header("content-type", "application/json")
            .body(full(format!(
                "{{\"error\":{{\"message\":\"model {} failed with {s}\"}}}}",
                model.unwrap_or_default()
            ))),
        Plan::Stream(events) => sse(events, false),
        Plan::StreamThenBreak(events) => sse(events, true),
    };
    Ok(resp.unwrap())
}

/// An SSE answer fed by a task: the head goes out first (the body is pending), then each
/// event, then either the end or an error that makes hyper break the connection.
fn sse(events: Vec<String>, then_break: bool) -> http::Result<Response<B>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    tokio::spawn(async move {
        // Pending first, so hyper flushes the response head before anything else.
        tokio::time::sleep(Duration::from_millis(30)).await;
        for e in events {
            if tx.send(Ok(Frame::data(Bytes::from(e)))).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if then_break {
            let _ = tx
                .send(Err(std::io::Error::other("provider went away")))
                .await;
        }
    });
    let mut rx = rx;
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(stream)))
}
