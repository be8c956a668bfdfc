//! VS Code: the user settings that send its traffic (and its extensions') through Weir, merged
//! into `settings.json` (JSONC: comments and trailing commas are kept) after a `.bak` backup.
//!
//! Which `settings.json`: on a VS Code remote host (Remote-SSH, a dev container, WSL, a
//! Codespace) the remote machine's settings (`~/.vscode-server/data/Machine/settings.json`).
//! Copilot Chat declares no `extensionKind` and has a `main` but no `browser` entry, so VS Code
//! runs it as a "workspace" extension: on the remote host, next to this Weir, where its
//! cloud-session, token and user calls start (/work/research/clients.md §6; docs/install.md).

use jsonc_parser::cst::{CstInputValue, CstRootNode};
use jsonc_parser::ParseOptions;
use std::path::{Path, PathBuf};

/// Why the settings could not be merged or written.
#[derive(Debug, thiserror::Error)]
pub enum VscodeError {
    #[error("{path} is not valid JSONC: {message}")]
    Parse { path: String, message: String },
    #[error("the top level of {path} is not a JSON object")]
    NotAnObject { path: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The keys Weir sets: the proxy, "override" so extensions use it too, and strict TLS checks
/// (Weir's CA is trusted through the system store, never by turning verification off).
pub fn settings(proxy: &str) -> Vec<(&'static str, CstInputValue)> {
    vec![
        ("http.proxy", CstInputValue::String(proxy.to_string())),
        (
            "http.proxySupport",
            CstInputValue::String("override".to_string()),
        ),
        ("http.proxyStrictSSL", CstInputValue::Bool(true)),
    ]
}

/// `text` with the keys set (replaced where present, appended otherwise), comments kept.
/// `path` only names the file in errors.
pub fn merge(text: &str, path: &str, proxy: &str) -> Result<String, VscodeError> {
    let text = if text.trim().is_empty() { "{}\n" } else { text };
    let root =
        CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| VscodeError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
    let obj = root
        .object_value_or_create()
        .ok_or_else(|| VscodeError::NotAnObject {
            path: path.to_string(),
        })?;
    for (key, value) in settings(proxy) {
        match obj.get(key) {
            Some(prop) => prop.set_value(value),
            None => {
                obj.append(key, value);
            }
        }
    }
    Ok(root.to_string())
}

/// `text` with Weir's keys taken back out, comments and every other key kept. Only when
/// `http.proxy` is `proxy` (Weir's address): a proxy the user set to something else is theirs,
/// and then nothing is removed. `None`: nothing to take out.
pub fn unmerge(text: &str, path: &str, proxy: &str) -> Result<Option<String>, VscodeError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let root =
        CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| VscodeError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
    let Some(obj) = root.object_value() else {
        return Err(VscodeError::NotAnObject {
            path: path.to_string(),
        });
    };
    if !points_at(&obj, proxy) {
        return Ok(None);
    }
    for (key, _) in settings(proxy) {
        if let Some(prop) = obj.get(key) {
            prop.remove();
        }
    }
    Ok(Some(root.to_string()))
}

fn points_at(obj: &jsonc_parser::cst::CstObject, proxy: &str) -> bool {
    obj.get("http.proxy")
        .and_then(|p| p.value())
        .and_then(|v| v.as_string_lit())
        .and_then(|s| s.decoded_value().ok())
        .is_some_and(|v| v.trim_end_matches('/') == proxy.trim_end_matches('/'))
}

/// Whether the settings file at `path` sends VS Code through `proxy` (unreadable or
/// unparsable files do not).
pub fn is_pointed_at(path: &Path, proxy: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    CstRootNode::parse(&text, &ParseOptions::default())
        .ok()
        .and_then(|root| root.object_value())
        .is_some_and(|obj| points_at(&obj, proxy))
}

/// Takes Weir's proxy settings back out of `path` (a `.bak` copy first). `Ok(None)`: the file
/// does not point VS Code at Weir, nothing was changed; `Ok(Some(backup))` otherwise.
pub fn undo(path: &Path, proxy: &str) -> Result<Option<PathBuf>, VscodeError> {
    let io = |action, source| VscodeError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", e)),
    };
    let Some(new) = unmerge(&old, &path.display().to_string(), proxy)? else {
        return Ok(None);
    };
    let bak = backup_path(path);
    std::fs::write(&bak, &old).map_err(|e| io("back up", e))?;
    std::fs::write(path, new).map_err(|e| io("write", e))?;
    Ok(Some(bak))
}

fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// The settings alone, as a fresh `settings.json` (what `weir setup vscode` shows).
pub fn snippet(proxy: &str) -> String {
    merge("{}", "settings", proxy).unwrap_or_default()
}

/// VS Code's settings file for this machine, if it can be told: the remote host's Machine
/// settings when this is a VS Code remote host ([`settings_target`]), else the user settings.
pub fn default_settings_path() -> Option<PathBuf> {
    settings_target().map(|t| t.path)
}

/// Where `weir setup vscode` writes, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsTarget {
    pub path: PathBuf,
    /// `Some(why)` on a VS Code remote host: what showed it.
    pub remote: Option<String>,
}

/// [`SettingsTarget`] for this process's environment.
pub fn settings_target() -> Option<SettingsTarget> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let home = var("HOME").map(PathBuf::from);
    if cfg!(target_os = "macos") {
        return home.map(|h| SettingsTarget {
            path: h.join("Library/Application Support/Code/User/settings.json"),
            remote: None,
        });
    }
    if cfg!(windows) {
        return var("APPDATA").map(|a| SettingsTarget {
            path: PathBuf::from(a).join("Code\\User\\settings.json"),
            remote: None,
        });
    }
    let remote_env = ["REMOTE_CONTAINERS", "WSL_DISTRO_NAME", "CODESPACES"]
        .into_iter()
        .find(|k| var(k).is_some());
    linux_target(&LinuxHost {
        home,
        xdg_config: var("XDG_CONFIG_HOME").map(PathBuf::from),
        agent_folder: var("VSCODE_AGENT_FOLDER").map(PathBuf::from),
        remote_env,
    })
}

/// What [`linux_target`] looks at (the environment, and the file system under `home`).
struct LinuxHost {
    home: Option<PathBuf>,
    xdg_config: Option<PathBuf>,
    agent_folder: Option<PathBuf>,
    remote_env: Option<&'static str>,
}

/// A remote host's server keeps its Machine settings in `<agent folder>/data/Machine` (the
/// folder is `~/.vscode-server` unless `VSCODE_AGENT_FOLDER` moves it). Remote when the
/// server's folder is named, when the environment is a dev container, WSL or a Codespace, or
/// when `~/.vscode-server` exists and VS Code itself was never run here (no user settings dir).
fn linux_target(h: &LinuxHost) -> Option<SettingsTarget> {
    let machine = |folder: &Path| folder.join("data/Machine/settings.json");
    if let Some(f) = &h.agent_folder {
        return Some(SettingsTarget {
            path: machine(f),
            remote: Some(format!("VSCODE_AGENT_FOLDER is {}", f.display())),
        });
    }
    let home = h.home.as_ref()?;
    let server = home.join(".vscode-server");
    let user_dir = h
        .xdg_config
        .clone()
        .unwrap_or_else(|| home.join(".config"))
        .join("Code/User");
    let remote = match h.remote_env {
        Some(k) => Some(format!("{k} is set")),
        None if server.is_dir() && !user_dir.is_dir() => {
            Some(format!("{} exists", server.display()))
        }
        None => None,
    };
    Some(match remote {
        Some(why) => SettingsTarget {
            path: machine(&server),
            remote: Some(why),
        },
        None => SettingsTarget {
            path: user_dir.join("settings.json"),
            remote: None,
        },
    })
}

/// What to say about a remote target: why the remote machine's settings are the ones.
pub fn remote_note(why: &str) -> String {
    format!("this is a VS Code remote host ({why}): Copilot Chat runs here as a workspace extension, so the remote machine's settings are the ones its calls use")
}

/// Backs `path` up to `path.bak` (if it exists) and writes the merged settings. Returns the
/// backup's path when there was a file to back up.
pub fn apply(path: &Path, proxy: &str) -> Result<Option<PathBuf>, VscodeError> {
    let io = |action, source| VscodeError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let (old, existed) = match std::fs::read_to_string(path) {
        Ok(t) => (t, true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), false),
        Err(e) => return Err(io("read", e)),
    };
    let merged = merge(&old, &path.display().to_string(), proxy)?;
    let mut backup = None;
    if existed {
        let bak = backup_path(path);
        std::fs::write(&bak, &old).map_err(|e| io("back up", e))?;
        backup = Some(bak);
    } else if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("create the directory of", e))?;
    }
    std::fs::write(path, merged).map_err(|e| io("write", e))?;
    Ok(backup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_host_gets_the_machine_settings() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().to_path_buf();
        let host = |agent: Option<PathBuf>, env: Option<&'static str>| LinuxHost {
            home: Some(home.clone()),
            xdg_config: None,
            agent_folder: agent,
            remote_env: env,
        };
        let user = home.join(".config/Code/User/settings.json");
        let machine = home.join(".vscode-server/data/Machine/settings.json");
        // A desktop: the user settings.
        let t = linux_target(&host(None, None)).unwrap();
        assert_eq!((t.path, t.remote), (user.clone(), None));
        // A dev container, WSL or Codespace, even before VS Code's server is there.
        let t = linux_target(&host(None, Some("WSL_DISTRO_NAME"))).unwrap();
        assert_eq!(t.path, machine);
        assert_eq!(t.remote.as_deref(), Some("WSL_DISTRO_NAME is set"));
        // An SSH box VS Code connected to: its server folder, and no VS Code of its own.
        std::fs::create_dir_all(home.join(".vscode-server")).unwrap();
        assert_eq!(linux_target(&host(None, None)).unwrap().path, machine);
        // ...but a desktop that is also reached over Remote-SSH keeps its user settings.
        std::fs::create_dir_all(home.join(".config/Code/User")).unwrap();
        assert_eq!(linux_target(&host(None, None)).unwrap().path, user);
        // The server's folder moved.
        let t = linux_target(&host(Some(home.join("srv")), None)).unwrap();
        assert_eq!(t.path, home.join("srv/data/Machine/settings.json"));
    }

    #[test]
    fn merge_keeps_comments_and_replaces_keys() {
        let text = "{\n  // my font\n  \"editor.fontSize\": 14,\n  \"http.proxy\": \"http://old:1\", /* old */\n}\n";
        let out = merge(text, "s.json", "http://127.0.0.1:9347").unwrap();
        assert!(
            out.contains("// my font") && out.contains("/* old */"),
            "{out}"
        );
        assert!(
            out.contains("\"http.proxy\": \"http://127.0.0.1:9347\""),
            "{out}"
        );
        assert!(!out.contains("http://old:1"), "{out}");
        assert!(out.contains("\"http.proxySupport\": \"override\""), "{out}");
        assert!(out.contains("\"http.proxyStrictSSL\": true"), "{out}");
        assert!(out.contains("\"editor.fontSize\": 14"), "{out}");
    }

    #[test]
    fn merge_refuses_garbage_and_non_objects() {
        assert!(matches!(
            merge("[1, 2]", "s.json", "p"),
            Err(VscodeError::NotAnObject { .. })
        ));
        assert!(matches!(
            merge("{ \"a\": ", "s.json", "p"),
            Err(VscodeError::Parse { .. })
        ));
        assert!(merge("", "s.json", "p")
            .unwrap()
            .contains("\"http.proxy\": \"p\""));
    }

    #[test]
    fn unmerge_takes_back_only_what_merge_added() {
        let text =
            "{\n  // my font\n  \"editor.fontSize\": 14, /* keep */\n  \"files.eol\": \"\\n\"\n}\n";
        let merged = merge(text, "s.json", "http://127.0.0.1:9347").unwrap();
        let back = unmerge(&merged, "s.json", "http://127.0.0.1:9347")
            .unwrap()
            .unwrap();
        assert!(
            back.contains("// my font") && back.contains("/* keep */"),
            "{back}"
        );
        assert!(!back.contains("http.proxy"), "{back}");
        assert!(
            back.contains("\"editor.fontSize\": 14") && back.contains("files.eol"),
            "{back}"
        );
        // Parses as JSONC again, and a second undo has nothing to do.
        assert_eq!(
            unmerge(&back, "s.json", "http://127.0.0.1:9347").unwrap(),
            None
        );
        // Someone else's proxy is left alone.
        let theirs = merge(text, "s.json", "http://proxy.corp:3128").unwrap();
        assert_eq!(
            unmerge(&theirs, "s.json", "http://127.0.0.1:9347").unwrap(),
            None
        );
    }

    #[test]
    fn apply_backs_up_and_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Code/User/settings.json");
        assert_eq!(apply(&path, "http://127.0.0.1:1").unwrap(), None);
        let bak = apply(&path, "http://127.0.0.1:2").unwrap().unwrap();
        assert!(std::fs::read_to_string(bak)
            .unwrap()
            .contains("127.0.0.1:1"));
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("127.0.0.1:2"));
    }
}
