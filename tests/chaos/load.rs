//! The clients of the chaos run: several identities, each listing its repository's sessions as
//! gh and VS Code do (`page_number`/`page_size`, `repo_nwo`, `sort=last_updated_at,desc`) and
//! now and then creating a task with a statement no other create has, through whichever replica
//! the round robin gives. Every answer is judged (a response, a problem+json, or invalid) and
//! every create is recorded with what its client was told.

use crate::fleet::{Fleet, Target};
use crate::gw::{send, Answer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A client gives up on an answer after this long (then the request counts as unanswered).
pub const GIVE_UP: Duration = Duration::from_secs(90);

/// What a client was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Told {
    /// 2xx with the JSON the real clients parse (a create's `job_id` + `session_id`, or a
    /// queued job; a list's `sessions` array).
    Ok(u16),
    /// An error the upstream gave, forwarded as it was (JSON `{"message": …}`).
    UpstreamError(u16),
    /// `application/problem+json` whose `status` is the HTTP status.
    /// Status, type, and whether the problem says the create may exist upstream already
    /// (`maybe_created`).
    Problem(u16, String, bool),
    /// The connection broke because its replica was killed under it.
    Cut,
    /// Anything else: a transport error from a live replica, no answer in [`GIVE_UP`], a body
    /// that is not what its status promises.
    Invalid(String),
}

#[derive(Debug, Clone)]
pub struct CreateRecord {
    pub statement: String,
    pub token: String,
    pub told: Told,
}

#[derive(Default)]
pub struct Tally {
    pub creates: Vec<CreateRecord>,
    pub lists: Vec<Told>,
}

/// Judges one answer. `create` says which 2xx shape is expected.
pub fn judge(a: &Answer, create: bool) -> Told {
    let ct = a
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let v: Option<serde_json::Value> = serde_json::from_slice(&a.body).ok();
    if ct.starts_with("application/problem+json") {
        return match v {
            Some(p) if p["status"].as_u64() == Some(a.status as u64) && p["title"].is_string() => {
                Told::Problem(
                    a.status,
                    p["type"].as_str().unwrap_or("").to_string(),
                    p["maybe_created"] == true,
                )
            }
            _ => Told::Invalid(format!(
                "a problem that does not say its status: {}",
                a.status
            )),
        };
    }
    let Some(v) = v else {
        return Told::Invalid(format!("{}: a body that is not JSON", a.status));
    };
    if (200..300).contains(&a.status) {
        let shaped = if create {
            v["job_id"].is_string() || v["id"].is_string() || v["job_id"].is_number()
        } else {
            v["sessions"].is_array()
        };
        return if shaped {
            Told::Ok(a.status)
        } else {
            Told::Invalid(format!("{}: {v}", a.status))
        };
    }
    if v["message"].is_string() {
        Told::UpstreamError(a.status)
    } else {
        Told::Invalid(format!("{}: {v}", a.status))
    }
}

pub struct Load {
    pub fleet: Fleet,
    pub cert_der: Vec<u8>,
    pub upstream: SocketAddr,
    pub seed: u64,
    pub tally: Arc<Mutex<Tally>>,
}

/// The repository identity `k` works in (two identities share each).
pub fn repo_of(k: usize) -> String {
    format!("octo/app-{}", k / 2)
}

impl Load {
    /// Runs `identities` clients until `stop`; each waits its own jittered period (1–3 s)
    /// between lists and creates on about one turn in four.
    pub async fn run(self: Arc<Self>, identities: usize, stop: Instant) {
        let mut tasks = tokio::task::JoinSet::new();
        for k in 0..identities {
            let me = self.clone();
            tasks.spawn(async move {
                let mut rng =
                    StdRng::seed_from_u64(me.seed.wrapping_mul(31).wrapping_add(k as u64));
                let token = format!("Bearer chaos-user-{k}");
                let mut n = 0u64;
                let mut inflight = tokio::task::JoinSet::new();
                while Instant::now() < stop {
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(1000..3000))).await;
                    let (me1, token1) = (me.clone(), token.clone());
                    // A tool does not wait for its previous call before its next poll.
                    inflight.spawn(async move { me1.list(&token1, k).await });
                    if rng.gen_bool(0.25) {
                        n += 1;
                        let statement = format!("chaos seed {} task {n} by user-{k}", me.seed);
                        let (me2, token2) = (me.clone(), token.clone());
                        inflight.spawn(async move { me2.create(&token2, k, statement).await });
                    }
                }
                while inflight.join_next().await.is_some() {}
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn call(
        &self,
        method: &str,
        target: &str,
        token: &str,
        body: &str,
        create: bool,
    ) -> Told {
        let Some(t) = self.fleet.pick() else {
            return Told::Cut;
        };
        // gh's headers (corpus call `gh.create`); the token is `Bearer`, as gh sends it.
        let headers = [
            ("authorization", token),
            ("content-type", "application/json"),
            ("copilot-integration-id", "copilot-4-cli"),
            ("x-github-api-version", "2026-01-09"),
        ];
        let r = tokio::time::timeout(
            GIVE_UP,
            send(t.addr, &self.cert_der, method, target, &headers, body),
        )
        .await;
        self.told(&t, r, create)
    }

    fn told(
        &self,
        t: &Target,
        r: Result<Result<Answer, String>, tokio::time::error::Elapsed>,
        create: bool,
    ) -> Told {
        match r {
            Ok(Ok(a)) => judge(&a, create),
            // Refused or reset by a process that is gone: the client would reconnect elsewhere.
            Ok(Err(_)) | Err(_) if !self.fleet.alive(t) => Told::Cut,
            Ok(Err(e)) => Told::Invalid(format!("transport error from a live replica: {e}")),
            Err(_) => Told::Invalid(format!("no answer in {}s", GIVE_UP.as_secs())),
        }
    }

    async fn list(&self, token: &str, k: usize) {
        let target = format!(
            "http://{}/agents/sessions?page_number=1&page_size=20&repo_nwo={}&sort=last_updated_at%2Cdesc",
            self.upstream,
            repo_of(k).replace('/', "%2F")
        );
        let told = self.call("GET", &target, token, "", false).await;
        self.tally.lock().unwrap().lists.push(told);
    }

    async fn create(&self, token: &str, k: usize, statement: String) {
        // gh's create as the corpus has it (`gh.create`, from cli/cli
        // pkg/cmd/agent-task/capi/job.go): `pull_request` is always present.
        let body = serde_json::json!({
            "problem_statement": statement,
            "event_type": "gh_cli",
            "pull_request": {},
        })
        .to_string();
        let target = format!("http://{}/agents/swe/v1/jobs/{}", self.upstream, repo_of(k));
        let told = self.call("POST", &target, token, &body, true).await;
        self.tally.lock().unwrap().creates.push(CreateRecord {
            statement,
            token: token.to_string(),
            told,
        });
    }
}
