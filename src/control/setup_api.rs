//! `/_weir/api/setup`: the dashboard's Set up view. `GET` answers every step with its live
//! state ([`super::setup_steps`]) and whether this is the install's first run; `POST
//! /_weir/api/setup/<action>` runs one step's button (trust the CA in the browsers' NSS
//! databases, the shell profile line, VS Code, git, start at login, or their undo) and answers
//! the steps again; `POST /_weir/api/setup/seen` records that the view was shown, so the
//! next start does not open it by itself. All of it needs the control secret: the steps name
//! the user's files, and the actions change them. The token step uses `PUT /_weir/api/token`.

use super::setup_files as files;
use super::setup_steps::{steps, Action, Env, Step};
use super::{json, require_secret, Control};
use crate::body::Body;
use crate::client_setup::{apply_steps, ca_install, vscode, Install, StepReport};
use crate::problem::{Problem, ProblemKind};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Serialize)]
struct SetupDoc {
    /// True until the view has been shown once (`POST /_weir/api/setup/seen`).
    first_run: bool,
    steps: Vec<Step>,
    /// What the last action did (POST answers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    done: Option<String>,
}

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
    rest: &str,
) -> Result<Response<Body>, Problem> {
    require_secret(ctl, &req)?;
    let data_dir = ctl
        .proxy
        .handoffs
        .data_dir()
        .map(PathBuf::from)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::Internal,
                "this engine runs without a data dir: there is no install to set up",
            )
        })?;
    let install = Install::new((*ctl.proxy.settings()).clone(), data_dir.clone());
    let store = ctl.proxy.queue.open().map(|q| q.secrets.kind());
    // Where a token is kept is the namespace's to say (the file store when its directory is
    // there), not the queue's: with the queue off, a token in a file is still in a file.
    let in_files = crate::secrets::Namespace::for_data_dir(&data_dir)
        .keychain()
        .file_store()
        .is_some();
    let env = Env::for_this_process(
        ctl.token_stored.load(Ordering::Relaxed),
        in_files || store.is_some_and(|k| k.is_persistent()),
        in_files || store == Some(crate::secrets::Backend::File),
    );
    let seen = data_dir.join(crate::client_setup::doctor_checks::SETUP_SEEN_FILE);
    match (req.method(), rest) {
        (&Method::GET, "") => answer(install, env, seen, None).await,
        (&Method::POST, "/seen") => {
            std::fs::write(&seen, b"")
                .map_err(|e| failed(format!("cannot write {}: {e}", seen.display())))?;
            Ok(json(&serde_json::json!({"first_run": false})))
        }
        (&Method::POST, p) => {
            let name = p.trim_start_matches('/');
            let action = Action::parse(name).ok_or_else(|| {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    ProblemKind::NotFound,
                    format!(
                        "no set-up action `{name}`; the actions are {}",
                        Action::ALL.map(Action::as_str).join(", ")
                    ),
                )
            })?;
            let (i, e) = (install.clone(), env.clone());
            let done = tokio::task::spawn_blocking(move || run(action, &i, &e))
                .await
                .map_err(|e| failed(format!("the set-up action did not finish: {e}")))?
                .map_err(failed)?;
            answer(install, env, seen, Some(done)).await
        }
        _ => Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::NotFound,
            "use GET /_weir/api/setup or POST /_weir/api/setup/<action>",
        )),
    }
}

async fn answer(
    install: Install,
    env: Env,
    seen: PathBuf,
    done: Option<String>,
) -> Result<Response<Body>, Problem> {
    let steps = tokio::task::spawn_blocking(move || steps(&install, &env))
        .await
        .map_err(|e| failed(format!("the set-up checks did not finish: {e}")))?;
    Ok(json(&SetupDoc {
        first_run: !seen.exists(),
        steps,
        done,
    }))
}

fn failed(detail: String) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ProblemKind::BadRequest,
        detail,
    )
}

/// Runs one button. Blocking (files, `git`, `certutil`, the keychain).
fn run(action: Action, install: &Install, env: &Env) -> Result<String, String> {
    let proxy = install.proxy_url();
    match action {
        Action::TrustBrowsers => trust_browsers(install),
        Action::Shell => files::shell_apply(env),
        Action::ShellUndo => files::shell_undo(env),
        Action::Vscode | Action::VscodeUndo => {
            let path = vscode::default_settings_path()
                .ok_or("cannot tell where VS Code's settings.json is")?;
            if action == Action::Vscode {
                vscode::apply(&path, &proxy).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{} points VS Code at {proxy}; restart VS Code",
                    path.display()
                ))
            } else {
                match vscode::undo(&path, &proxy).map_err(|e| e.to_string())? {
                    Some(_) => Ok(format!(
                        "took Weir's proxy settings out of {}",
                        path.display()
                    )),
                    None => Ok(format!("{} did not point VS Code at Weir", path.display())),
                }
            }
        }
        Action::Git => files::git_apply(&proxy),
        Action::GitUndo => files::git_undo(&proxy),
        Action::Login => files::login_apply(env),
        Action::LoginUndo => files::login_undo(env),
    }
}

/// `weir ca install`'s NSS steps only (no admin rights: they change the user's own browser
/// databases), for the databases that exist; the CA is vouched for first as `weir ca install`
/// does ([`ca_install::install_steps`]).
fn trust_browsers(install: &Install) -> Result<String, String> {
    let steps: Vec<_> = ca_install::install_steps(install)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| !s.needs_admin && super::setup_steps::nss_db(s).is_some())
        .collect();
    let mut ran = Vec::new();
    let mut errors = Vec::new();
    apply_steps(&steps, |r| match r {
        StepReport::Done(s) => ran.push(s.description.clone()),
        StepReport::Failed { step, exit } => errors.push(format!(
            "{} exited with {}",
            ca_install::command_line(step),
            exit.map_or("a signal".into(), |c| c.to_string())
        )),
        StepReport::CannotRun { program, error, .. } => {
            errors.push(format!("cannot run {program}: {error}"))
        }
        StepReport::Skipped(_) | StepReport::Running { .. } => {}
    });
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    if ran.is_empty() {
        return Err("no browser certificate database (NSS) to change here".into());
    }
    Ok(format!(
        "trusted Weir's CA in {} NSS database(s)",
        ran.len()
    ))
}
