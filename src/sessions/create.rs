//! The dashboard's **New task**: a repository, a problem statement and a base branch become
//! `POST /agents/swe/v1/jobs/{owner}/{repo}` exactly as `gh agent-task create` sends it (body,
//! `Content-Type`, `Copilot-Integration-Id`, `X-GitHub-Api-Version`, a bearer token), sent
//! with the stored token through Weir's own listener, so it gets the create path's duplicate
//! suppression (same token + path + body, or the same `Idempotency-Key`, within the dedupe
//! window) and the durable queue (answered with a provisional job and `Weir-Queued` when
//! GitHub cannot take it now).

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

    /// The jobs API body: `gh agent-task create`'s, byte for byte as gh writes it (cli/cli
    /// `pkg/cmd/agent-task/capi/job.go` `CreateJob`, commit 03faed65). Go's `encoding/json`
    /// writes the `Job` fields in struct order, leaves out empty `omitempty` strings, but
    /// always writes the zero `created_at`/`updated_at` (`omitempty` never applies to a
    /// struct) and `pull_request` with its zero `id` and `number`.
    pub fn body(&self) -> Bytes {
        let mut out = String::from("{\"problem_statement\":");
        go_json_string(&mut out, &self.problem_statement);
        out.push_str(concat!(
            ",\"event_type\":\"gh_cli\"",
            ",\"created_at\":\"0001-01-01T00:00:00Z\"",
            ",\"updated_at\":\"0001-01-01T00:00:00Z\"",
            ",\"pull_request\":{\"id\":0,\"number\":0"
        ));
        if let Some(b) = &self.base_branch {
            out.push_str(",\"base_ref\":");
            go_json_string(&mut out, &format!("refs/heads/{b}"));
        }
        out.push_str("}}");
        Bytes::from(out)
    }

    /// Sends the task through Weir's create path on the upstream at `origin`.
    pub async fn send(
        &self,
        loopback: &Loopback,
        origin: &str,
        token: &str,
    ) -> Result<Outcome, LoopbackError> {
        let url = format!("{}{}", origin.trim_end_matches('/'), self.path());
        // The headers gh's CAPI transport adds to every Copilot API call (cli/cli
        // `capi/client.go` `capiTransport.RoundTrip`, commit 1b5130e1) and `CreateJob`'s
        // Content-Type; the loopback adds `Authorization: Bearer` as gh does.
        let mut extra = vec![
            (
                header::CONTENT_TYPE.as_str(),
                "application/json".to_string(),
            ),
            ("copilot-integration-id", GH_INTEGRATION_ID.to_string()),
            ("x-github-api-version", GH_API_VERSION.to_string()),
        ];
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
        // Queued by Weir: `Weir-Queued` names the queue item, whether the answer was the
        // provisional job (`201`) or the queue entry (`202`).
        let queued = resp
            .headers()
            .get("weir-queued")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i64>().ok());
        Ok(match status {
            200..=299 if queued.is_some() || status == 202 => Outcome::Queued {
                status,
                queue_id: queued.or_else(|| body.get("id").and_then(Value::as_i64)),
                job: body.get("job_id").is_some().then(|| body.clone()),
                detail: body
                    .get("detail")
                    .or_else(|| body.get("weir").and_then(|w| w.get("detail")))
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
    /// GitHub could not take it now; it waits in the durable queue. `job` is the
    /// provisional job Weir answered with (`[queue] answer = "job"`).
    Queued {
        status: u16,
        queue_id: Option<i64>,
        job: Option<Value>,
        detail: String,
        weir_create: Option<String>,
    },
    /// GitHub (or Weir) refused it; `body` is the answer (problem+json from Weir, or GitHub's).
    Refused { status: u16, body: Value },
}

/// gh's `Copilot-Integration-Id` and `X-GitHub-Api-Version` (cli/cli `capi/client.go`).
pub const GH_INTEGRATION_ID: &str = "copilot-4-cli";
pub const GH_API_VERSION: &str = "2026-01-09";

/// `s` as a JSON string the way Go's `encoding/json` writes it (Go 1.22 and later): `<`, `>`,
/// `&`, U+2028 and U+2029 as `\u` escapes, `\b` `\f` `\n` `\r` `\t` short, other control
/// characters as `\u00XX`.
fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
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
        // gh's bytes (Go's encoding/json of capi.Job, cli/cli job.go @03faed65).
        assert_eq!(
            std::str::from_utf8(&ok.body()).unwrap(),
            r#"{"problem_statement":"Fix it","event_type":"gh_cli","created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z","pull_request":{"id":0,"number":0,"base_ref":"refs/heads/release/1.2"}}"#
        );
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
        assert_eq!(
            std::str::from_utf8(&no_branch.body()).unwrap(),
            r#"{"problem_statement":"x","event_type":"gh_cli","created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z","pull_request":{"id":0,"number":0}}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        go_json_string(&mut out, "a<b>&\"q\"\\\n\t\u{1}\u{8}\u{2028}é");
        assert_eq!(out, r#""a\u003cb\u003e\u0026\"q\"\\\n\t\u0001\b\u2028é""#);
        // Whatever it escapes, it is JSON that reads back as the same text.
        let back: String = serde_json::from_str(&out).unwrap();
        assert_eq!(back, "a<b>&\"q\"\\\n\t\u{1}\u{8}\u{2028}é");
    }
}
