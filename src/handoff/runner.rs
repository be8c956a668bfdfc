//! Starts the local agent command for a confirmed offer: directly (argv, never a shell), in
//! the repository's checkout, with a cleared environment (no credential, no proxy variables),
//! stdin closed, bounded by `local_agent.timeout`. Only the last few KiB of its output are
//! kept, with anything that looks like a GitHub token blanked.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The environment the command inherits from Weir: enough to find programs and the user's
/// files; nothing that carries a credential (tokens, proxy URLs, the keyring's bus address).
const INHERITED_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TERM",
];

/// How much of each of stdout and stderr is kept (the tail).
pub(crate) const OUTPUT_TAIL_BYTES: usize = 2048;

/// What to start.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Program and arguments, placeholders filled.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// `WEIR_*` facts and `local_agent.env`, on top of [`INHERITED_ENV`].
    pub env: BTreeMap<String, String>,
    pub timeout: Duration,
}

/// How the command ended.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Outcome {
    /// The exit code when it exited by itself.
    pub exit_code: Option<i32>,
    /// It ran past `local_agent.timeout` and was killed.
    pub timed_out: bool,
    /// It could not be started (program not found, checkout gone, …).
    pub error: Option<String>,
    /// The end of its stdout and stderr, tokens blanked.
    pub output_tail: String,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && self.error.is_none()
    }

    /// One sentence for events and the tray.
    pub fn summary(&self) -> String {
        match (&self.error, self.timed_out, self.exit_code) {
            (Some(e), _, _) => format!("the local agent could not be started: {e}"),
            (None, true, _) => {
                "the local agent ran past local_agent.timeout and was stopped".into()
            }
            (None, false, Some(0)) => "the local agent finished (exit code 0)".into(),
            (None, false, Some(c)) => format!("the local agent failed (exit code {c})"),
            (None, false, None) => "the local agent was ended by a signal".into(),
        }
    }
}

/// Runs `spec` to its end (or its timeout).
pub(crate) async fn run(spec: Spec) -> Outcome {
    let Some((program, args)) = spec.argv.split_first() else {
        return failed("local_agent.command is empty".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(&spec.cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for k in INHERITED_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd.envs(&spec.env);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("`{program}`: {e}")),
    };
    let out = child.stdout.take().map(|s| tokio::spawn(tail(s)));
    let err = child.stderr.take().map(|s| tokio::spawn(tail(s)));
    let mut outcome = Outcome::default();
    match tokio::time::timeout(spec.timeout, child.wait()).await {
        Ok(Ok(status)) => outcome.exit_code = status.code(),
        Ok(Err(e)) => outcome.error = Some(format!("waiting for `{program}`: {e}")),
        Err(_) => {
            outcome.timed_out = true;
            if let Err(e) = child.start_kill() {
                tracing::warn!(error = %e, "could not stop the local agent after its timeout");
            }
            let _ = child.wait().await;
        }
    }
    // A grandchild may keep the pipes open: the tail is what arrived shortly after the exit.
    let grace = Duration::from_secs(2);
    let mut text = String::new();
    for (name, reader) in [("stdout", out), ("stderr", err)] {
        let Some(reader) = reader else { continue };
        if let Ok(Ok(bytes)) = tokio::time::timeout(grace, reader).await {
            if !bytes.is_empty() {
                text.push_str(&format!("[{name}]\n{}\n", String::from_utf8_lossy(&bytes)));
            }
        }
    }
    outcome.output_tail = redact(&text);
    outcome
}

fn failed(error: String) -> Outcome {
    Outcome {
        error: Some(error),
        ..Outcome::default()
    }
}

/// Reads `r` to its end, keeping only the last [`OUTPUT_TAIL_BYTES`].
async fn tail<R: AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut kept: VecDeque<u8> = VecDeque::with_capacity(OUTPUT_TAIL_BYTES);
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend(&buf[..n]);
                let over = kept.len().saturating_sub(OUTPUT_TAIL_BYTES);
                kept.drain(..over);
            }
        }
    }
    kept.into()
}

/// GitHub token prefixes (and `Bearer`), whose following characters are blanked.
const TOKEN_PREFIXES: [&str; 7] = [
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "Bearer ",
];

/// Blanks anything that looks like a token, so a tail never stores one.
pub(crate) fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for prefix in TOKEN_PREFIXES {
        let mut from = 0;
        while let Some(at) = out[from..].find(prefix) {
            let start = from + at + prefix.len();
            let len = out[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
                .unwrap_or(out.len() - start);
            out.replace_range(start..start + len, "[redacted]");
            from = start + "[redacted]".len();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_in_the_output_are_blanked() {
        let s =
            redact("auth ghp_abcDEF123 ok\nAuthorization: Bearer eyJ.x-y done github_pat_11A_b");
        assert_eq!(
            s,
            "auth ghp_[redacted] ok\nAuthorization: Bearer [redacted] done github_pat_[redacted]"
        );
    }

    #[tokio::test]
    async fn the_tail_keeps_only_the_end() {
        let data = vec![b'a'; 10_000]
            .into_iter()
            .chain(b"END".iter().copied())
            .collect::<Vec<_>>();
        let t = tail(&data[..]).await;
        assert_eq!(t.len(), OUTPUT_TAIL_BYTES);
        assert!(t.ends_with(b"END"));
    }
}
