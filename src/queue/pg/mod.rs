//! The create queue in PostgreSQL, for gateway replicas that share one queue.
//!
//! - [`conn`]: the shared connection (reconnects on demand, every call bounded) and how a
//!   PostgreSQL error becomes a [`weir_store::StoreError`].
//! - [`migrations`]: numbered schema migrations, applied once under an advisory lock.
//! - [`items`]: the queue operations: insert (with `NOTIFY`), claims (`FOR UPDATE SKIP LOCKED`
//!   plus a lease), the state transitions of `weir_store::Transition`, lease recovery.
//! - `rows`: a row as an `Item`, and the binds of a rendered statement.
//! - `offers`: hand-off offers (`weir_handoff_offers`), each written with its item in one
//!   statement.
//! - [`lease`]: the heartbeat that renews a claim while its replica works on the item.
//! - [`listen`]: a dedicated `LISTEN` connection that wakes this replica's workers.
//! - [`tls`]: TLS to the database (`gateway.postgres_sslmode`), rustls on ring.
//!
//! **Leases.** A worker claims an item with a lease (`lease_owner`, `lease_until`, on the
//! database's clock so replicas' clocks do not matter). While the lease runs no other replica
//! takes the item, and the holder renews it every lease/3 while it works ([`lease`]);
//! `mark_replaying` only succeeds for the lease holder. A `replaying` item whose lease ran out
//! belonged to a replica that died (or lost the database) mid-send: any replica turns it
//! `in_doubt`, and the in-doubt lookup (`queue::replay`) decides whether to send it again.

pub(crate) mod conn;
pub(crate) mod items;
pub(crate) mod lease;
pub(crate) mod listen;
pub(crate) mod migrations;
mod offers;
mod rows;
pub(crate) mod tls;

pub(crate) use conn::PgConn;
pub(crate) use tls::PgTls;

use std::sync::Arc;
use std::time::Duration;

/// The queue in PostgreSQL, as one replica uses it.
pub(crate) struct PgQueue {
    pub conn: Arc<PgConn>,
    /// This replica's name in `lease_owner` (host and process id).
    pub owner: String,
    /// How long a claim holds an item without renewal (renewed every third of it).
    pub lease: Duration,
}

/// The `NOTIFY` channel a new or retried item is announced on.
pub(crate) const QUEUE_CHANNEL: &str = "weir_queue";

/// This replica's lease owner name: `host/pid`.
pub(crate) fn owner_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "weir".into());
    format!("{host}/{}", std::process::id())
}
