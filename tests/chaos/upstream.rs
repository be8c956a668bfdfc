//! The chaos run's upstream: a plain-HTTP loopback fake of the agent jobs and sessions APIs
//! whose answers are the corpus templates (`tests/corpus/answers.json`: `job_created`,
//! `session`, `job`, transcribed from cli/cli `pkg/cmd/agent-task/capi/{job,sessions}.go` and
//! VS Code's `githubService.ts`), with one switchable [`Mode`]: healthy, a 5xx storm, a
//! blackhole, a slow trickle, or 429 + `Retry-After`. It records every session it created, with
//! the credential that asked, so the run can count each create end to end.

use crate::corpus::Answers;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How the upstream behaves right now (one at a time; the schedule switches it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    /// Every call answers 500/502/503 (in turn) with GitHub's `{"message": …}` body.
    Storm5xx,
    /// Requests arrive and are never answered: nothing is created, the connection is dropped
    /// without a byte once the blackhole ends.
    Blackhole,
    /// Calls are served (a create creates its session), but the answer trickles out a few bytes
    /// every 500 ms, far slower than any deadline.
    Trickle,
    /// Every call answers 429 with `Retry-After: secs`.
    RateLimited {
        retry_after_secs: u64,
    },
}

/// A session the fake created.
#[derive(Debug, Clone)]
pub struct Created {
    pub statement: String,
    pub authorization: String,
    pub repo: String,
}

#[derive(Default)]
pub struct Counts {
    pub creates_seen: u64,
    pub lists_seen: u64,
    pub job_reads: u64,
    pub faulted: u64,
}

struct State {
    answers: Answers,
    created: Mutex<Vec<Created>>,
    counts: Mutex<Counts>,
    /// Created sessions as listed (`session` template filled), oldest first.
    sessions: Mutex<Vec<(String, Value)>>,
    mode: watch::Sender<Mode>,
    turn: Mutex<u64>,
}

pub struct ChaosUpstream {
    pub addr: SocketAddr,
    state: Arc<State>,
}

type Body = BoxBody<Bytes, Infallible>;

impl ChaosUpstream {
    pub async fn start() -> ChaosUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            answers: Answers::load(),
            created: Mutex::default(),
            counts: Mutex::default(),
            sessions: Mutex::default(),
            mode: watch::channel(Mode::Healthy).0,
            turn: Mutex::new(0),
        });
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        ChaosUpstream { addr, state }
    }

    pub fn set_mode(&self, m: Mode) {
        self.state.mode.send_replace(m);
    }

    pub fn created(&self) -> Vec<Created> {
        self.state.created.lock().unwrap().clone()
    }

    pub fn counts(&self) -> Counts {
        let c = self.state.counts.lock().unwrap();
        Counts {
            creates_seen: c.creates_seen,
            lists_seen: c.lists_seen,
            job_reads: c.job_reads,
            faulted: c.faulted,
        }
    }
}

fn full(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap()
}

/// A JSON answer whose body comes out 8 bytes every 500 ms.
fn trickle(status: StatusCode, body: Value) -> Response<Body> {
    let bytes = Bytes::from(body.to_string());
    let chunks: Vec<Bytes> = bytes.chunks(8).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::unfold(chunks.into_iter(), |mut it| async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        it.next().map(|c| (Ok::<_, Infallible>(Frame::data(c)), it))
    });
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

fn now_rfc3339() -> String {
    weir::time_fmt::rfc3339(SystemTime::now())
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
    let mode = *st.mode.borrow();
    match mode {
        Mode::Healthy | Mode::Trickle => {}
        Mode::Blackhole => {
            st.counts.lock().unwrap().faulted += 1;
            // Held until the blackhole ends, then the connection is cut with no answer.
            let mut rx = st.mode.subscribe();
            let _ = rx.wait_for(|m| *m != Mode::Blackhole).await;
            return Err(std::io::Error::other("blackholed"));
        }
        Mode::Storm5xx => {
            st.counts.lock().unwrap().faulted += 1;
            let mut turn = st.turn.lock().unwrap();
            *turn += 1;
            let status = [500, 502, 503][(*turn % 3) as usize];
            return Ok(full(
                StatusCode::from_u16(status).unwrap(),
                json!({"message": "Server Error"}),
            ));
        }
        Mode::RateLimited { retry_after_secs } => {
            st.counts.lock().unwrap().faulted += 1;
            let mut r = full(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
            );
            r.headers_mut()
                .insert("retry-after", retry_after_secs.to_string().parse().unwrap());
            return Ok(r);
        }
    }
    let answer = |status: StatusCode, body: Value| {
        if mode == Mode::Trickle {
            trickle(status, body)
        } else {
            full(status, body)
        }
    };
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let seg: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(String::from)
        .collect();
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    match (req.method().clone(), seg.as_slice()) {
        // Create: `POST /agents/swe/v1/jobs/{owner}/{repo}` (gh's CreateJob, VS Code's job POST).
        (Method::POST, ["agents", "swe", "v1", "jobs", owner, repo]) => {
            let repo = format!("{owner}/{repo}");
            let authorization = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let body = req
                .into_body()
                .collect()
                .await
                .map_err(std::io::Error::other)?
                .to_bytes();
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            let Some(statement) = v["problem_statement"].as_str().map(String::from) else {
                return Ok(full(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"message": "problem_statement is required"}),
                ));
            };
            let now = now_rfc3339();
            let (job, sid) = {
                let mut created = st.created.lock().unwrap();
                st.counts.lock().unwrap().creates_seen += 1;
                created.push(Created {
                    statement: statement.clone(),
                    authorization,
                    repo: repo.clone(),
                });
                let n = created.len();
                let sid = format!("00000000-0000-4000-8000-{n:012}");
                let mut job = st.answers.body("job_created");
                job["job_id"] = json!(format!("job-{n}"));
                job["session_id"] = json!(sid);
                job["problem_statement"] = json!(statement);
                job["created_at"] = json!(now);
                job["updated_at"] = json!(now);
                let mut session = st.answers.body("session");
                session["id"] = json!(sid);
                session["name"] = json!(statement);
                session["created_at"] = json!(now);
                session["last_updated_at"] = json!(now);
                session["repo_nwo"] = json!(repo);
                st.sessions
                    .lock()
                    .unwrap()
                    .push((repo.clone(), session.clone()));
                (job, sid)
            };
            let _ = sid;
            Ok(answer(StatusCode::CREATED, job))
        }
        // The session list, paged by `page_number`/`page_size`, filtered by `repo_nwo`, newest
        // first (`sort=last_updated_at,desc` is what both clients send).
        (Method::GET, ["agents", "sessions"]) => {
            st.counts.lock().unwrap().lists_seen += 1;
            let param = |k: &str| {
                query.split('&').find_map(|p| {
                    p.strip_prefix(k)
                        .and_then(|v| v.strip_prefix('='))
                        .map(|v| v.replace("%2F", "/").replace("%2f", "/"))
                })
            };
            let page: usize = param("page_number")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let size: usize = param("page_size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(50)
                .clamp(1, 100);
            let repo = param("repo_nwo");
            let sessions: Vec<Value> = st
                .sessions
                .lock()
                .unwrap()
                .iter()
                .rev()
                .filter(|(r, _)| repo.as_ref().is_none_or(|want| want == r))
                .skip((page.max(1) - 1) * size)
                .take(size)
                .map(|(_, s)| s.clone())
                .collect();
            Ok(answer(StatusCode::OK, json!({ "sessions": sessions })))
        }
        // The job behind a session (`GET /agents/swe/v1/jobs/{o}/{r}/session/{id}`): where the
        // problem statement is (the in-doubt lookup reads it).
        (Method::GET, ["agents", "swe", "v1", "jobs", owner, repo, "session", sid]) => {
            st.counts.lock().unwrap().job_reads += 1;
            let repo = format!("{owner}/{repo}");
            let n = sid.rsplit('-').next().and_then(|n| n.parse::<usize>().ok());
            let created = st.created.lock().unwrap();
            match n
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| created.get(i))
            {
                Some(c) if c.repo == repo => {
                    let mut job = st.answers.body("job");
                    job["job_id"] = json!(format!("job-{}", n.unwrap_or(0)));
                    job["session_id"] = json!(sid);
                    job["problem_statement"] = json!(c.statement);
                    drop(created);
                    Ok(answer(StatusCode::OK, job))
                }
                _ => Ok(full(StatusCode::NOT_FOUND, json!({"message": "Not Found"}))),
            }
        }
        _ => Ok(full(StatusCode::NOT_FOUND, json!({"message": "Not Found"}))),
    }
}
