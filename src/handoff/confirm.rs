//! Confirming an offer: checked before anything changes (a checkout, a configured agent, no
//! value that reads as an option), then `handed_off` with the confirmation in one
//! transaction, and the command started once, off the request ([`RunTask`]).

use super::mirror::{excerpt, handoff_event, Pending};
use super::offer::{record_of, OfferRecord};
use super::run_task::RunTask;
use super::{runner, HandoffError, HandoffView, Handoffs};
use crate::events::HandoffChange;
use crate::queue::now_ms;
use crate::status::HandoffOutcome;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;
use weir_store::{Change, Confirmation, Item};

/// The first placeholder the command uses whose value begins with `-` (after spaces): filled
/// verbatim into an argument, it could be read as an option by the program.
fn option_like(command: &[String], values: &[(&'static str, &str)]) -> Option<&'static str> {
    values.iter().find_map(|(key, value)| {
        let used = command.iter().any(|a| a.contains(&format!("{{{key}}}")));
        (used && value.trim_start().starts_with('-')).then_some(*key)
    })
}

impl Handoffs {
    /// Confirms offer `id`: marks it `handed_off` (only the first confirmation wins) and
    /// starts the local agent command once; its outcome is recorded when it ends.
    pub async fn confirm(&self, id: i64) -> Result<HandoffView, HandoffError> {
        let p = self.parts()?;
        let q = p.open_queue()?;
        let item = self.offered_item(id).await?;
        let mut rec = q
            .store
            .hand_off_record(id)
            .await
            .map_err(|e| HandoffError::from_store(id, e))?
            .ok_or(HandoffError::NotFound { id })?;
        let record = record_of(&rec).ok_or(HandoffError::NotFound { id })?;
        let settings = p.live.get();
        let agent = settings
            .local_agent
            .clone()
            .ok_or(HandoffError::NotConfigured)?;
        let repo = item.repo.clone().unwrap_or_default();
        if !record.checkout.is_dir() {
            return Err(HandoffError::NoCheckout { repo });
        }
        let statement = item.problem_statement.clone().unwrap_or_default();
        // Before anything changes: a refused offer stays offered (decline it, or fix the rule).
        let (owner, name) = repo.split_once('/').unwrap_or(("", &repo));
        let checkout = record.checkout.display().to_string();
        let base = record.base_branch.clone().unwrap_or_default();
        let filled = [
            ("repo", repo.as_str()),
            ("owner", owner),
            ("name", name),
            ("checkout", checkout.as_str()),
            ("problem_statement", statement.as_str()),
            ("base_branch", base.as_str()),
        ];
        if let Some(placeholder) = option_like(&agent.command, &filled) {
            return Err(HandoffError::OptionLike { placeholder });
        }
        let confirmation = Confirmation {
            program: agent.command.first().cloned(),
            confirmed_at: crate::time_fmt::rfc3339(SystemTime::now()),
        };
        let now = now_ms();
        let item = q
            .store
            .apply(
                id,
                Change::HandOff {
                    confirmation: confirmation.clone(),
                },
                now,
            )
            .await
            .map_err(|e| HandoffError::from_store(id, e))?;
        // What the same transaction wrote on the offer row.
        rec.running = true;
        rec.program = confirmation.program;
        rec.confirmed_at = Some(confirmation.confirmed_at);
        rec.updated_at = now;
        // Handed off is an end state: the replay credential is not needed any more, and the
        // local agent never gets it.
        if let Some(acct) = &item.credential_ref {
            q.delete_credential(acct).await;
        }
        let pending = self.take_pending(id).unwrap_or_else(|| Pending {
            rule: record.rule.clone(),
            repo: repo.clone(),
            excerpt: excerpt(&statement),
            offered_at_ms: item.created_at,
            expires_at_ms: record.expires_at,
        });
        self.remember(id, HandoffOutcome::Running, None, &repo);
        p.bus
            .emit(crate::queue::event(&item, "handed to the local agent"));
        p.bus.emit(handoff_event(
            HandoffChange::Started,
            id,
            &pending,
            format!("the local agent was started for {repo}"),
        ));
        let (spec, file) = self.spec(id, &item, &record, &agent, &statement);
        let task = RunTask {
            queue: p.queue.clone(),
            bus: p.bus.clone(),
            mirror: self.mirror.clone(),
            dir: p.dir.clone(),
        };
        p.bus.spawn(task.run(id, spec, file, statement, pending));
        Ok(HandoffView::of(&item, Some(&rec)))
    }

    fn spec(
        &self,
        id: i64,
        item: &Item,
        record: &OfferRecord,
        agent: &crate::config::LocalAgentSettings,
        statement: &str,
    ) -> (runner::Spec, PathBuf) {
        let repo = item.repo.clone().unwrap_or_default();
        let (owner, name) = repo.split_once('/').unwrap_or(("", &repo));
        let file = self
            .parts
            .as_ref()
            .map(|p| p.dir.join(format!("offer-{id}.md")))
            .unwrap_or_default();
        let checkout = record.checkout.display().to_string();
        let file_s = file.display().to_string();
        let id_s = id.to_string();
        let base = record.base_branch.clone().unwrap_or_default();
        let values = [
            ("repo", repo.as_str()),
            ("owner", owner),
            ("name", name),
            ("checkout", checkout.as_str()),
            ("problem_statement", statement),
            ("problem_statement_file", file_s.as_str()),
            ("base_branch", base.as_str()),
            ("offer_id", id_s.as_str()),
        ];
        let argv = agent
            .command
            .iter()
            .map(|a| crate::config::local_agent_fill(a, &values))
            .collect();
        let mut env: BTreeMap<String, String> = [
            ("WEIR_HANDOFF_ID", id_s.clone()),
            ("WEIR_REPO", repo.clone()),
            ("WEIR_CHECKOUT", checkout.clone()),
            ("WEIR_PROBLEM_STATEMENT_FILE", file_s.clone()),
            ("WEIR_BASE_BRANCH", base.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(agent.env.clone());
        (
            runner::Spec {
                argv,
                cwd: record.checkout.clone(),
                env,
                timeout: agent.timeout,
            },
            file,
        )
    }
}

#[cfg(test)]
mod option_tests {
    /// Issue 22, item 3: placeholders were filled verbatim, `-` and all.
    #[test]
    fn a_value_that_reads_as_an_option_is_refused() {
        let cmd: Vec<String> = [
            "agent",
            "--base",
            "{base_branch}",
            "-p",
            "{problem_statement}",
        ]
        .map(String::from)
        .to_vec();
        let ok = [("base_branch", "main"), ("problem_statement", "fix it")];
        assert_eq!(super::option_like(&cmd, &ok), None);
        let bad = [
            ("base_branch", "--allow-all-tools"),
            ("problem_statement", "x"),
        ];
        assert_eq!(super::option_like(&cmd, &bad), Some("base_branch"));
        let list = [
            ("base_branch", "main"),
            ("problem_statement", " - a list item"),
        ];
        assert_eq!(super::option_like(&cmd, &list), Some("problem_statement"));
        // A value the command does not use is never passed.
        let unused = [("owner", "-o"), ("problem_statement", "fine")];
        assert_eq!(super::option_like(&cmd, &unused), None);
    }
}
