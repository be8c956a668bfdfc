//! Lease renewal: while a replica works on a claimed item (the in-doubt lookup, the create
//! itself, however slow), a heartbeat extends its lease every `lease / 3`, so the lease only
//! has to outlast a heartbeat's gap, not the slowest replay, and a living replica's item never
//! turns in-doubt under it. A replica that dies stops renewing; its item's lease runs out
//! within one lease and another replica takes over (through the in-doubt lookup when the
//! item was being sent). The heartbeat stops when the claim ends (every transition but the
//! start of a replay clears `lease_owner`, so a renewal after it changes nothing) or when its
//! guard is dropped.

use super::{PgConn, PgQueue};
use std::sync::Arc;
use std::time::Duration;

/// Renews one claim while it lives; dropping it stops the heartbeat.
pub struct ClaimKeeper(tokio::task::JoinHandle<()>);

impl Drop for ClaimKeeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PgQueue {
    /// Starts renewing this replica's claim on `id` every `lease / 3`.
    pub(super) fn renew_claim(&self, id: i64) -> ClaimKeeper {
        let (conn, owner, lease) = (self.conn.clone(), self.owner.clone(), self.lease);
        ClaimKeeper(tokio::spawn(async move {
            let every = lease / 3;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match renew(&conn, id, &owner, lease).await {
                    Ok(true) => {}
                    // The claim ended (or was taken over after a gap): nothing left to keep.
                    Ok(false) => return,
                    // Not fatal by itself: the next beat tries again while the lease runs.
                    Err(e) => tracing::warn!(id, error = %e, "could not renew a queue claim"),
                }
            }
        }))
    }
}

/// Extends the lease of `id` if `owner` still holds it; `false` when it does not.
async fn renew(
    conn: &Arc<PgConn>,
    id: i64,
    owner: &str,
    lease: Duration,
) -> Result<bool, weir_store::StoreError> {
    let sql = format!(
        "UPDATE weir_queue_items SET lease_until = {} + $3
         WHERE id = $1 AND lease_owner = $2 AND lease_until IS NOT NULL",
        super::items::DB_NOW_MS
    );
    let lease_ms = lease.as_millis() as i64;
    Ok(conn.execute(&sql, &[&id, &owner, &lease_ms]).await? == 1)
}
