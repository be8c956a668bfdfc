//! The organisation's policy file: where device management puts it on each OS, and reading
//! it. Its `[[policy]]` rules sit above the user's (see [`super::merge`]).
//!
//! Which file: the OS path when a file is there (a developer cannot point around it); else the
//! `policy_file` config key, else `WEIR_POLICY_FILE` (machines without device management, and
//! tests). A missing file at the OS path means no org rules; a missing file that was named
//! explicitly is an error.

use super::rules::{validate, FilePolicyOnly};
use super::PolicyError;
use super::{Rule, Source};
use std::path::{Path, PathBuf};

/// Where device management places the org policy file on this OS.
pub fn default_org_path() -> PathBuf {
    #[cfg(target_os = "macos")]
    {
        PathBuf::from("/Library/Application Support/Weir/policy.toml")
    }
    #[cfg(target_os = "windows")]
    {
        let base = std::env::var_os("ProgramData").unwrap_or_else(|| "C:\\ProgramData".into());
        PathBuf::from(base).join("Weir").join("policy.toml")
    }
    #[cfg(not(any(target_os = "macos", target_os = "windows")))]
    {
        PathBuf::from("/etc/weir/policy.toml")
    }
}

/// The org rules in force, the file they came from, and a note when the configured path was
/// set aside for the OS one.
pub(crate) struct OrgRules {
    pub rules: Vec<Rule>,
    pub file: Option<String>,
    /// `[identity] share`: the loosest account sharing allowed on this machine.
    pub share: Option<crate::view::ShareMode>,
}

/// Reads the org policy file (see the module docs for which one).
pub(crate) fn load(configured: Option<&Path>) -> Result<OrgRules, PolicyError> {
    let os = default_org_path();
    let env = std::env::var_os("WEIR_POLICY_FILE").map(PathBuf::from);
    let (path, explicit) = if os.is_file() {
        if let Some(c) = configured.filter(|c| *c != os) {
            tracing::warn!(configured = %c.display(), managed = %os.display(), "policy_file is set, but the managed org policy file exists and is the one read");
        }
        (os, true)
    } else if let Some(c) = configured {
        (c.to_path_buf(), true)
    } else if let Some(e) = env {
        (e, true)
    } else {
        (os, false)
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OrgRules {
                rules: vec![],
                file: None,
                share: None,
            })
        }
        Err(source) => return Err(PolicyError::Read { path, source }),
    };
    let name = path.display().to_string();
    let line = |at: usize| {
        text.as_bytes()[..at.min(text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    };
    let raw: FilePolicyOnly = toml::from_str(&text).map_err(|e| PolicyError::Invalid {
        file: name.clone(),
        line: e.span().map(|s| line(s.start)).unwrap_or(1),
        key: "policy".into(),
        message: e.message().to_string(),
    })?;
    let share = match &raw.identity.share {
        None => None,
        Some(v) => Some(crate::view::ShareMode::parse(v.get_ref()).ok_or_else(|| {
            PolicyError::Invalid {
                file: name.clone(),
                line: line(v.span().start),
                key: "identity.share".into(),
                message: format!(
                    "`{}` is not \"account\", \"app\" or \"credential\"",
                    v.get_ref()
                ),
            }
        })?),
    };
    Ok(OrgRules {
        rules: validate(&raw.policy, Source::Org, &name, &text)?,
        file: Some(name),
        share,
    })
}
