//! A loopback Statuspage server (hyper 1 on 127.0.0.1:0) serving the recorded fixtures.
//! It can switch fixtures between polls, answer 304 to matching validators, fail with a
//! chosen status, serve garbage, or shut down.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{AbortHandle, JoinHandle};

pub const SUMMARY: &str = "/api/v2/summary.json";
pub const UNRESOLVED: &str = "/api/v2/incidents/unresolved.json";

/// Which validator the server hands out and honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validator {
    ETag,
    LastModified,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Serve,
    Fail(StatusCode),
    /// 200 with this body instead of the fixture.
    Body(&'static str),
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub status: u16,
}

struct Doc {
    body: Bytes,
    etag: String,
    last_modified: String,
}

struct State {
    docs: HashMap<String, Doc>,
    versions: u32,
    mode: Mode,
    validator: Validator,
    seen: Vec<Seen>,
    conns: Vec<AbortHandle>,
}

pub struct StatusServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: Option<JoinHandle<()>>,
}

pub fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

impl StatusServer {
    pub async fn start(validator: Validator) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            docs: HashMap::new(),
            versions: 0,
            mode: Mode::Serve,
            validator,
            seen: Vec::new(),
            conns: Vec::new(),
        }));
        let accept_state = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let st = Arc::clone(&accept_state);
                let conn = tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let st = Arc::clone(&st);
                        async move { Ok::<_, Infallible>(handle(&st, req)) }
                    });
                    // A client hanging up mid-request is not a test failure.
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await
                    {
                        eprintln!("test server connection: {e}");
                    }
                });
                accept_state.lock().unwrap().conns.push(conn.abort_handle());
            }
        });
        Self {
            addr,
            state,
            accept: Some(accept),
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves these two fixtures from now on (new validators for changed documents).
    pub fn scenario(&self, summary: &str, unresolved: &str) {
        self.set(SUMMARY, fixture(summary));
        self.set(UNRESOLVED, fixture(unresolved));
    }

    pub fn set(&self, path: &str, body: Bytes) {
        let mut st = self.state.lock().unwrap();
        if st.docs.get(path).is_some_and(|d| d.body == body) {
            return;
        }
        st.versions += 1;
        let v = st.versions;
        st.docs.insert(
            path.to_owned(),
            Doc {
                body,
                etag: format!("W/\"doc-{v}\""),
                last_modified: format!("Wed, 14 Jan 2026 09:{:02}:00 GMT", v % 60),
            },
        );
    }

    pub fn mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn count(&self, status: u16) -> usize {
        self.seen().iter().filter(|s| s.status == status).count()
    }

    /// Stops listening and drops every open connection, then waits until both are gone.
    pub async fn shutdown(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            assert!(accept.await.unwrap_err().is_cancelled());
        }
        let conns = std::mem::take(&mut self.state.lock().unwrap().conns);
        for c in &conns {
            c.abort();
        }
        // Let the aborted connection tasks run their cancellation (closing the sockets).
        while conns.iter().any(|c| !c.is_finished()) {
            tokio::task::yield_now().await;
        }
    }
}

fn handle(state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let mut st = state.lock().unwrap();
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
            .map(String::from)
    };
    let if_none_match = header(IF_NONE_MATCH);
    let if_modified_since = header(IF_MODIFIED_SINCE);
    let path = req.uri().path().to_owned();

    let resp = match st.mode.clone() {
        Mode::Fail(status) => Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(b"upstream trouble")))
            .unwrap(),
        Mode::Body(text) => Response::builder()
            .header(CONTENT_TYPE, "text/html")
            .body(Full::new(Bytes::from_static(text.as_bytes())))
            .unwrap(),
        Mode::Serve => match st.docs.get(&path) {
            None => Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Full::new(Bytes::new()))
                .unwrap(),
            Some(doc) => {
                let fresh = match st.validator {
                    Validator::ETag => if_none_match.as_deref() == Some(doc.etag.as_str()),
                    Validator::LastModified => {
                        if_modified_since.as_deref() == Some(doc.last_modified.as_str())
                    }
                };
                let b = match st.validator {
                    Validator::ETag => Response::builder().header(ETAG, &doc.etag),
                    Validator::LastModified => {
                        Response::builder().header(LAST_MODIFIED, &doc.last_modified)
                    }
                };
                if fresh {
                    b.status(StatusCode::NOT_MODIFIED)
                        .body(Full::new(Bytes::new()))
                        .unwrap()
                } else {
                    b.header(CONTENT_TYPE, "application/json; charset=utf-8")
                        .body(Full::new(doc.body.clone()))
                        .unwrap()
                }
            }
        },
    };
    st.seen.push(Seen {
        path,
        if_none_match,
        if_modified_since,
        status: resp.status().as_u16(),
    });
    resp
}
