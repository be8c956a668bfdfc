//! Idle means asleep (#32): the replay workers and the housekeeping on a real SQLite queue,
//! counted call by call under paused time. Every store call runs beside a blocking task, so
//! tokio's paused clock cannot jump ahead while the store thread works: the clock moves only
//! when every task sleeps, as it would on an idle machine.

use super::backend::{ClaimKeeper, QueueBackend};
use super::lazy_sqlite::LazySqlite;
use super::replay::Replayer;
use super::{Queue, QueueState};
use crate::config::{LiveSettings, Settings};
use crate::events::Bus;
use crate::mode::Modes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use weir_store::{
    Change, Finish, HandOffRecord, Item, ListFilter, NewItem, Oldest, StateCounts, StoreError,
    UpstreamId,
};

/// A real backend, its calls counted in a [`Tally`] the test keeps.
struct Counted {
    inner: LazySqlite,
    tally: Arc<Tally>,
}

/// The calls made (and each claim's start and answer).
#[derive(Default)]
struct Tally {
    calls: Mutex<HashMap<&'static str, u32>>,
    claims: Mutex<Vec<(Instant, Option<i64>)>>,
    claimed: Notify,
    /// Armed by a test: the next claim reads the store, then waits here before answering
    /// (signalling the test on the first sender first).
    hold: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

/// Runs `f` with a blocking task in flight: tokio's paused clock does not advance meanwhile.
async fn held_clock<T>(f: impl std::future::Future<Output = T>) -> T {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let blocker = tokio::task::spawn_blocking(move || {
        let _ = rx.recv();
    });
    let out = f.await;
    drop(tx);
    let _ = blocker.await;
    out
}

impl Counted {
    fn count(&self, name: &'static str) {
        *self.tally.calls.lock().unwrap().entry(name).or_default() += 1;
    }
}

/// Counts the call and runs it with the clock held.
macro_rules! counted {
    ($self:ident, $name:literal, $call:expr) => {{
        $self.count($name);
        held_clock($call).await
    }};
}

#[async_trait::async_trait]
impl QueueBackend for Counted {
    fn kind(&self) -> super::backend::BackendKind {
        self.inner.kind()
    }
    async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        counted!(self, "insert", self.inner.insert(item, now_ms))
    }
    async fn live_usage(&self, identity: &str) -> Result<weir_store::Usage, StoreError> {
        counted!(self, "live_usage", self.inner.live_usage(identity))
    }
    async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        counted!(
            self,
            "insert_offered",
            self.inner
                .insert_offered(item, expires_at_ms, offer, now_ms)
        )
    }
    async fn apply(&self, id: i64, change: Change, now_ms: i64) -> Result<Item, StoreError> {
        counted!(self, "apply", self.inner.apply(id, change, now_ms))
    }
    async fn record_hand_off_result(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        counted!(
            self,
            "record_hand_off_result",
            self.inner.record_hand_off_result(id, finish, now_ms)
        )
    }
    async fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        counted!(self, "hand_off_record", self.inner.hand_off_record(id))
    }
    async fn list_offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        counted!(self, "list_offers", self.inner.list_offers(filter))
    }
    async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        counted!(self, "get", self.inner.get(id))
    }
    async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        counted!(self, "list", self.inner.list(filter))
    }
    async fn counts(&self) -> Result<StateCounts, StoreError> {
        counted!(self, "counts", self.inner.counts())
    }
    async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        counted!(
            self,
            "find_by_dedupe_key",
            self.inner.find_by_dedupe_key(key)
        )
    }
    async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        counted!(
            self,
            "find_by_provisional_id",
            self.inner.find_by_provisional_id(id)
        )
    }
    async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        counted!(self, "expired_offers", self.inner.expired_offers(now_ms))
    }
    async fn claim_next(
        &self,
        upstream: &UpstreamId,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
        let started = Instant::now();
        let got = counted!(self, "claim_next", self.inner.claim_next(upstream, now_ms));
        let hold = self.tally.hold.lock().unwrap().take();
        if let Some((entered, release)) = hold {
            let _ = entered.send(());
            let _ = release.await;
        }
        let id = got.as_ref().ok().and_then(|i| i.as_ref().map(|i| i.id));
        self.tally.claims.lock().unwrap().push((started, id));
        self.tally.claimed.notify_waiters();
        got
    }
    fn keep_claim(&self, id: i64) -> Option<ClaimKeeper> {
        self.inner.keep_claim(id)
    }
    async fn release(&self, id: i64) {
        counted!(self, "release", self.inner.release(id))
    }
    async fn idle_wait(&self, upstream: &UpstreamId, now_ms: i64) -> Option<Duration> {
        counted!(self, "idle_wait", self.inner.idle_wait(upstream, now_ms))
    }
    async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        counted!(
            self,
            "expire_older_than",
            self.inner.expire_older_than(max_age_ms, now_ms)
        )
    }
    async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        counted!(
            self,
            "recover_after_crash",
            self.inner.recover_after_crash(now_ms)
        )
    }
    async fn recover_while_running(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        self.inner.recover_while_running(now_ms).await
    }
    async fn purge_ended_before(&self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError> {
        counted!(
            self,
            "purge_ended_before",
            self.inner.purge_ended_before(updated_before_ms)
        )
    }
    async fn oldest(&self) -> Result<Oldest, StoreError> {
        counted!(self, "oldest", self.inner.oldest())
    }
}

fn new_item(n: u32, upstream: &str) -> NewItem {
    NewItem {
        upstream: UpstreamId::new(upstream),
        method: http::Method::POST,
        path_and_query: "/agents/swe/v1/jobs/octo/repo".into(),
        headers: vec![],
        body: format!(r#"{{"problem_statement":"task {n}"}}"#).into_bytes(),
        identity: "i".into(),
        credential_ref: None,
        dedupe_key: format!("k{n}"),
        repo: Some("octo/repo".into()),
        problem_statement: Some(format!("task {n}")),
        in_doubt: false,
        provisional: None,
    }
}

/// What the queue file holds when Weir starts.
enum File {
    /// No file (no create was ever queued).
    None,
    /// One create, queued and replayed (`done`).
    Replayed,
    /// One queued create older than the maximum age.
    TooOld,
}

/// A laptop queue with one replay worker (one upstream, at a loopback port nothing listens
/// on), running until the test ends.
struct Rig {
    _dir: tempfile::TempDir,
    queue: Arc<QueueState>,
    tally: Arc<Tally>,
    upstream: String,
}

impl Rig {
    /// The queue file as `file` says, then the workers and the housekeeping started.
    async fn start(max_age: Duration, file: File) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::default();
        settings.upstreams.truncate(1);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        settings.upstreams[0].origin = crate::config::Origin::parse(&origin).unwrap();
        let upstream = settings.upstreams[0].name.clone();
        let inner = LazySqlite::open(dir.path().join("queue.sqlite3"))
            .await
            .unwrap();
        let now = crate::queue::now_ms();
        match file {
            File::None => {}
            File::Replayed => {
                let it = inner.insert(new_item(1, &upstream), now).await.unwrap();
                inner.apply(it.id, Change::Replay, now).await.unwrap();
                let done = Change::Done {
                    result: serde_json::from_value(serde_json::json!({"job_id": "j1"})).unwrap(),
                };
                inner.apply(it.id, done, now).await.unwrap();
            }
            File::TooOld => {
                let old = now - max_age.as_millis() as i64 - 1_000;
                inner.insert(new_item(3, &upstream), old).await.unwrap();
            }
        }
        let tally = Arc::new(Tally::default());
        let store = Counted {
            inner,
            tally: tally.clone(),
        };
        let queue = Arc::new(QueueState::Open(Queue {
            store: Box::new(store),
            secrets: crate::secrets::SecretStore::Memory(Mutex::default()),
            #[cfg(feature = "gateway")]
            sealed: None,
            wake: Arc::new(Notify::new()),
            max_age,
            kept: Default::default(),
            admitting: tokio::sync::Mutex::new(()),
        }));
        let bus = Bus::new();
        let accounts = Arc::new(
            crate::accounts::Accounts::open(
                &settings,
                crate::identity::IdentityKey::new([5; 32]),
                dir.path(),
            )
            .await,
        );
        let upstreams = Arc::new(crate::upstream::Upstreams::new(
            LiveSettings::new(settings),
            accounts.clone(),
        ));
        Replayer {
            queue: queue.clone(),
            accounts,
            upstreams,
            bus: bus.clone(),
            modes: Arc::new(Modes::load(None, bus)),
            lookups: Default::default(),
        }
        .spawn_workers();
        Rig {
            _dir: dir,
            queue,
            tally,
            upstream,
        }
    }

    fn q(&self) -> &Queue {
        self.queue.open().unwrap()
    }

    fn calls(&self, name: &str) -> u32 {
        self.tally
            .calls
            .lock()
            .unwrap()
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    fn claims(&self) -> Vec<(Instant, Option<i64>)> {
        self.tally.claims.lock().unwrap().clone()
    }
}

/// A queue file left by a create that was queued and replayed (one ended item), nothing due:
/// over ten idle minutes the worker claims once, at start (nothing of its upstream waits, so
/// only a change can make something due; it claimed every five minutes, and once a second
/// before that) and nothing runs expiry or purge, since nothing can expire for a week.
#[tokio::test(start_paused = true)]
async fn an_idle_worker_sleeps_until_something_is_due() {
    let rig = Rig::start(Duration::from_secs(24 * 3600), File::Replayed).await;
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(600) - Duration::from_millis(1)).await;
    assert!(start.elapsed() >= Duration::from_secs(599));
    let claims = rig.calls("claim_next");
    assert_eq!(claims, 1, "one claim at start, then asleep until a change");
    assert!(rig.calls("idle_wait") <= claims);
    assert_eq!(rig.calls("expire_older_than"), 0, "nothing could expire");
    assert_eq!(
        rig.calls("purge_ended_before"),
        0,
        "nothing could be purged"
    );
    assert!(rig.calls("oldest") <= 3, "{}", rig.calls("oldest"));
}

/// No queue file (no create was ever queued): after the first look at start nothing wakes
/// for an hour, neither the worker nor the housekeeping (#32 item 4: both woke every five
/// minutes). The first insert wakes them (`an_insert_during_the_claim_wakes_the_worker_at_once`).
#[tokio::test(start_paused = true)]
async fn without_a_queue_file_nothing_wakes() {
    let rig = Rig::start(Duration::from_secs(24 * 3600), File::None).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (claims, oldest) = (rig.calls("claim_next"), rig.calls("oldest"));
    assert_eq!(claims, 1, "the first claim, at start");
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(rig.calls("claim_next"), claims, "no claim in the hour");
    assert_eq!(rig.calls("idle_wait"), 1, "no idle wait asked again");
    assert_eq!(
        rig.calls("oldest"),
        oldest,
        "no housekeeping pass in the hour"
    );
}

/// The race a long sleep must not lose: the claim read an empty queue, a create was
/// inserted (and the workers woken) before the worker went to sleep. The wake-up is kept,
/// and the item is claimed at once, not after the next due time (or the old 1 s tick).
#[tokio::test(start_paused = true)]
async fn an_insert_during_the_claim_wakes_the_worker_at_once() {
    let rig = Rig::start(Duration::from_secs(24 * 3600), File::None).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(rig.claims().len(), 1, "the first claim, then asleep");
    let (entered_tx, entered) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    *rig.tally.hold.lock().unwrap() = Some((entered_tx, release_rx));
    // Something changed (a retry, say): the worker claims and finds nothing due.
    rig.q().wake.notify_waiters();
    entered.await.unwrap();
    // A create arrives while that empty answer is on its way back.
    let item = rig
        .q()
        .store
        .insert(new_item(2, &rig.upstream), crate::queue::now_ms())
        .await
        .unwrap();
    let inserted = Instant::now();
    rig.q().wake.notify_waiters();
    release.send(()).unwrap();
    loop {
        let claimed = rig.tally.claimed.notified();
        tokio::pin!(claimed);
        claimed.as_mut().enable();
        if let Some((at, _)) = rig.claims().iter().find(|(_, id)| *id == Some(item.id)) {
            let after = at.duration_since(inserted);
            assert!(
                after < Duration::from_millis(500),
                "claimed {after:?} after the insert"
            );
            break;
        }
        claimed.await;
    }
    assert_eq!(rig.claims()[1].1, None, "the held claim found nothing");
}

/// A create older than the maximum age, left by an earlier run: expiry runs because
/// something can expire, before any worker starts, so it is never claimed.
#[tokio::test(start_paused = true)]
async fn what_can_expire_expires_before_any_replay() {
    let max_age = Duration::from_secs(3600);
    let rig = Rig::start(max_age, File::TooOld).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(rig.calls("expire_older_than"), 1);
    assert_eq!(rig.calls("purge_ended_before"), 1);
    assert!(rig.claims().iter().all(|(_, id)| id.is_none()));
    let counts = rig.q().store.counts().await.unwrap();
    assert_eq!((counts.expired, counts.queued), (1, 0));
}
