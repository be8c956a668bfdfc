//! The tools on a developer's laptop as the Oct 29 scenario runs them: pollers of the session
//! list (each with its own retry habit) and a person creating sessions who presses "create"
//! again on an error.

use crate::client::{request, Credential, LabClient};
use crate::stats::{Percentiles, Samples};
use bytes::Bytes;
use http::{HeaderValue, Method};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::{sleep, sleep_until, Instant};

/// One polling tool.
#[derive(Debug, Clone)]
pub struct Surface {
    pub user_agent: &'static str,
    pub period: Duration,
    /// Immediate retries after an error answer.
    pub retries: u32,
    /// `true`: `Cookie: user_session=…`; else `Authorization: token …`.
    pub cookie: bool,
    pub secret: String,
}

impl Surface {
    pub fn vscode(dev: usize) -> Surface {
        let ua = "Visual Studio Code/1.105.0 GitHubCopilotChat/0.32.0";
        Surface {
            user_agent: ua,
            period: Duration::from_secs(5),
            retries: 2,
            cookie: false,
            secret: format!("vsc-{dev}"),
        }
    }
    pub fn cli(dev: usize) -> Surface {
        Surface {
            user_agent: "GitHub CLI 2.81.0",
            period: Duration::from_secs(10),
            retries: 1,
            cookie: false,
            secret: format!("gh-{dev}"),
        }
    }
    pub fn browser(dev: usize) -> Surface {
        let ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/141.0 Safari/537.36";
        Surface {
            user_agent: ua,
            period: Duration::from_secs(10),
            retries: 0,
            cookie: true,
            secret: format!("web-{dev}"),
        }
    }

    fn credential(&self) -> Credential<'_> {
        if self.cookie {
            Credential::Cookie(&self.secret)
        } else {
            Credential::Token(&self.secret)
        }
    }
}

/// What the pollers saw, per logical list call (its retries included).
#[derive(Debug, Default)]
pub struct PollTally {
    calls: AtomicU64,
    errors: AtomicU64,
    attempts: AtomicU64,
    latencies: Mutex<Samples>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Polls {
    pub calls: u64,
    pub errors: u64,
    pub attempts: u64,
    pub latency: Percentiles,
}

impl Polls {
    pub fn success_fraction(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            (self.calls - self.errors) as f64 / self.calls as f64
        }
    }
}

impl PollTally {
    pub fn snapshot(&self) -> Polls {
        Polls {
            calls: self.calls.load(Relaxed),
            errors: self.errors.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            latency: self
                .latencies
                .lock()
                .map(|l| l.percentiles())
                .unwrap_or_default(),
        }
    }
}

/// Polls `url` every `surface.period` (random phase) until `end`.
pub async fn poll_loop(
    client: LabClient,
    url: String,
    surface: Surface,
    start: Instant,
    end: Instant,
    tally: std::sync::Arc<PollTally>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = start + surface.period.mul_f64(rng.gen::<f64>());
    while next < end {
        sleep_until(next).await;
        let t0 = Instant::now();
        tally.calls.fetch_add(1, Relaxed);
        let mut ok = false;
        for _ in 0..=surface.retries {
            tally.attempts.fetch_add(1, Relaxed);
            if send(&client, Method::GET, &url, &surface, Bytes::new())
                .await
                .is_some_and(|s| s.is_success())
            {
                ok = true;
                break;
            }
        }
        if ok {
            if let Ok(mut l) = tally.latencies.lock() {
                l.push(t0.elapsed());
            }
        } else {
            tally.errors.fetch_add(1, Relaxed);
        }
        next = (t0 + surface.period).max(Instant::now());
    }
}

/// The status of one request, `None` if it failed without an answer.
async fn send(
    client: &LabClient,
    method: Method,
    url: &str,
    s: &Surface,
    body: Bytes,
) -> Option<http::StatusCode> {
    let mut req = request(method, url, s.credential(), body).ok()?;
    req.headers_mut().insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(s.user_agent),
    );
    client.send(req).await.ok().map(|a| a.status)
}

/// What the person creating sessions did.
#[derive(Debug, Default)]
pub struct CreateTally {
    intents: Mutex<Vec<String>>,
    presses: AtomicU64,
    created: AtomicU64,
    queued: AtomicU64,
    gave_up: AtomicU64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Creates {
    pub intended: u64,
    pub presses: u64,
    /// Answered 2xx other than 202.
    pub created: u64,
    /// Answered 202 (Weir queued it).
    pub queued: u64,
    /// Every press answered an error.
    pub gave_up: u64,
}

impl CreateTally {
    pub fn intended(&self) -> Vec<String> {
        self.intents.lock().map(|v| v.clone()).unwrap_or_default()
    }

    pub fn snapshot(&self) -> Creates {
        Creates {
            intended: self.intended().len() as u64,
            presses: self.presses.load(Relaxed),
            created: self.created.load(Relaxed),
            queued: self.queued.load(Relaxed),
            gave_up: self.gave_up.load(Relaxed),
        }
    }
}

/// Presses before the person gives up on one intent.
const PRESSES: u32 = 3;

/// A person creating one session per `period` (random phase) and pressing "create" again on
/// an error.
pub struct CreateLoop {
    pub client: LabClient,
    pub url: String,
    pub dev: usize,
    pub period: Duration,
    pub tally: std::sync::Arc<CreateTally>,
    pub seed: u64,
}

impl CreateLoop {
    /// Creates until `end`.
    pub async fn run(self, start: Instant, end: Instant) {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut next = start + self.period.mul_f64(rng.gen::<f64>());
        let vscode = Surface::vscode(self.dev);
        let mut k = 0;
        while next < end {
            sleep_until(next).await;
            let intent = format!("d{}-{k}", self.dev);
            k += 1;
            if let Ok(mut v) = self.tally.intents.lock() {
                v.push(intent.clone());
            }
            let body = serde_json::json!({ "problem_statement": format!("lab task {intent}"), "intent": intent }).to_string();
            if !self.press(&vscode, Bytes::from(body)).await {
                self.tally.gave_up.fetch_add(1, Relaxed);
            }
            next += self.period;
        }
    }

    /// Up to [`PRESSES`] presses; whether one was accepted.
    async fn press(&self, vscode: &Surface, body: Bytes) -> bool {
        for _ in 0..PRESSES {
            self.tally.presses.fetch_add(1, Relaxed);
            match send(&self.client, Method::POST, &self.url, vscode, body.clone()).await {
                Some(s) if s == http::StatusCode::ACCEPTED => {
                    self.tally.queued.fetch_add(1, Relaxed);
                    return true;
                }
                Some(s) if s.is_success() => {
                    self.tally.created.fetch_add(1, Relaxed);
                    return true;
                }
                // An error on screen: the person looks, then presses again.
                _ => sleep(Duration::from_secs(2)).await,
            }
        }
        false
    }
}
