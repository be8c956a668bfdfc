//! A confirmed offer's command, run off the request: the problem statement file (0600) is
//! written, the command run ([`super::runner`]), its outcome recorded on the offer row and
//! announced, and the file removed.

use super::mirror::{handoff_event, remember, Mirror, Pending};
use super::runner;
use crate::events::{Bus, HandoffChange};
use crate::queue::{now_ms, QueueState};
use crate::status::HandoffOutcome;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use weir_store::Finish;

/// A confirmed offer's command, run off the request: writes the problem statement file
/// (0600), runs, records the outcome on the item, announces it, removes the file.
pub(super) struct RunTask {
    pub(super) queue: Arc<QueueState>,
    pub(super) bus: Bus,
    pub(super) mirror: Arc<Mutex<Mirror>>,
    pub(super) dir: PathBuf,
}

impl RunTask {
    pub(super) async fn run(
        self,
        id: i64,
        spec: runner::Spec,
        file: PathBuf,
        statement: String,
        pending: Pending,
    ) {
        let outcome = match write_private(&self.dir, &file, &statement) {
            Ok(()) => runner::run(spec).await,
            Err(e) => runner::Outcome {
                error: Some(format!("cannot write the problem statement file: {e}")),
                ..Default::default()
            },
        };
        if let Err(e) = std::fs::remove_file(&file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %file.display(), error = %e, "could not remove a problem statement file");
            }
        }
        tracing::info!(id, exit_code = ?outcome.exit_code, timed_out = outcome.timed_out, error = ?outcome.error, "the local agent ended");
        let finish = Finish {
            outcome: serde_json::to_value(&outcome).ok(),
            finished_at: Some(crate::time_fmt::rfc3339(SystemTime::now())),
        };
        if let Some(q) = self.queue.open() {
            if let Err(e) = q.store.record_hand_off_result(id, finish, now_ms()).await {
                tracing::warn!(id, error = %e, "could not record the local agent's outcome");
            }
        }
        let kind = if outcome.succeeded() {
            HandoffOutcome::Succeeded
        } else {
            HandoffOutcome::Failed
        };
        remember(&self.mirror, id, kind, outcome.exit_code, &pending.repo);
        self.bus.emit(handoff_event(
            HandoffChange::Finished,
            id,
            &pending,
            outcome.summary(),
        ));
    }
}

/// Writes `text` to `file` readable by the user only, in the private `dir`.
fn write_private(dir: &std::path::Path, file: &std::path::Path, text: &str) -> std::io::Result<()> {
    crate::paths::create_private_dir(dir)?;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    use std::io::Write;
    let mut f = o.open(file)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}
