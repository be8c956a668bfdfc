//! Keeping list, view and log (`stream` document) entries across restarts: at start the sealed rows of `cache.sqlite`
//! are opened and loaded into memory; afterwards one writer thread, fed by a bounded channel,
//! seals and writes new entries. The request path only ever `try_send`s: a full channel drops
//! the write (counted), a failing disk turns persistence off for the run (the status says why),
//! and neither ever holds a request.
//!
//! Persistence needs the OS keychain (the sealing key lives there). Without one, with a key
//! that cannot be read right now, or with `cache.persist = false`, the cache is memory only and
//! nothing is written.

use super::disk::{Disk, DiskError, Row};
use super::record::{self, Sealer, WallTimes};
use super::{CacheKey, Stored};
use crate::secrets::persistent::{plan, Plan};
use crate::secrets::{Account, SecretStore};
use crate::status::{CachePersistence, MemoryOnlyReason};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Writes waiting for the disk; past this the newest are dropped (the entry stays in memory).
const QUEUE: usize = 1024;
/// Writes put in one transaction.
const BATCH: usize = 64;

/// Why the cache could not be cleared on disk.
#[derive(Debug, thiserror::Error)]
pub enum ClearError {
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("the cache writer has stopped")]
    WriterStopped,
}

pub(super) enum Cmd {
    Put {
        key: CacheKey,
        entry: Arc<Stored>,
        times: WallTimes,
    },
    Clear(oneshot::Sender<Result<(), DiskError>>),
    /// Everything sent before is on disk when the reply comes; `close` also stops the thread.
    Flush {
        close: bool,
        done: oneshot::Sender<()>,
    },
}

/// What the status reads, kept current by the writer thread.
pub(super) struct Shared {
    file: String,
    max_bytes: u64,
    entries: AtomicU64,
    bytes: AtomicU64,
    loaded: u64,
    rejected: u64,
    dropped: AtomicU64,
    failed: Mutex<Option<String>>,
}

/// Whether and how entries are kept on disk.
pub(super) enum Persistence {
    MemoryOnly {
        reason: MemoryOnlyReason,
        detail: String,
    },
    Disk {
        tx: mpsc::Sender<Cmd>,
        shared: Arc<Shared>,
    },
}

impl Persistence {
    pub(super) fn memory_only(reason: MemoryOnlyReason, detail: impl Into<String>) -> Persistence {
        Persistence::MemoryOnly {
            reason,
            detail: detail.into(),
        }
    }

    /// Hands `entry` to the writer; never waits.
    pub(super) fn put(&self, key: CacheKey, entry: Arc<Stored>) {
        let Persistence::Disk { tx, shared } = self else {
            return;
        };
        if shared.failed.lock().map(|f| f.is_some()).unwrap_or(true) {
            return;
        }
        let times = WallTimes::of(&entry, Instant::now(), SystemTime::now());
        if tx.try_send(Cmd::Put { key, entry, times }).is_err() {
            shared.dropped.fetch_add(1, Relaxed);
        }
    }

    pub(super) async fn clear(&self) -> Result<(), ClearError> {
        let Persistence::Disk { tx, .. } = self else {
            return Ok(());
        };
        let (done, rx) = oneshot::channel();
        tx.send(Cmd::Clear(done))
            .await
            .map_err(|_| ClearError::WriterStopped)?;
        Ok(rx.await.map_err(|_| ClearError::WriterStopped)??)
    }

    /// Waits until every write sent so far is on disk; `close` stops the writer afterwards.
    pub(super) async fn flush(&self, close: bool) {
        if let Persistence::Disk { tx, .. } = self {
            let (done, rx) = oneshot::channel();
            if tx.send(Cmd::Flush { close, done }).await.is_ok() {
                let _ = rx.await;
            }
        }
    }

    pub(super) fn status(&self) -> CachePersistence {
        match self {
            Persistence::MemoryOnly { reason, detail } => CachePersistence::MemoryOnly {
                reason: *reason,
                detail: detail.clone(),
            },
            Persistence::Disk { shared, .. } => {
                match shared.failed.lock().ok().and_then(|f| f.clone()) {
                    Some(detail) => CachePersistence::MemoryOnly {
                        reason: MemoryOnlyReason::WriteFailed,
                        detail,
                    },
                    None => CachePersistence::Persisted {
                        file: shared.file.clone(),
                        entries: shared.entries.load(Relaxed),
                        bytes: shared.bytes.load(Relaxed),
                        max_bytes: shared.max_bytes,
                        loaded_at_start: shared.loaded,
                        rejected_at_start: shared.rejected,
                        dropped_writes: shared.dropped.load(Relaxed),
                    },
                }
            }
        }
    }
}

/// What [`open`] found on disk, for the cache to load.
pub(super) struct Opened {
    pub persistence: Persistence,
    /// Entries still servable, oldest first.
    pub entries: Vec<(CacheKey, Stored)>,
}

/// Opens the disk cache under `data_dir` (with `disk_max_bytes`, or memory only when `None`):
/// reads the sealing key from the keychain, loads what is still servable, starts the writer.
pub(super) async fn open(
    data_dir: &Path,
    disk_max_bytes: Option<u64>,
    secrets: &SecretStore,
) -> Opened {
    let memory_only = |reason, detail: String| {
        if reason != MemoryOnlyReason::Disabled {
            tracing::warn!(detail = %detail, "the cache is kept in memory only (lost on restart)");
        }
        Opened {
            persistence: Persistence::memory_only(reason, detail),
            entries: Vec::new(),
        }
    };
    let Some(max_bytes) = disk_max_bytes else {
        return memory_only(
            MemoryOnlyReason::Disabled,
            "cache.persist = false: cached answers are kept in memory only".into(),
        );
    };
    let key = match sealing_key(secrets).await {
        Ok(k) => k,
        Err((reason, detail)) => return memory_only(reason, detail),
    };
    let dir = data_dir.to_path_buf();
    let (now, wall) = (Instant::now(), SystemTime::now());
    let loaded = tokio::task::spawn_blocking(move || load(&dir, max_bytes, key, now, wall)).await;
    let (disk, sealer, entries, rejected) = match loaded {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return memory_only(MemoryOnlyReason::OpenFailed, e.to_string()),
        Err(e) => return memory_only(MemoryOnlyReason::OpenFailed, e.to_string()),
    };
    if rejected > 0 {
        tracing::warn!(
            rejected,
            "cache records that did not open under this install's key were dropped"
        );
    }
    let shared = Arc::new(Shared {
        file: data_dir.join(super::disk::FILE_NAME).display().to_string(),
        max_bytes,
        entries: AtomicU64::new(disk.as_ref().map_or(0, Disk::entries)),
        bytes: AtomicU64::new(disk.as_ref().map_or(0, Disk::bytes)),
        loaded: entries.len() as u64,
        rejected,
        dropped: AtomicU64::new(0),
        failed: Mutex::new(None),
    });
    let (tx, rx) = mpsc::channel(QUEUE);
    let s = shared.clone();
    let file = Lazy {
        disk,
        dir: data_dir.to_path_buf(),
        max_bytes,
    };
    let spawned = std::thread::Builder::new()
        .name("weir-cache-writer".into())
        .spawn(move || write_loop(file, sealer, rx, s));
    if let Err(e) = spawned {
        return memory_only(
            MemoryOnlyReason::OpenFailed,
            format!("cannot start the cache writer: {e}"),
        );
    }
    Opened {
        persistence: Persistence::Disk { tx, shared },
        entries,
    }
}

type Loaded = (Option<Disk>, Sealer, Vec<(CacheKey, Stored)>, u64);

/// The cache file, made by the first batch written: a Weir that never stores an answer leaves
/// no file behind (issue 21, "start what is used"). One left by an earlier run is opened at
/// start, since its rows are loaded.
pub(super) struct Lazy {
    disk: Option<Disk>,
    dir: std::path::PathBuf,
    max_bytes: u64,
}

impl Lazy {
    fn created(&mut self) -> Result<&mut Disk, DiskError> {
        match &mut self.disk {
            Some(d) => Ok(d),
            none => Ok(none.insert(Disk::open(&self.dir, self.max_bytes)?)),
        }
    }
}

/// Opens the file, if there is one, and every row; rows that do not open or decode are
/// deleted and counted.
fn load(
    dir: &Path,
    max_bytes: u64,
    key: [u8; 32],
    now: Instant,
    wall: SystemTime,
) -> Result<Loaded, DiskError> {
    let sealer = Sealer::new(&key);
    if !dir.join(super::disk::FILE_NAME).exists() {
        return Ok((None, sealer, Vec::new(), 0));
    }
    let mut disk = Disk::open(dir, max_bytes)?;
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for (k, sealed) in disk.load(record::unix_ms(wall))? {
        match sealer
            .open(&k, &sealed)
            .and_then(|p| record::decode(&p, now, wall))
        {
            Ok((stored, _)) => entries.push((k, stored)),
            Err(_) => bad.push(k),
        }
    }
    disk.delete(&bad)?;
    Ok((Some(disk), sealer, entries, bad.len() as u64))
}

/// The per-install sealing key: read from the keychain, created there on first run. Any other
/// store, or a keychain that cannot answer now, means memory only: a per-run key would leave
/// records no later run can open.
async fn sealing_key(secrets: &SecretStore) -> Result<[u8; 32], (MemoryOnlyReason, String)> {
    if !matches!(secrets, SecretStore::Keychain(_)) {
        return Err((
            MemoryOnlyReason::NoKeychain,
            "no OS keychain to hold the cache's encryption key: cached answers are kept in memory only and lost on restart".into(),
        ));
    }
    let decode = |s: &str| {
        hex::decode(s.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
    };
    let account = Account::CacheKey.as_str();
    match plan(secrets.get(account).await, decode) {
        Plan::Use(k) => Ok(k),
        Plan::PerRun(why) => Err((
            MemoryOnlyReason::KeychainError,
            format!("cannot read the cache's encryption key from the keychain: {why}"),
        )),
        Plan::Create { .. } => {
            let k = rand::random::<[u8; 32]>();
            match secrets.put(account, hex::encode(k)).await {
                Ok(()) => Ok(k),
                Err(e) => Err((
                    MemoryOnlyReason::KeychainError,
                    format!("cannot store the cache's encryption key in the keychain: {e}"),
                )),
            }
        }
    }
}

/// The writer thread: batches puts into transactions; stops when every sender is gone or on
/// a closing flush.
fn write_loop(mut file: Lazy, sealer: Sealer, mut rx: mpsc::Receiver<Cmd>, shared: Arc<Shared>) {
    let mut failed = false;
    let mut closing = None;
    while let Some(first) = rx.blocking_recv() {
        let mut rows = Vec::new();
        let mut next = Some(first);
        let mut control = None;
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Put { key, entry, times } => {
                    if !failed {
                        if let Some(sealed) = sealer.seal(&key, record::encode(&entry, &times)) {
                            rows.push(Row {
                                key,
                                stored_at_ms: record::unix_ms(times.stored_at),
                                expires_at_ms: record::unix_ms(times.expires_at()),
                                sealed,
                            });
                        }
                    }
                    if rows.len() < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                other => control = Some(other),
            }
        }
        if !rows.is_empty() && !failed {
            if let Err(e) = file.created().and_then(|disk| disk.put(&rows)) {
                tracing::error!(error = %e, "cannot write the cache file; the cache is kept in memory only until restart");
                failed = true;
                if let Ok(mut f) = shared.failed.lock() {
                    *f = Some(e.to_string());
                }
            }
        }
        // The counts are current before any reply: a status read right after a flush or a
        // clear sees what is on disk.
        let publish = |disk: Option<&Disk>| {
            shared.entries.store(disk.map_or(0, Disk::entries), Relaxed);
            shared.bytes.store(disk.map_or(0, Disk::bytes), Relaxed);
        };
        publish(file.disk.as_ref());
        match control {
            Some(Cmd::Clear(done)) => {
                // No file yet: nothing to clear.
                let cleared = file.disk.as_mut().map_or(Ok(()), Disk::clear);
                publish(file.disk.as_ref());
                let _ = done.send(cleared);
            }
            Some(Cmd::Flush { close: true, done }) => {
                closing = Some(done);
                break;
            }
            Some(Cmd::Flush { close: false, done }) => {
                let _ = done.send(());
            }
            _ => {}
        }
    }
    // Closed (SQLite folds the WAL back and removes it) before the engine's shutdown returns.
    drop(file);
    if let Some(done) = closing {
        let _ = done.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use std::time::Duration;

    fn entry(body: usize) -> Arc<Stored> {
        let now = Instant::now();
        Arc::new(Stored {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from(vec![b'x'; body]),
            stored_at: now,
            fresh_until: now + Duration::from_secs(15),
            revalidate_until: now + Duration::from_secs(75),
            stale_if_error_until: now + Duration::from_secs(3600),
        })
    }

    fn start(dir: &Path, disk: Option<Disk>) -> Persistence {
        let shared = Arc::new(Shared {
            file: dir
                .join(super::super::disk::FILE_NAME)
                .display()
                .to_string(),
            max_bytes: 64 << 20,
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            loaded: 0,
            rejected: 0,
            dropped: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        let s = shared.clone();
        let file = Lazy {
            disk,
            dir: dir.to_path_buf(),
            max_bytes: 64 << 20,
        };
        std::thread::spawn(move || write_loop(file, Sealer::new(&[3; 32]), rx, s));
        Persistence::Disk { tx, shared }
    }

    #[tokio::test]
    async fn writes_reach_the_disk_and_clear_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = start(dir.path(), Some(Disk::open(dir.path(), 64 << 20).unwrap()));
        for i in 0..10u8 {
            p.put(CacheKey::from_bytes([i; 32]), entry(100));
        }
        p.flush(false).await;
        let CachePersistence::Persisted { entries, .. } = p.status() else {
            panic!("{:?}", p.status())
        };
        assert_eq!(entries, 10);
        p.clear().await.unwrap();
        p.flush(true).await;
        let mut d = Disk::open(dir.path(), 64 << 20).unwrap();
        assert!(d.load(0).unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_file_is_made_by_the_first_write_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(super::super::disk::FILE_NAME);
        let p = start(dir.path(), None);
        p.clear().await.unwrap();
        p.flush(false).await;
        assert!(!file.exists(), "a clear or a flush makes no file");
        p.put(CacheKey::from_bytes([1; 32]), entry(100));
        p.flush(false).await;
        assert!(file.exists());
        let CachePersistence::Persisted { entries, .. } = p.status() else {
            panic!("{:?}", p.status())
        };
        assert_eq!(entries, 1);
        p.flush(true).await;
        let mut d = Disk::open(dir.path(), 64 << 20).unwrap();
        assert_eq!(d.load(0).unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_full_disk_turns_persistence_off_without_failing_puts() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::open(dir.path(), 64 << 20).unwrap();
        disk.cap_pages(8);
        let p = start(dir.path(), Some(disk));
        for i in 0..20u8 {
            p.put(CacheKey::from_bytes([i; 32]), entry(100_000));
        }
        p.flush(false).await;
        match p.status() {
            CachePersistence::MemoryOnly {
                reason: MemoryOnlyReason::WriteFailed,
                detail,
            } => assert!(detail.contains("full"), "{detail}"),
            other => panic!("{other:?}"),
        }
        // Later puts are not even queued.
        p.put(CacheKey::from_bytes([99; 32]), entry(10));
        p.flush(true).await;
    }

    #[tokio::test]
    async fn without_a_keychain_nothing_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::Memory(Mutex::default());
        let o = open(dir.path(), Some(64 << 20), &store).await;
        assert!(matches!(
            o.persistence.status(),
            CachePersistence::MemoryOnly {
                reason: MemoryOnlyReason::NoKeychain,
                ..
            }
        ));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
