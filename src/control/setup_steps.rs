//! The Set up view's steps, each with a live state (done, needed, not possible here and why),
//! worked out by `weir doctor`'s own checks ([`crate::client_setup::doctor_checks`]) and the
//! set-up modules' own tests of a file (VS Code's settings, git's config, the shell profile,
//! the autostart entry). Blocking (keychain, `certutil`, `git`): call from `spawn_blocking`.

use crate::client_setup::ca_install::command_line;
use crate::client_setup::doctor_checks::{
    check_ca, check_keychain, check_nss, check_system_store, Check,
};
use crate::client_setup::{vscode, Install, Outcome};
use serde::Serialize;
use std::path::{Path, PathBuf};
use weir_tls::InstallStep;

/// What each step is about (its id in the API and the page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepId {
    Keychain,
    CaSystem,
    CaBrowsers,
    Shell,
    Vscode,
    Git,
    Token,
    Login,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Done,
    Needed,
    /// Cannot be done on this machine (`why` says why).
    NotPossible,
}

/// A button: what `POST /_weir/api/setup/<action>` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    TrustBrowsers,
    Shell,
    ShellUndo,
    Vscode,
    VscodeUndo,
    Git,
    GitUndo,
    Login,
    LoginUndo,
}

impl Action {
    pub const ALL: [Action; 9] = [
        Action::TrustBrowsers,
        Action::Shell,
        Action::ShellUndo,
        Action::Vscode,
        Action::VscodeUndo,
        Action::Git,
        Action::GitUndo,
        Action::Login,
        Action::LoginUndo,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::TrustBrowsers => "trust-browsers",
            Action::Shell => "shell",
            Action::ShellUndo => "shell-undo",
            Action::Vscode => "vscode",
            Action::VscodeUndo => "vscode-undo",
            Action::Git => "git",
            Action::GitUndo => "git-undo",
            Action::Login => "login",
            Action::LoginUndo => "login-undo",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One step as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub id: StepId,
    pub title: &'static str,
    pub state: StepState,
    /// What the check found.
    pub detail: String,
    /// The exact command that does it (to copy, or what the button runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Whether the command needs administrator rights (then there is no button: copy it).
    pub needs_admin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// The command that takes it back out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_action: Option<Action>,
}

impl Step {
    pub fn new(
        id: StepId,
        title: &'static str,
        state: StepState,
        detail: impl Into<String>,
    ) -> Step {
        Step {
            id,
            title,
            state,
            detail: detail.into(),
            command: None,
            needs_admin: false,
            action: None,
            undo: None,
            undo_action: None,
        }
    }

    /// A doctor check as a step: done when it passed, else needed with its fix as the command.
    fn from_check(id: StepId, title: &'static str, c: Check) -> Step {
        match c.outcome {
            Outcome::Failed { fix } => Step {
                command: Some(fix),
                ..Step::new(id, title, StepState::Needed, c.what)
            },
            _ => Step::new(id, title, StepState::Done, c.what),
        }
    }
}

/// Where the steps look, apart from the install: the user's home and the tools found.
#[derive(Debug, Clone)]
pub struct Env {
    pub home: Option<PathBuf>,
    /// The login shell's name (`SHELL`'s file name).
    pub shell: String,
    /// Whether a GitHub token is stored, and whether the OS keychain could take one.
    pub token_stored: bool,
    pub token_keychain: bool,
    /// Whether that store is the file store (no OS keychain), so the step says where it is.
    pub token_files: bool,
}

impl Env {
    pub fn for_this_process(token_stored: bool, token_keychain: bool, token_files: bool) -> Env {
        Env {
            home: std::env::var_os("HOME").map(PathBuf::from),
            shell: std::env::var("SHELL")
                .ok()
                .and_then(|s| Some(Path::new(&s).file_name()?.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "bash".into()),
            token_stored,
            token_keychain,
            token_files,
        }
    }
}

/// Every step, in the order the page shows them.
pub fn steps(install: &Install, env: &Env) -> Vec<Step> {
    let (keychain, keychain_err) = check_keychain(install);
    let mut out = vec![match keychain_err {
        Some(e @ weir_keychain::KeychainError::NoService { .. }) => Step {
            command: Some(e.fix().to_string()),
            ..Step::new(
                StepId::Keychain,
                "Keychain",
                StepState::NotPossible,
                e.to_string(),
            )
        },
        _ => Step::from_check(StepId::Keychain, "Keychain", keychain),
    }];
    out.extend(ca_steps(install));
    out.push(super::setup_files::shell_step(env, &install.proxy_url()));
    out.push(vscode_step(install));
    out.push(super::setup_files::git_step(&install.proxy_url()));
    out.push(token_step(env));
    out.push(super::setup_files::login_step(env));
    out
}

/// The system store (admin rights: a command to copy) and the browsers' NSS databases (a
/// button: `certutil` on the user's own files).
fn ca_steps(install: &Install) -> Vec<Step> {
    let (sys, browsers) = ("Trust Weir's CA (system)", "Trust Weir's CA (browsers)");
    if !install.settings.intercept {
        let why = "TLS interception is off (intercept = false): there is no CA to trust";
        return vec![
            Step::new(StepId::CaSystem, sys, StepState::NotPossible, why),
            Step::new(StepId::CaBrowsers, browsers, StepState::NotPossible, why),
        ];
    }
    if install.settings.intercept_hosts().is_empty() {
        let why = "no managed upstream is HTTPS: there is nothing to intercept, so no CA to trust";
        return vec![
            Step::new(StepId::CaSystem, sys, StepState::NotPossible, why),
            Step::new(StepId::CaBrowsers, browsers, StepState::NotPossible, why),
        ];
    }
    let mut found = Vec::new();
    let Some(info) = check_ca(install, &mut found) else {
        let failed = found.into_iter().find(Check::failed);
        let (what, fix) = match failed.map(|c| (c.what, c.outcome)) {
            Some((what, Outcome::Failed { fix })) => (what, fix),
            _ => (
                "no usable local CA".to_string(),
                "weir ca install".to_string(),
            ),
        };
        let step = |id, title| Step {
            command: Some(fix.clone()),
            ..Step::new(id, title, StepState::NotPossible, what.clone())
        };
        return vec![
            step(StepId::CaSystem, sys),
            step(StepId::CaBrowsers, browsers),
        ];
    };
    let all = weir_tls::install_steps(weir_tls::Os::current(), &install.ca.cert_path());
    let (nss, system): (Vec<InstallStep>, Vec<InstallStep>) =
        all.into_iter().partition(|s| nss_db(s).is_some());
    let mut sys_step = Step::from_check(StepId::CaSystem, sys, check_system_store(&info));
    let admin: Vec<&InstallStep> = system.iter().filter(|s| !s.optional).collect();
    sys_step.command = Some(
        admin
            .iter()
            .map(|s| command_line(s))
            .collect::<Vec<_>>()
            .join(" && "),
    );
    sys_step.needs_admin = admin.iter().any(|s| s.needs_admin);
    vec![sys_step, browsers_step(&nss, &info.der)]
}

/// The NSS database an install step writes to (`certutil -d sql:DIR …`).
pub fn nss_db(step: &InstallStep) -> Option<PathBuf> {
    if step.command.first().map(String::as_str) != Some("certutil") {
        return None;
    }
    let db = step.command.iter().skip_while(|a| *a != "-d").nth(1)?;
    db.strip_prefix("sql:").map(PathBuf::from)
}

fn browsers_step(nss: &[InstallStep], der: &[u8]) -> Step {
    let (id, title) = (StepId::CaBrowsers, "Trust Weir's CA (browsers)");
    let present: Vec<(&InstallStep, PathBuf)> = nss
        .iter()
        .filter_map(|s| nss_db(s).map(|db| (s, db)))
        .filter(|(_, db)| db.join("cert9.db").is_file())
        .collect();
    if present.is_empty() {
        return Step::new(id, title, StepState::NotPossible, "no browser certificate database (NSS) here: Chromium makes ~/.pki/nssdb and Firefox its profile on their first start; then this step can run");
    }
    if !on_path("certutil") {
        return Step {
            command: Some("sudo apt install libnss3-tools".into()),
            needs_admin: true,
            ..Step::new(
                id,
                title,
                StepState::NotPossible,
                "certutil (libnss3-tools) is not installed, so the browsers' databases cannot be read or changed",
            )
        };
    }
    let checks: Vec<Check> = present.iter().map(|(_, db)| check_nss(db, der)).collect();
    let missing: Vec<&Check> = checks.iter().filter(|c| c.failed()).collect();
    let detail = checks
        .iter()
        .map(|c| c.what.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let command = present
        .iter()
        .map(|(s, _)| command_line(s))
        .collect::<Vec<_>>()
        .join(" && ");
    let state = if missing.is_empty() {
        StepState::Done
    } else {
        StepState::Needed
    };
    Step {
        command: Some(command),
        action: (state == StepState::Needed).then_some(Action::TrustBrowsers),
        undo: Some(
            present
                .iter()
                .map(|(_, db)| {
                    format!(
                        "certutil -d sql:{} -D -n '{}'",
                        db.display(),
                        weir_tls::trust::NSS_NICKNAME
                    )
                })
                .collect::<Vec<_>>()
                .join(" && "),
        ),
        ..Step::new(id, title, state, detail)
    }
}

fn vscode_step(install: &Install) -> Step {
    let (id, title) = (StepId::Vscode, "Point VS Code at Weir");
    let Some(target) = vscode::settings_target() else {
        return Step::new(
            id,
            title,
            StepState::NotPossible,
            "cannot tell where VS Code's user settings.json is (no HOME)",
        );
    };
    let path = target.path;
    let remote = target
        .remote
        .map(|why| format!(" ({})", vscode::remote_note(&why)))
        .unwrap_or_default();
    let proxy = install.proxy_url();
    let apply = format!("weir setup vscode --apply --settings {}", path.display());
    let undo = format!("weir setup vscode --undo --settings {}", path.display());
    if vscode::is_pointed_at(&path, &proxy) {
        Step {
            undo: Some(undo),
            undo_action: Some(Action::VscodeUndo),
            ..Step::new(
                id,
                title,
                StepState::Done,
                format!("http.proxy in {} is {proxy}{remote}", path.display()),
            )
        }
    } else {
        Step {
            command: Some(apply),
            action: Some(Action::Vscode),
            undo: Some(undo),
            ..Step::new(
                id,
                title,
                StepState::Needed,
                format!(
                    "{} does not point VS Code at {proxy}{remote}",
                    path.display()
                ),
            )
        }
    }
}

fn token_step(env: &Env) -> Step {
    let (id, title) = (StepId::Token, "GitHub token for the sessions view");
    if env.token_stored {
        return Step {
            undo: Some("weir token forget".into()),
            ..Step::new(
                id,
                title,
                StepState::Done,
                if env.token_files {
                    "a GitHub token is stored in an owner-only file (no OS keychain: see the Keychain step)"
                } else {
                    "a GitHub token is stored in the OS keychain"
                },
            )
        };
    }
    if !env.token_keychain {
        return Step::new(
            id,
            title,
            StepState::NotPossible,
            "no secret store is open (no OS keychain, and no file store: see the Keychain step)",
        );
    }
    Step {
        command: Some("weir token set".into()),
        ..Step::new(
            id,
            title,
            StepState::Needed,
            "no GitHub token is stored: the sessions view has nothing to list with",
        )
    }
}

/// Whether `program` is a file in one of `PATH`'s directories.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a box without a keychain the token is a file: the step says so, not "OS keychain".
    #[test]
    fn the_token_step_names_the_store_it_is_in() {
        let env = |token_files| Env {
            home: None,
            shell: "bash".into(),
            token_stored: true,
            token_keychain: true,
            token_files,
        };
        let files = token_step(&env(true));
        assert!(files.detail.contains("owner-only file"), "{}", files.detail);
        assert!(
            !files.detail.contains("stored in the OS keychain"),
            "{}",
            files.detail
        );
        let keychain = token_step(&env(false));
        assert!(
            keychain.detail.ends_with("in the OS keychain"),
            "{}",
            keychain.detail
        );
    }
}
