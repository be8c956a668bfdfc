//! A fleet of simulated clients. Each client (an identity with its own `Authorization`) runs
//! `pollers` independent loops (VS Code windows); each loop sends one logical request per
//! period and reissues it per its [`Policy`] without cancelling earlier attempts.

use crate::client::{request, Credential, LabClient};
use crate::policy::{Budget, Policy};
use crate::stats::{Percentiles, Samples};
use bytes::Bytes;
use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

/// When a poller sends its next logical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Every `period_ms` (or as soon as the previous one finished, if it took longer).
    Fixed,
    /// `refresh_in` seconds (from the answer's JSON) after the previous one started, as a
    /// Copilot token refresher does; `period_ms` when the answer has none.
    TokenRefreshIn,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSpec {
    /// Identities (`Authorization: token {token_prefix}{i}`).
    pub clients: usize,
    /// Independent pollers per identity.
    pub pollers: usize,
    pub seconds: u64,
    pub period_ms: u64,
    pub schedule: Schedule,
    /// The upstream URL, `http://127.0.0.1:PORT/...`.
    pub url: String,
    /// Weir's address; `None` sends straight to the upstream.
    pub proxy: Option<SocketAddr>,
    pub policy: Policy,
    /// A logical request with no answer after this long counts as failed.
    pub give_up_ms: u64,
    pub seed: u64,
    pub token_prefix: String,
}

impl FleetSpec {
    /// The published experiment's shape: one request per 500 ms, one poller per client.
    pub fn new(clients: usize, seconds: u64, url: String, policy: Policy) -> FleetSpec {
        FleetSpec {
            clients,
            pollers: 1,
            seconds,
            period_ms: 500,
            schedule: Schedule::Fixed,
            url,
            proxy: None,
            policy,
            give_up_ms: 5_000,
            seed: 1,
            token_prefix: "c".to_string(),
        }
    }

    /// Open sockets this fleet can hold at its peak (each open attempt keeps a connection).
    pub fn peak_connections(&self, upstream_latency: Duration) -> usize {
        let per_attempt = self.policy.timeout().max(Duration::from_millis(1));
        let open = (upstream_latency.as_millis() / per_attempt.as_millis()).max(1) as usize + 1;
        self.clients * self.pollers * open
    }
}

/// What the clients saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub logical: u64,
    pub succeeded: u64,
    /// Logical requests with no successful answer before `give_up_ms`.
    pub failed: u64,
    /// Requests the clients sent (first attempts and reissues).
    pub attempts: u64,
    /// Attempts that ended in an error or a non-2xx answer.
    pub attempt_errors: u64,
    /// Time from the first attempt to the first good answer, of succeeded logical requests.
    pub latency: Percentiles,
}

#[derive(Default)]
struct Tally {
    logical: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    attempts: AtomicU64,
    attempt_errors: AtomicU64,
    latencies: Mutex<Samples>,
}

/// Runs the fleet for `spec.seconds`; `on_start` is called once, just before the first client
/// starts (the caller restarts the upstream's counters there).
pub async fn run(spec: &FleetSpec, on_start: impl FnOnce()) -> FleetReport {
    let client = LabClient::new(spec.proxy);
    let tally = Arc::new(Tally::default());
    on_start();
    let start = Instant::now();
    let end = start + Duration::from_secs(spec.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..spec.clients {
        for p in 0..spec.pollers {
            let token = format!("{}{c}", spec.token_prefix);
            let seed = spec
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add((c * spec.pollers + p) as u64);
            let poller = Poller {
                client: client.clone(),
                spec: spec.clone(),
                token,
                tally: tally.clone(),
            };
            tasks.spawn(poller.run(start, end, StdRng::seed_from_u64(seed)));
        }
    }
    while tasks.join_next().await.is_some() {}
    let latency = tally
        .latencies
        .lock()
        .map(|s| s.percentiles())
        .unwrap_or_default();
    FleetReport {
        logical: tally.logical.load(Relaxed),
        succeeded: tally.succeeded.load(Relaxed),
        failed: tally.failed.load(Relaxed),
        attempts: tally.attempts.load(Relaxed),
        attempt_errors: tally.attempt_errors.load(Relaxed),
        latency,
    }
}

struct Poller {
    client: LabClient,
    spec: FleetSpec,
    token: String,
    tally: Arc<Tally>,
}

impl Poller {
    async fn run(self, start: Instant, end: Instant, mut rng: StdRng) {
        let period = Duration::from_millis(self.spec.period_ms.max(1));
        // A random phase, so the fleet's requests spread over the period as real ones do.
        let mut next = start + period.mul_f64(rng.gen::<f64>());
        let mut budget = Budget::default();
        while next < end {
            sleep_until(next).await;
            let t0 = Instant::now();
            let answer = self.logical(&mut budget, &mut rng).await;
            next = t0
                + match (self.spec.schedule, answer.as_ref().and_then(refresh_in)) {
                    (Schedule::TokenRefreshIn, Some(r)) => r,
                    _ => period,
                };
        }
    }

    /// One logical request: the first good answer of any attempt, or `None` on giving up.
    async fn logical(&self, budget: &mut Budget, rng: &mut StdRng) -> Option<Bytes> {
        let policy = self.spec.policy;
        self.tally.logical.fetch_add(1, Relaxed);
        let start = Instant::now();
        let deadline = start + Duration::from_millis(self.spec.give_up_ms);
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.attempt(tx.clone());
        let mut sent = 1u32;
        let mut next = start + policy.gap(sent, rng.gen());
        loop {
            tokio::select! {
                Some((took, body)) = rx.recv() => match body {
                    Some(body) => {
                        budget.answered(&policy, took);
                        self.tally.succeeded.fetch_add(1, Relaxed);
                        if let Ok(mut l) = self.tally.latencies.lock() {
                            l.push(start.elapsed());
                        }
                        return Some(body);
                    }
                    None => {
                        self.tally.attempt_errors.fetch_add(1, Relaxed);
                    }
                },
                _ = sleep_until(next.min(deadline)) => {
                    if Instant::now() >= deadline {
                        self.tally.failed.fetch_add(1, Relaxed);
                        return None;
                    }
                    if budget.try_reissue(&policy) {
                        self.attempt(tx.clone());
                        sent += 1;
                    }
                    next = Instant::now() + policy.gap(sent, rng.gen());
                }
            }
        }
    }

    /// Sends one attempt on its own task: it stays open until it answers, whatever the
    /// logical request does meanwhile (nothing is cancelled).
    fn attempt(&self, tx: mpsc::UnboundedSender<(Duration, Option<Bytes>)>) {
        self.tally.attempts.fetch_add(1, Relaxed);
        let client = self.client.clone();
        let req = request(
            Method::GET,
            &self.spec.url,
            Credential::Token(&self.token),
            Bytes::new(),
        );
        tokio::spawn(async move {
            let t = Instant::now();
            let body = match req {
                Ok(req) => match client.send(req).await {
                    Ok(a) if a.status.is_success() => Some(a.body),
                    _ => None,
                },
                Err(_) => None,
            };
            // The logical request may be long done; then nobody listens, which is fine.
            let _ = tx.send((t.elapsed(), body));
        });
    }
}

/// `refresh_in` (seconds) of a Copilot token answer.
fn refresh_in(body: &Bytes) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("refresh_in")?.as_u64().map(Duration::from_secs)
}
