//! The Set up view's steps that are a line in one of the user's own files, each with its do and
//! undo: the shell profile's `weir env --if-running` line, git's global `http.proxy`, and the
//! XDG autostart entry (the same file the tray's "Start at login" writes, so both agree).

use super::setup_steps::{on_path, Action, Env, Step, StepId, StepState};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The comment written above the profile line, so the undo takes out exactly what was added.
const PROFILE_MARK: &str = "# Weir: point command-line tools at Weir while it runs";
/// tauri-plugin-autostart names the entry after the app's product name (`Weir`,
/// src-tauri/tauri.conf.json); auto-launch 0.6 writes `~/.config/autostart/<name>.desktop`.
const AUTOSTART_FILE: &str = ".config/autostart/Weir.desktop";
const UNIT_ENABLED: &str = ".config/systemd/user/default.target.wants/weir.service";
const PACKAGED_UNIT: &str = "/usr/lib/systemd/user/weir.service";

/// Which profile file the shell reads, and the line that points it at Weir. bash: a login
/// shell (an SSH session) reads the first of `~/.bash_profile`, `~/.bash_login`, `~/.profile`
/// and not `~/.bashrc`, which only interactive non-login shells (a desktop terminal) read. The
/// login file usually sources `~/.bashrc` (Debian's `~/.profile` does), and then `~/.bashrc`
/// serves both; a login file that does not is where the line goes, or SSH sessions miss it.
pub fn profile(env: &Env) -> Option<(PathBuf, &'static str)> {
    let home = env.home.as_ref()?;
    Some(match env.shell.as_str() {
        "fish" => (
            home.join(".config/fish/config.fish"),
            "weir env --shell fish --if-running | source",
        ),
        // zsh reads ~/.zshrc in login and non-login interactive shells alike.
        "zsh" => (home.join(".zshrc"), "eval \"$(weir env --if-running)\""),
        _ => (bash_file(home), "eval \"$(weir env --if-running)\""),
    })
}

/// `~/.bashrc`, unless bash's login file exists and does not read it.
fn bash_file(home: &Path) -> PathBuf {
    let login = [".bash_profile", ".bash_login", ".profile"]
        .iter()
        .map(|f| home.join(f))
        .find(|p| p.is_file());
    match login {
        Some(l)
            if !std::fs::read_to_string(&l)
                .unwrap_or_default()
                .contains(".bashrc") =>
        {
            l
        }
        _ => home.join(".bashrc"),
    }
}

/// Whether a non-comment line of the profile runs `weir env` (written by us or by hand).
fn profile_has_line(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .any(|l| !l.starts_with('#') && l.contains("weir env"))
}

pub fn shell_step(env: &Env, proxy: &str) -> Step {
    let (id, title) = (StepId::Shell, "Point the shell at Weir");
    let Some((file, line)) = profile(env) else {
        return Step::new(
            id,
            title,
            StepState::NotPossible,
            "no HOME: no shell profile to write to",
        );
    };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let undo = format!("delete the line `{line}` from {}", file.display());
    if profile_has_line(&text) {
        Step {
            undo: Some(undo),
            undo_action: Some(Action::ShellUndo),
            ..Step::new(
                id,
                title,
                StepState::Done,
                format!(
                    "{} runs `weir env`: new shells use {proxy} while Weir runs",
                    file.display()
                ),
            )
        }
    } else {
        Step {
            command: Some(format!("echo '{line}' >> {}", file.display())),
            action: Some(Action::Shell),
            undo: Some(undo),
            ..Step::new(
                id,
                title,
                StepState::Needed,
                format!(
                    "{} does not run `weir env`: command-line tools do not use Weir",
                    file.display()
                ),
            )
        }
    }
}

/// Appends the profile line (with its mark). Nothing changes when a `weir env` line is there.
pub fn shell_apply(env: &Env) -> Result<String, String> {
    let (file, line) = profile(env).ok_or("no HOME: no shell profile to write to")?;
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    if profile_has_line(&text) {
        return Ok(format!("{} already runs `weir env`", file.display()));
    }
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&format!("{PROFILE_MARK}\n{line}\n"));
    write(&file, &new)?;
    Ok(format!(
        "added `{line}` to {}; new shells use Weir",
        file.display()
    ))
}

/// Takes out the lines [`shell_apply`] wrote (the mark and the exact line); a `weir env` line
/// written by hand in another form is left, and named.
pub fn shell_undo(env: &Env) -> Result<String, String> {
    let (file, line) = profile(env).ok_or("no HOME: no shell profile")?;
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| l.trim() != PROFILE_MARK && l.trim() != line)
        .collect();
    let mut new = kept.join("\n");
    if !new.is_empty() {
        new.push('\n');
    }
    if new != text {
        write(&file, &new)?;
    }
    if profile_has_line(&new) {
        return Err(format!(
            "{} still runs `weir env` in a line Weir did not write: take it out by hand",
            file.display()
        ));
    }
    Ok(format!("took `{line}` out of {}", file.display()))
}

fn write(file: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

fn git(args: &[&str]) -> Result<std::process::Output, String> {
    Command::new("git")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))
}

fn git_proxy() -> Option<String> {
    let out = git(&["config", "--global", "--get", "http.proxy"]).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn git_step(proxy: &str) -> Step {
    let (id, title) = (StepId::Git, "Point git at Weir");
    if !on_path("git") {
        return Step::new(id, title, StepState::NotPossible, "git is not installed");
    }
    let undo = "git config --global --unset http.proxy".to_string();
    match git_proxy() {
        Some(v) if v.trim_end_matches('/') == proxy => Step {
            undo: Some(undo),
            undo_action: Some(Action::GitUndo),
            ..Step::new(
                id,
                title,
                StepState::Done,
                format!("git's global http.proxy is {proxy}"),
            )
        },
        found => Step {
            command: Some(format!("git config --global http.proxy {proxy}")),
            action: Some(Action::Git),
            undo: Some(undo),
            ..Step::new(
                id,
                title,
                StepState::Needed,
                match found {
                    Some(v) => format!("git's global http.proxy is {v}, not Weir's {proxy}"),
                    None => "git's global http.proxy is not set".to_string(),
                },
            )
        },
    }
}

pub fn git_apply(proxy: &str) -> Result<String, String> {
    let out = git(&["config", "--global", "http.proxy", proxy])?;
    if !out.status.success() {
        return Err(format!(
            "git config failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(format!("git's global http.proxy is now {proxy}"))
}

/// Unsets `http.proxy` only while it is Weir's (another proxy the user set is left alone).
pub fn git_undo(proxy: &str) -> Result<String, String> {
    match git_proxy() {
        Some(v) if v.trim_end_matches('/') == proxy => {
            let out = git(&["config", "--global", "--unset", "http.proxy"])?;
            if !out.status.success() {
                return Err(format!(
                    "git config --unset failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok("git's global http.proxy is unset".into())
        }
        _ => Ok("git's global http.proxy was not Weir's; nothing changed".into()),
    }
}

/// The tray binary a login entry would start: next to this program (the tray runs the
/// engine in-process) or where the package puts it.
fn tray_binary() -> Option<PathBuf> {
    // Inside an AppImage the running binary is under a mount that lasts only while it runs:
    // the image itself (which the AppImage runtime names in APPIMAGE) is what starts at login,
    // as the tray's own "Start at login" (tauri's autostart plugin) writes it too.
    if let Some(image) = std::env::var_os("APPIMAGE").map(PathBuf::from) {
        if image.is_file() {
            return Some(image);
        }
    }
    let here = std::env::current_exe().ok();
    let sibling = here
        .as_ref()
        .and_then(|e| Some(e.parent()?.join("weir-tray")));
    here.filter(|e| e.file_name().is_some_and(|n| n == "weir-tray"))
        .or(sibling.filter(|p| p.is_file()))
        .or(Some(PathBuf::from("/usr/bin/weir-tray")).filter(|p| p.is_file()))
}

pub fn login_step(env: &Env) -> Step {
    let (id, title) = (StepId::Login, "Start Weir at login");
    let Some(home) = &env.home else {
        return Step::new(id, title, StepState::NotPossible, "no HOME");
    };
    let entry = home.join(AUTOSTART_FILE);
    if entry.is_file() {
        return Step {
            undo: Some(format!("rm {}", entry.display())),
            undo_action: Some(Action::LoginUndo),
            ..Step::new(
                id,
                title,
                StepState::Done,
                format!("{} starts the tray at login", entry.display()),
            )
        };
    }
    if home.join(UNIT_ENABLED).exists() {
        return Step {
            undo: Some("systemctl --user disable --now weir.service".into()),
            ..Step::new(
                id,
                title,
                StepState::Done,
                "the systemd user unit weir.service is enabled",
            )
        };
    }
    match tray_binary() {
        Some(tray) => Step {
            command: Some(format!(
                "the tray's \"Start at login\" (writes {})",
                entry.display()
            )),
            action: Some(Action::Login),
            undo: Some(format!("rm {}", entry.display())),
            ..Step::new(
                id,
                title,
                StepState::Needed,
                format!("nothing starts {} at login", tray.display()),
            )
        },
        None if Path::new(PACKAGED_UNIT).is_file() => Step {
            command: Some("systemctl --user enable --now weir.service".into()),
            undo: Some("systemctl --user disable --now weir.service".into()),
            ..Step::new(
                id,
                title,
                StepState::Needed,
                "the systemd user unit weir.service is not enabled",
            )
        },
        None => Step {
            command: Some("start `weir serve` from your session's start-up programs".into()),
            ..Step::new(
                id,
                title,
                StepState::NotPossible,
                "no tray app and no systemd user unit installed here (the .deb has both)",
            )
        },
    }
}

/// Writes the autostart entry for the tray.
pub fn login_apply(env: &Env) -> Result<String, String> {
    let home = env.home.as_ref().ok_or("no HOME")?;
    let tray = tray_binary().ok_or("no tray app installed here to start at login")?;
    let entry = home.join(AUTOSTART_FILE);
    let text = format!(
        "[Desktop Entry]\nType=Application\nVersion=1.0\nName=Weir\nComment=Weir's tray app\nExec={}\nStartupNotify=false\nTerminal=false\n",
        tray.display()
    );
    write(&entry, &text)?;
    Ok(format!("{} starts the tray at login", entry.display()))
}

pub fn login_undo(env: &Env) -> Result<String, String> {
    let home = env.home.as_ref().ok_or("no HOME")?;
    let entry = home.join(AUTOSTART_FILE);
    match std::fs::remove_file(&entry) {
        Ok(()) => Ok(format!("removed {}", entry.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok("nothing starts Weir at login".into())
        }
        Err(e) => Err(format!("cannot remove {}: {e}", entry.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test that sets APPIMAGE (process-wide): an AppImage's tray starts at login as
    /// the image, never as the binary under its temporary mount.
    #[test]
    fn inside_an_appimage_the_image_starts_at_login() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("Weir_0.1.0_x86_64.AppImage");
        std::env::set_var("APPIMAGE", &image);
        assert_ne!(tray_binary(), Some(image.clone()), "no such file: not used");
        std::fs::write(&image, b"").unwrap();
        assert_eq!(tray_binary(), Some(image));
        std::env::remove_var("APPIMAGE");
    }

    #[test]
    fn profile_line_is_added_once_and_taken_out_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            home: Some(dir.path().to_path_buf()),
            shell: "bash".into(),
            token_stored: false,
            token_keychain: true,
            token_files: false,
        };
        let rc = dir.path().join(".bashrc");
        std::fs::write(&rc, "alias ll='ls -l'").unwrap();
        assert_eq!(
            shell_step(&env, "http://127.0.0.1:1").state,
            StepState::Needed
        );
        shell_apply(&env).unwrap();
        shell_apply(&env).unwrap();
        let text = std::fs::read_to_string(&rc).unwrap();
        assert_eq!(text.matches("weir env --if-running").count(), 1, "{text}");
        assert_eq!(
            shell_step(&env, "http://127.0.0.1:1").state,
            StepState::Done
        );
        shell_undo(&env).unwrap();
        assert_eq!(std::fs::read_to_string(&rc).unwrap(), "alias ll='ls -l'\n");
        std::fs::write(&rc, "eval \"$(weir env)\"\n").unwrap();
        assert!(
            shell_undo(&env).is_err(),
            "a hand-written line is named, not removed"
        );
    }

    #[test]
    fn a_bash_login_shell_gets_the_line_where_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let env = Env {
            home: Some(home.to_path_buf()),
            shell: "bash".into(),
            token_stored: false,
            token_keychain: true,
            token_files: false,
        };
        let file = |env: &Env| profile(env).unwrap().0;
        assert_eq!(file(&env), home.join(".bashrc"));
        // Debian's ~/.profile sources ~/.bashrc: one line there serves SSH logins too.
        std::fs::write(
            home.join(".profile"),
            "if [ -f \"$HOME/.bashrc\" ]; then\n  . \"$HOME/.bashrc\"\nfi\n",
        )
        .unwrap();
        assert_eq!(file(&env), home.join(".bashrc"));
        // A ~/.bash_profile that does not: a login shell reads only it.
        std::fs::write(home.join(".bash_profile"), "export EDITOR=vi\n").unwrap();
        assert_eq!(file(&env), home.join(".bash_profile"));
        shell_apply(&env).unwrap();
        let text = std::fs::read_to_string(home.join(".bash_profile")).unwrap();
        assert!(text.contains("weir env --if-running"), "{text}");
    }
}
