//! The dashboard's **New task**: a repository, a problem statement and a base branch become
//! `POST /agents/swe/v1/jobs/{owner}/{repo}` (the body `gh agent-task create` sends), sent with
//! the stored token through Weir's own listener, so it gets the create path's duplicate
//! suppression (same token + path + body, or the same `Idempotency-Key`, within the dedupe
//! window) and the durable queue (`202` when GitHub cannot take it now).

use super::loopback::{Loopback, LoopbackError};
use super::model::is_repository;
use bytes::Bytes;
use http::{header, Method};
use serde::Serialize;
use serde_json::Value;

/// The longest problem statement accepted from the form.
pub const MAX_STATEMENT: usize = 20_000;

/// A validated new task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub repository: String,
    pub problem_statement: String,
    pub base_branch: Option<String>,
    /// The form's per-submission key: a second submit of the same form is the same create.
    pub idempotency_key: Option<String>,
}

impl NewTask {
    /// Reads `{repository, problem_statement, base_branch?, idempotency_key?}`; the error says
    /// which field is wrong and how.
    pub fn from_json(v: &Value) -> Result<NewTask, String> {
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::trim);
        let repository = field("repository").unwrap_or_default();
        if !is_repository(repository) {
            return Err("`repository` must be OWNER/REPO (letters, digits, `-`, `_`, `.`)".into());
        }
        let problem_statement = field("problem_statement").unwrap_or_default();
        if problem_statement.is_empty() {
            return Err("`problem_statement` must say what the agent should do".into());
        }
        if problem_statement.chars().count() > MAX_STATEMENT {
            return Err(format!(
                "`problem_statement` is longer than {MAX_STATEMENT} characters"
            ));
        }
        let base_branch = match field("base_branch").filter(|b| !b.is_empty()) {
            None => None,
            Some(b) if is_branch(b) => Some(b.to_string()),
            Some(_) => {
                return Err(
                    "`base_branch` must be a branch name (no spaces, `..` or leading `-`/`/`)"
                        .into(),
                )
            }
        };
        let idempotency_key = match field("idempotency_key").filter(|k| !k.is_empty()) {
            None => None,
            Some(k)
                if (8..=128).contains(&k.len())
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                Some(k.to_string())
            }
            Some(_) => {
                return Err("`idempotency_key` must be 8–128 letters, digits, `-` or `_`".into())
            }
        };
        Ok(NewTask {
            repository: repository.to_string(),
            problem_statement: problem_statement.to_string(),
            base_branch,
            idempotency_key,
        })
    }

    /// The jobs API path.
    pub fn path(&self) -> String {
        format!("/agents/swe/v1/jobs/{}", self.repository)
    }

    /// The jobs API body.
    pub fn body(&self) -> Bytes {
        let mut v = serde_json::json!({
            "problem_statement": self.problem_statement,
            "event_type": "weir_dashboard",
        });
        if let Some(b) = &self.base_branch {
            v["pull_request"] = serde_json::json!({"base_ref": format!("refs/heads/{b}")});
        }
        Bytes::from(v.to_string())
    }

    /// Sends the task through Weir's create path on the upstream at `origin`.
    pub async fn send(
        &self,
        loopback: &Loopback,
        origin: &str,
        token: &str,
    ) -> Result<Outcome, LoopbackError> {
        let url = format!("{}{}", origin.trim_end_matches('/'), self.path());
        let mut extra = vec![(
            header::CONTENT_TYPE.as_str(),
            "application/json".to_string(),
        )];
        if let Some(k) = &self.idempotency_key {
            extra.push(("idempotency-key", k.clone()));
        }
        let resp = loopback
            .send(Method::POST, &url, token, &extra, self.body())
            .await?;
        let status = resp.status().as_u16();
        let how = resp
            .headers()
            .get("weir-create")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body: Value = serde_json::from_slice(resp.body()).unwrap_or(Value::Null);
        Ok(match status {
            202 => Outcome::Queued {
                status,
                queue_id: body.get("id").and_then(Value::as_i64),
                detail: body
                    .get("detail")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                weir_create: how,
            },
            200..=299 => Outcome::Created {
                status,
                job: body,
                weir_create: how,
            },
            _ => Outcome::Refused { status, body },
        })
    }
}

/// What happened to a new task.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// GitHub took it (`job_id`, `session_id` in `job`). `weir_create` is `first`, or
    /// `duplicate-in-flight` / `duplicate-of-recent` when it was the same create again.
    Created {
        status: u16,
        job: Value,
        weir_create: Option<String>,
    },
    /// GitHub could not take it now; it waits in the durable queue.
    Queued {
        status: u16,
        queue_id: Option<i64>,
        detail: String,
        weir_create: Option<String>,
    },
    /// GitHub (or Weir) refused it; `body` is the answer (problem+json from Weir, or GitHub's).
    Refused { status: u16, body: Value },
}

fn is_branch(b: &str) -> bool {
    b.len() <= 200
        && !b.starts_with(['-', '/'])
        && !b.ends_with(['/', '.'])
        && !b.contains("..")
        && !b.contains("//")
        && b.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_the_form() {
        let ok = NewTask::from_json(&serde_json::json!({
            "repository": "octo/app", "problem_statement": " Fix it ", "base_branch": "release/1.2",
            "idempotency_key": "form-1234abcd"
        }))
        .unwrap();
        assert_eq!(ok.path(), "/agents/swe/v1/jobs/octo/app");
        let body: Value = serde_json::from_slice(&ok.body()).unwrap();
        assert_eq!(body["problem_statement"], "Fix it");
        assert_eq!(body["pull_request"]["base_ref"], "refs/heads/release/1.2");
        for (bad, field) in [
            (
                serde_json::json!({"repository": "octo", "problem_statement": "x"}),
                "repository",
            ),
            (
                serde_json::json!({"repository": "o/r/x", "problem_statement": "x"}),
                "repository",
            ),
            (
                serde_json::json!({"repository": "o/r", "problem_statement": " "}),
                "problem_statement",
            ),
            (
                serde_json::json!({"repository": "o/r", "problem_statement": "x", "base_branch": "a..b"}),
                "base_branch",
            ),
            (
                serde_json::json!({"repository": "o/r", "problem_statement": "x", "idempotency_key": "a b"}),
                "idempotency_key",
            ),
        ] {
            let e = NewTask::from_json(&bad).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
        let no_branch = NewTask::from_json(
            &serde_json::json!({"repository": "o/r", "problem_statement": "x", "base_branch": ""}),
        )
        .unwrap();
        assert_eq!(no_branch.base_branch, None);
        assert!(serde_json::from_slice::<Value>(&no_branch.body())
            .unwrap()
            .get("pull_request")
            .is_none());
    }
}
