//! Numbered schema migrations for the shared queue. Each runs once, in order, in one
//! transaction with its `weir_schema_migrations` row; replicas starting together serialise on
//! an advisory lock, so exactly one applies each step. A database migrated by a newer Weir is
//! refused (this build must not write to a schema it does not know).

use super::PgConn;
use weir_store::StoreError;

/// One schema step: its number (1, 2, 3, … with no gaps), a name, and its SQL.
pub(crate) struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, oldest first. Never edit a released one: add the next.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "queue items",
        sql: "CREATE TABLE weir_queue_items (
                id BIGSERIAL PRIMARY KEY,
                upstream TEXT NOT NULL,
                method TEXT NOT NULL,
                path_and_query TEXT NOT NULL,
                headers TEXT NOT NULL,
                body BYTEA NOT NULL,
                identity TEXT NOT NULL,
                credential_ref TEXT,
                dedupe_key TEXT NOT NULL,
                repo TEXT,
                problem_statement TEXT,
                state TEXT NOT NULL CHECK (state IN ('queued', 'replaying', 'in_doubt', 'done',
                    'failed', 'cancelled', 'expired')),
                created_at BIGINT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at BIGINT NOT NULL,
                last_attempt_at BIGINT,
                last_error TEXT,
                result TEXT,
                updated_at BIGINT NOT NULL,
                needs_lookup BOOLEAN NOT NULL DEFAULT FALSE
              );
              CREATE UNIQUE INDEX weir_queue_items_live_key ON weir_queue_items (dedupe_key)
                WHERE state IN ('queued', 'replaying', 'in_doubt');
              CREATE INDEX weir_queue_items_due ON weir_queue_items (upstream, created_at, id)
                WHERE state IN ('queued', 'in_doubt');",
    },
    Migration {
        version: 2,
        name: "claim leases",
        sql: "ALTER TABLE weir_queue_items ADD COLUMN lease_owner TEXT,
                ADD COLUMN lease_until BIGINT;
              CREATE INDEX weir_queue_items_leases ON weir_queue_items (lease_until)
                WHERE state = 'replaying';",
    },
    Migration {
        version: 3,
        name: "sealed replay credentials",
        sql: "CREATE TABLE weir_queue_credentials (
                account TEXT PRIMARY KEY,
                sealed BYTEA NOT NULL,
                key_id TEXT NOT NULL,
                updated_at BIGINT NOT NULL
              );",
    },
    Migration {
        version: 4,
        name: "shared upstream signals",
        sql: "CREATE TABLE weir_upstream_signals (
                upstream TEXT PRIMARY KEY,
                breaker_open_until BIGINT,
                cooldown_until BIGINT,
                set_by TEXT NOT NULL,
                updated_at BIGINT NOT NULL
              );",
    },
    Migration {
        version: 5,
        name: "provisional job and session ids",
        sql: "ALTER TABLE weir_queue_items ADD COLUMN provisional_job_id TEXT,
                ADD COLUMN provisional_session_id TEXT;
              CREATE UNIQUE INDEX weir_queue_items_provisional_job
                ON weir_queue_items (provisional_job_id) WHERE provisional_job_id IS NOT NULL;
              CREATE UNIQUE INDEX weir_queue_items_provisional_session
                ON weir_queue_items (provisional_session_id)
                WHERE provisional_session_id IS NOT NULL;",
    },
    Migration {
        version: 6,
        name: "hand-off offers in their own table",
        // The shared queue stores hand-off offers as the laptop's does (issue 21): the
        // parked states join the CHECK, an offered item holds its dedupe key, and the
        // record is a row pointing at the item, dropped with it. Nothing to move: earlier
        // versions refused offers here (the CHECK had no `offered`).
        sql: "ALTER TABLE weir_queue_items DROP CONSTRAINT weir_queue_items_state_check;
              ALTER TABLE weir_queue_items ADD CONSTRAINT weir_queue_items_state_check
                CHECK (state IN ('queued', 'replaying', 'in_doubt', 'done', 'failed',
                  'cancelled', 'expired', 'offered', 'handed_off'));
              DROP INDEX weir_queue_items_live_key;
              CREATE UNIQUE INDEX weir_queue_items_live_key ON weir_queue_items (dedupe_key)
                WHERE state IN ('queued', 'replaying', 'in_doubt', 'offered');
              CREATE TABLE weir_handoff_offers (
                item_id BIGINT NOT NULL UNIQUE
                  REFERENCES weir_queue_items (id) ON DELETE CASCADE,
                offer TEXT NOT NULL,
                expires_at BIGINT NOT NULL,
                running BOOLEAN NOT NULL DEFAULT FALSE,
                program TEXT,
                confirmed_at TEXT,
                outcome TEXT,
                finished_at TEXT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL
              );
              CREATE INDEX weir_handoff_offers_expiry ON weir_handoff_offers (expires_at);",
    },
];

/// The newest schema this build knows.
pub(crate) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Any number: replicas of every Weir version take the same lock.
const LOCK_KEY: i64 = 0x5745_4952_5155_4555; // "WEIRQUEU"

/// Brings the database to [`latest`]; returns the versions applied now (empty when it was
/// already current).
pub(crate) async fn migrate(conn: &PgConn) -> Result<Vec<i32>, StoreError> {
    let mut client = conn.connect_new().await?;
    let err = |e| conn.error(e);
    let tx = client.transaction().await.map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS weir_schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(err)?;
    let current: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM weir_schema_migrations",
            &[],
        )
        .await
        .map_err(err)?
        .get(0);
    if current > latest() {
        return Err(StoreError::SchemaTooNew {
            path: conn.db.clone().into(),
            found: current as u32,
            supported: latest() as u32,
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.batch_execute(m.sql).await.map_err(err)?;
        tx.execute(
            "INSERT INTO weir_schema_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(err)?;
        applied.push(m.version);
    }
    tx.commit().await.map_err(err)?;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numbered_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
        }
        assert_eq!(latest(), MIGRATIONS.len() as i32);
    }
}
