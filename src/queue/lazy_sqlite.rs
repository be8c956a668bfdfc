//! The laptop's queue file, made when the first create is queued: a Weir whose creates all go
//! through never writes `queue.sqlite3` (issue 21, "start what is used"). A file left by an
//! earlier run is opened at start, because items may wait in it and a crash's `replaying`
//! items must become `in_doubt` before any replay. Until the file exists every read answers
//! as an empty queue would; the first insert creates it (0600, migrated) and from then on the
//! [`AsyncStore`] answers everything.

use super::backend::{BackendKind, ClaimKeeper, QueueBackend};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;
use weir_store::{
    AsyncStore, Change, Finish, HandOffRecord, Item, ListFilter, NewItem, Oldest, StateCounts,
    StoreError, StoreOptions, UpstreamId, Usage,
};

pub struct LazySqlite {
    path: PathBuf,
    store: OnceCell<AsyncStore>,
    /// Why the file could not be made at the last try (shown in the status until it can).
    failed: std::sync::Mutex<Option<String>>,
}

impl LazySqlite {
    /// Opens `path` now if it exists; otherwise nothing is created until the first insert.
    pub async fn open(path: PathBuf) -> Result<LazySqlite, StoreError> {
        let me = LazySqlite {
            path,
            store: OnceCell::new(),
            failed: std::sync::Mutex::new(None),
        };
        if me.path.exists() {
            me.created().await?;
        } else {
            writable_dir(&me.path)?;
        }
        Ok(me)
    }

    /// The store, creating its file if this is the first write.
    async fn created(&self) -> Result<&AsyncStore, StoreError> {
        let made = self
            .store
            .get_or_try_init(|| AsyncStore::open(self.path.clone(), StoreOptions::default()))
            .await;
        if let Ok(mut f) = self.failed.lock() {
            *f = made
                .as_ref()
                .err()
                .map(|e| format!("{}. {}", e.detail(), e.fix()));
        }
        made
    }

    /// The store, if its file exists.
    fn existing(&self) -> Option<&AsyncStore> {
        self.store.get()
    }

    /// Reports a write to the existing file that failed for the file's sake (full disk,
    /// read-only, locked by another process, damaged) in the status until a write succeeds:
    /// the replay worker only logged it, so a queue stuck on a full disk showed as available
    /// with nothing wrong while no item could move.
    fn note<T>(&self, r: &Result<T, StoreError>) {
        let now = match r {
            Ok(_) => None,
            Err(
                e @ (StoreError::Full { .. }
                | StoreError::ReadOnly { .. }
                | StoreError::Locked { .. }
                | StoreError::Io { .. }
                | StoreError::Corrupt { .. }
                | StoreError::Other { .. }
                | StoreError::Closed),
            ) => Some(format!("{e}. {}", e.fix())),
            // About the item (gone, already ended, a duplicate): the file is fine.
            Err(_) => return,
        };
        if let Ok(mut f) = self.failed.lock() {
            *f = now;
        }
    }
}

/// A data dir the queue could not be made in is said at start, as when the file was opened
/// then: the status and the tray show the queue unavailable with the fix, before any create
/// depends on it. Probed with a file made and removed at once.
fn writable_dir(path: &Path) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let probe = dir.join(".queue-probe");
    let made = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
            .map(drop)
    });
    let _ = std::fs::remove_file(&probe);
    made.map_err(|e| StoreError::from_io(path, e))
}

/// What the store answers, or what an empty queue would (no file yet).
macro_rules! or_empty {
    ($self:ident, $empty:expr, |$s:ident| $call:expr) => {
        match $self.existing() {
            Some($s) => $call.await,
            None => Ok($empty),
        }
    };
}

#[async_trait::async_trait]
impl QueueBackend for LazySqlite {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn unusable(&self) -> Option<String> {
        self.failed.lock().ok()?.clone()
    }

    async fn insert(&self, item: NewItem, now_ms: i64) -> Result<Item, StoreError> {
        self.created().await?.insert(item, now_ms).await
    }

    async fn insert_offered(
        &self,
        item: NewItem,
        expires_at_ms: i64,
        offer: serde_json::Value,
        now_ms: i64,
    ) -> Result<Item, StoreError> {
        let s = self.created().await?;
        s.insert_offered(item, expires_at_ms, offer, now_ms).await
    }

    async fn apply(&self, id: i64, change: Change, now_ms: i64) -> Result<Item, StoreError> {
        match self.existing() {
            Some(s) => {
                let r = s.apply(id, change, now_ms).await;
                self.note(&r);
                r
            }
            None => Err(StoreError::NotFound { id }),
        }
    }

    async fn record_hand_off_result(
        &self,
        id: i64,
        finish: Finish,
        now_ms: i64,
    ) -> Result<HandOffRecord, StoreError> {
        match self.existing() {
            Some(s) => s.record_hand_off_result(id, finish, now_ms).await,
            None => Err(StoreError::NotFound { id }),
        }
    }

    async fn hand_off_record(&self, id: i64) -> Result<Option<HandOffRecord>, StoreError> {
        or_empty!(self, None, |s| s.hand_off_record(id))
    }

    async fn list_offers(
        &self,
        filter: ListFilter,
    ) -> Result<Vec<(Item, HandOffRecord)>, StoreError> {
        or_empty!(self, Vec::new(), |s| s.list_offers(filter))
    }

    async fn get(&self, id: i64) -> Result<Option<Item>, StoreError> {
        or_empty!(self, None, |s| s.get(id))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s.list(filter))
    }

    async fn counts(&self) -> Result<StateCounts, StoreError> {
        or_empty!(self, StateCounts::default(), |s| s.counts())
    }

    async fn live_usage(&self, identity: &str) -> Result<Usage, StoreError> {
        or_empty!(self, Usage::default(), |s| s.live_usage(identity))
    }

    async fn find_by_dedupe_key(&self, key: &str) -> Result<Option<Item>, StoreError> {
        or_empty!(self, None, |s| s.find_by_dedupe_key(key))
    }

    async fn find_by_provisional_id(&self, id: &str) -> Result<Option<Item>, StoreError> {
        or_empty!(self, None, |s| s.find_by_provisional_id(id))
    }

    async fn expired_offers(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s.expired_offers(now_ms))
    }

    async fn claim_next(
        &self,
        upstream: &UpstreamId,
        now_ms: i64,
    ) -> Result<Option<Item>, StoreError> {
        // Only the file's own answers are noted: with no file (it could not be made), the
        // empty answer must not clear that report.
        let Some(s) = self.existing() else {
            return Ok(None);
        };
        let r = s.claim_next(upstream, now_ms).await;
        self.note(&r);
        r
    }

    fn keep_claim(&self, id: i64) -> Option<ClaimKeeper> {
        self.existing().and_then(|s| s.keep_claim(id))
    }

    async fn release(&self, id: i64) {
        if let Some(s) = self.existing() {
            s.release(id).await
        }
    }

    async fn idle_wait(&self, upstream: &UpstreamId, now_ms: i64) -> Option<Duration> {
        match self.existing() {
            Some(s) => s.idle_wait(upstream, now_ms).await,
            // No file, nothing due: the first insert wakes the workers (`Queue::wake`).
            None => None,
        }
    }

    async fn expire_older_than(
        &self,
        max_age_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s
            .expire_older_than(max_age_ms, now_ms))
    }

    async fn recover_after_crash(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s.recover_after_crash(now_ms))
    }

    async fn recover_while_running(&self, now_ms: i64) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s.recover_while_running(now_ms))
    }

    async fn purge_ended_before(&self, updated_before_ms: i64) -> Result<Vec<Item>, StoreError> {
        or_empty!(self, Vec::new(), |s| s
            .purge_ended_before(updated_before_ms))
    }

    async fn oldest(&self) -> Result<Oldest, StoreError> {
        or_empty!(self, Oldest::default(), |s| s.oldest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_file_until_the_first_insert_and_reads_answer_empty_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.sqlite3");
        let q = LazySqlite::open(path.clone()).await.unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the write probe is gone"
        );
        let up = UpstreamId::new("copilot-api");
        assert_eq!(q.counts().await.unwrap(), StateCounts::default());
        assert!(q.claim_next(&up, 1).await.unwrap().is_none());
        assert!(q.recover_after_crash(1).await.unwrap().is_empty());
        assert!(q.expire_older_than(1, 2).await.unwrap().is_empty());
        assert!(matches!(
            q.apply(1, Change::Cancel, 1).await,
            Err(StoreError::NotFound { id: 1 })
        ));
        assert!(!path.exists(), "reads made no file");

        let item = q.insert(new_item(&up), 1).await.unwrap();
        assert!(path.exists(), "the first insert made the file");
        assert_eq!(q.counts().await.unwrap().queued, 1);
        drop(q);
        // A file from an earlier run is opened at start, its items there.
        let q = LazySqlite::open(path).await.unwrap();
        assert_eq!(q.get(item.id).await.unwrap().map(|i| i.id), Some(item.id));
    }

    #[tokio::test]
    async fn a_data_dir_it_cannot_make_the_queue_in_is_said_at_start() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the data dir should be: nothing can be made in it, root or not.
        let not_a_dir = dir.path().join("data");
        std::fs::write(&not_a_dir, b"x").unwrap();
        let r = LazySqlite::open(not_a_dir.join("queue.sqlite3")).await;
        assert!(matches!(r, Err(StoreError::Io { .. })), "{:?}", r.err());
    }

    #[tokio::test]
    async fn a_file_it_cannot_make_is_reported_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let q = LazySqlite::open(data.join("queue.sqlite3")).await.unwrap();
        assert_eq!(q.unusable(), None);
        // The data dir replaced by a file after start: the first insert cannot make the queue.
        std::fs::remove_dir_all(&data).unwrap();
        std::fs::write(&data, b"x").unwrap();
        let up = UpstreamId::new("copilot-api");
        assert!(q.insert(new_item(&up), 1).await.is_err());
        let why = q.unusable().expect("reported");
        assert!(why.contains("queue.sqlite3"), "{why}");
        // The replay worker's polls (no file: nothing to claim) leave the report in place.
        assert!(q.claim_next(&up, 2).await.unwrap().is_none());
        assert!(q.unusable().is_some(), "still reported");
        // Mended: the next insert makes it, and the report is gone.
        std::fs::remove_file(&data).unwrap();
        std::fs::create_dir(&data).unwrap();
        q.insert(new_item(&up), 2).await.unwrap();
        assert_eq!(q.unusable(), None);
    }

    /// A write the file refuses (here: another process holds its write lock, as a second
    /// Weir on the same data dir would) is in the status until a write goes through.
    #[tokio::test]
    async fn a_write_the_file_refuses_is_reported_until_one_goes_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.sqlite3");
        let q = LazySqlite::open(path.clone()).await.unwrap();
        let up = UpstreamId::new("copilot-api");
        let item = q.insert(new_item(&up), 1).await.unwrap();
        assert_eq!(q.unusable(), None);
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let change = || Change::Reschedule {
            at: 5,
            error: "upstream answered 503".into(),
        };
        assert!(q.apply(item.id, change(), 2).await.is_err());
        let why = q.unusable().expect("reported");
        assert!(why.contains("locked"), "{why}");
        other.execute_batch("ROLLBACK").unwrap();
        q.apply(item.id, change(), 3).await.unwrap();
        assert_eq!(q.unusable(), None);
    }

    fn new_item(up: &UpstreamId) -> NewItem {
        NewItem {
            upstream: up.clone(),
            method: http::Method::POST,
            path_and_query: "/agents/swe/v1/jobs/o/r".into(),
            headers: vec![],
            body: b"{}".to_vec(),
            identity: "i".into(),
            credential_ref: None,
            dedupe_key: "k".into(),
            repo: Some("o/r".into()),
            problem_statement: Some("x".into()),
            in_doubt: false,
            provisional: None,
        }
    }
}
