//! Breaker openings and upstream-wide cooldowns shared between gateway replicas, through the
//! PostgreSQL they already share (one row per upstream in `weir_upstream_signals`, a `NOTIFY`
//! on `weir_signals` when it changes). A replica that learns of a hold stops sending to that
//! upstream until it ends, instead of spending failing calls to find out by itself. Holds are
//! dated on the database's clock, so replicas' clocks do not matter. The cache stays per
//! replica.
//!
//! Why PostgreSQL and not NATS: the replicas already depend on it for the queue, so this adds
//! no server to run and no failure mode (with the database down the queue is down too, and
//! each replica falls back to its own breaker, as on a laptop); the last value survives a
//! replica's restart; and NATS stays what laptops use to talk to each other (`[team]`).

use crate::queue::pg::{listen, PgConn};
use crate::upstream::{SharedHold, Upstreams};
use std::sync::Arc;
use std::time::Duration;
use weir_resilience::State;

pub(crate) const SIGNALS_CHANNEL: &str = "weir_signals";
const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// `next`, unless the engine stops first (`None`).
async fn unless_stopped<T>(
    stop: &mut tokio::sync::watch::Receiver<bool>,
    next: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = next => Some(v),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// Starts sharing: this replica's breaker openings and upstream-wide holds are written; other
/// replicas' are applied. Returns the `LISTEN` handler for [`SIGNALS_CHANNEL`].
pub(crate) fn start(
    conn: Arc<PgConn>,
    owner: String,
    upstreams: Arc<Upstreams>,
    bus: &crate::events::Bus,
) -> listen::Handler {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<SharedHold>();
    for u in &upstreams.list {
        let _ = u.gate.shared.set(tx.clone());
        // A breaker that opens is announced with how long it stays open.
        let mut events = u.gate.breaker.subscribe();
        let gate_tx = tx.clone();
        let name = u.settings.name.clone();
        let up = upstreams.clone();
        let mut stop = bus.stopping();
        bus.spawn(async move {
            while let Some(e) = unless_stopped(&mut stop, events.recv()).await {
                match e {
                    Ok(e) if e.to == State::Open => {
                        let wait = up
                            .list
                            .iter()
                            .find(|u| u.settings.name == name)
                            .and_then(|u| u.gate.breaker.snapshot().retry_after)
                            .unwrap_or(Duration::from_secs(5));
                        let _ = gate_tx.send(SharedHold {
                            upstream: name.clone(),
                            wait,
                            breaker: true,
                        });
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                }
            }
        });
    }
    let writer = conn.clone();
    let me = owner.clone();
    let mut stop = bus.stopping();
    bus.spawn(async move {
        while let Some(Some(hold)) = unless_stopped(&mut stop, rx.recv()).await {
            if let Err(e) = publish(&writer, &me, &hold).await {
                // Sharing is best effort: each replica still has its own breaker.
                tracing::debug!(error = %e, "could not share an upstream hold");
            }
        }
    });
    let reader = conn;
    let bus = bus.clone();
    Arc::new(move |payload: &str| {
        let (reader, owner, upstreams) = (reader.clone(), owner.clone(), upstreams.clone());
        let only = (!payload.is_empty()).then(|| payload.to_string());
        bus.spawn(async move {
            if let Err(e) = apply(&reader, &owner, &upstreams, only.as_deref()).await {
                tracing::debug!(error = %e, "could not read shared upstream holds");
            }
        });
    })
}

async fn publish(
    conn: &PgConn,
    owner: &str,
    hold: &SharedHold,
) -> Result<(), weir_store::StoreError> {
    let wait = hold.wait.as_millis().min(i64::MAX as u128) as i64;
    let column = if hold.breaker {
        "breaker_open_until"
    } else {
        "cooldown_until"
    };
    let sql = format!(
        "WITH up AS (
           INSERT INTO weir_upstream_signals (upstream, {column}, set_by, updated_at)
           VALUES ($1, {DB_NOW_MS} + $2, $3, {DB_NOW_MS})
           ON CONFLICT (upstream) DO UPDATE SET
             {column} = GREATEST(weir_upstream_signals.{column}, EXCLUDED.{column}),
             set_by = EXCLUDED.set_by, updated_at = EXCLUDED.updated_at
           RETURNING upstream)
         SELECT pg_notify('{SIGNALS_CHANNEL}', upstream) FROM up"
    );
    conn.query(&sql, &[&hold.upstream, &wait, &owner]).await?;
    Ok(())
}

/// Applies the holds other replicas set (all upstreams, or `only` one).
async fn apply(
    conn: &PgConn,
    owner: &str,
    upstreams: &Upstreams,
    only: Option<&str>,
) -> Result<(), weir_store::StoreError> {
    let sql = format!(
        "SELECT upstream, GREATEST(COALESCE(breaker_open_until, 0), COALESCE(cooldown_until, 0))
                 - {DB_NOW_MS}
         FROM weir_upstream_signals WHERE set_by <> $1 AND ($2::text IS NULL OR upstream = $2)"
    );
    for row in conn.query(&sql, &[&owner, &only]).await? {
        let name: String = row.get(0);
        let remaining: i64 = row.get(1);
        if remaining <= 0 {
            continue;
        }
        if let Some(u) = upstreams.list.iter().find(|u| u.settings.name == name) {
            tracing::info!(upstream = %name, remaining_ms = remaining, "another gateway replica holds this upstream back; holding too");
            u.gate
                .hold_from_peer(Duration::from_millis(remaining as u64));
        }
    }
    Ok(())
}
