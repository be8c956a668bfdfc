//! Which of the developer's tools are still pointed at this Weir: proxy variables in the
//! current environment, VS Code's settings, git's global `http.proxy`/`https.proxy`, the
//! desktop's proxy auto-config URL (GNOME). `weir doctor` names them when Weir is not running;
//! the tray calls [`pointed_at_weir`] on quit to warn before tools start failing; each entry
//! says how to take it back out.

use super::{vscode, Install};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What kind of tool it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A proxy variable in the environment this process was started from.
    ShellEnv,
    Vscode,
    Git,
    /// The desktop's proxy auto-config URL is Weir's `/proxy.pac`.
    SystemPac,
}

/// One tool pointed at Weir.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PointedTool {
    pub kind: ToolKind,
    /// What points at Weir, in words ("HTTPS_PROXY in this environment", a file).
    pub what: String,
    /// Whether it keeps working while Weir is gone (the PAC falls back to `DIRECT`): worth
    /// telling, not a failure.
    pub falls_back_direct: bool,
    /// The command that takes it back out.
    pub undo: String,
}

/// Proxy variables `weir env` sets (and the `ALL_PROXY` pair other tools read).
pub const PROXY_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Where to look. [`Sources::for_this_user`] is what `weir doctor` and the tray use; tests
/// point it elsewhere.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// VS Code's user settings.json (`None`: not checked).
    pub vscode_settings: Option<PathBuf>,
    /// Ask `git config --global`.
    pub git: bool,
    /// Ask GNOME's proxy settings (`gsettings`).
    pub desktop: bool,
}

impl Sources {
    pub fn for_this_user() -> Sources {
        Sources {
            vscode_settings: vscode::default_settings_path(),
            git: true,
            desktop: cfg!(target_os = "linux"),
        }
    }
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim().trim_end_matches('/') == b.trim_end_matches('/')
}

/// Every tool pointed at `install`'s Weir, whether or not Weir is running now.
pub fn pointed_at_weir(install: &Install, sources: &Sources) -> Vec<PointedTool> {
    let proxy = install.proxy_url();
    let mut out = Vec::new();
    for var in PROXY_VARS {
        if std::env::var(var).is_ok_and(|v| same_url(&v, &proxy)) {
            out.push(PointedTool {
                kind: ToolKind::ShellEnv,
                what: format!("{var} in this environment is {proxy}"),
                falls_back_direct: false,
                undo: "eval \"$(weir env --unset)\" (and take `weir env` out of your shell profile, or use `weir env --if-running`)".into(),
            });
        }
    }
    if let Some(path) = &sources.vscode_settings {
        if vscode::is_pointed_at(path, &proxy) {
            out.push(PointedTool {
                kind: ToolKind::Vscode,
                what: format!("VS Code's http.proxy in {} is {proxy}", path.display()),
                falls_back_direct: false,
                undo: format!("weir setup vscode --undo --settings {}", path.display()),
            });
        }
    }
    if sources.git {
        for key in ["http.proxy", "https.proxy"] {
            if git_config(key).is_some_and(|v| same_url(&v, &proxy)) {
                out.push(PointedTool {
                    kind: ToolKind::Git,
                    what: format!("git's global {key} is {proxy}"),
                    falls_back_direct: false,
                    undo: format!("git config --global --unset {key}"),
                });
            }
        }
    }
    if sources.desktop {
        if let Some(url) = gnome_pac_url().filter(|u| is_weir_pac(u, install)) {
            out.push(PointedTool {
                kind: ToolKind::SystemPac,
                what: format!("the desktop's proxy auto-config URL is {url}"),
                falls_back_direct: true,
                undo: "gsettings set org.gnome.system.proxy mode 'none'".into(),
            });
        }
    }
    out
}

fn is_weir_pac(url: &str, install: &Install) -> bool {
    same_url(url, &format!("{}/proxy.pac", install.proxy_url()))
}

/// A value from git's global config (`None` without git or the key).
fn git_config(key: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["config", "--global", "--get", key])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
}

/// GNOME's auto-config URL while its proxy mode is `auto`.
fn gnome_pac_url() -> Option<String> {
    let get = |key: &str| -> Option<String> {
        let out = Command::new("gsettings")
            .args(["get", "org.gnome.system.proxy", key])
            .output()
            .ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .trim_matches('\'')
                .to_string()
        })
    };
    (get("mode")? == "auto")
        .then(|| get("autoconfig-url"))
        .flatten()
}

/// Whether this install's Weir answers its health check at its address, naming this
/// install's id when one is known (`expected_install_id`) and, when this install's control
/// secret is known (`control_secret`), proving it holds it ([`crate::control_proof`]): a
/// program squatting on the port gets no shell pointed at it. Short timeouts: a shell profile
/// calls this through `weir env --if-running`.
pub fn weir_is_running(
    install: &Install,
    expected_install_id: Option<&str>,
    control_secret: Option<&str>,
) -> bool {
    use std::io::{Read, Write};
    use std::time::Duration;
    let addr = install.proxy_addr();
    let host = crate::config::host_for(addr.ip(), addr.port());
    let challenge = crate::control_proof::new_challenge();
    let attempt = || -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            s,
            "GET /_weir/api/health?challenge={challenge} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.take(64 * 1024).read_to_string(&mut out)?;
        Ok(out)
    };
    let Ok(resp) = attempt() else {
        return false;
    };
    let Some((head, body)) = resp.split_once("\r\n\r\n") else {
        return false;
    };
    if !head.starts_with("HTTP/1.1 200") {
        return false;
    }
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    let Some(found) = v["install_id"].as_str().filter(|_| v["ok"] == true) else {
        return false;
    };
    let proved = control_secret.is_none_or(|secret| {
        let proof = v["proof"].as_str().unwrap_or_default();
        crate::control_proof::verify(secret, &host, &challenge, proof)
    });
    proved && expected_install_id.is_none_or(|want| want.trim() == found)
}

/// This install's id from its keychain, if it has one (a Weir started from this data dir
/// stores it there).
pub fn install_id(data_dir: &Path) -> Option<String> {
    crate::secrets::Namespace::for_data_dir(data_dir)
        .keychain()
        .get(crate::secrets::Account::InstallId.as_str())
        .ok()
        .flatten()
}

/// This install's control secret: `WEIR_CONTROL_SECRET`, else its keychain entry (a Weir
/// started from this data dir stores it there), for [`weir_is_running`]'s proof.
/// Trimmed, as `weir serve` reads it (a file store's secret may end in a newline).
pub fn control_secret(data_dir: &Path) -> Option<String> {
    let secret = std::env::var("WEIR_CONTROL_SECRET").ok().or_else(|| {
        crate::secrets::Namespace::for_data_dir(data_dir)
            .keychain()
            .get(crate::secrets::Account::ControlSecret.as_str())
            .ok()
            .flatten()
    })?;
    Some(secret.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vscode_pointed_at_this_weir_is_named_with_its_undo() {
        let dir = tempfile::tempdir().unwrap();
        let install = Install::new(crate::config::Settings::default(), dir.path().join("d"));
        let vs = dir.path().join("settings.json");
        let sources = Sources {
            vscode_settings: Some(vs.clone()),
            git: false,
            desktop: false,
        };
        std::fs::write(
            &vs,
            "{ // mine\n \"http.proxy\": \"http://proxy.corp:3128\" }",
        )
        .unwrap();
        let others: Vec<_> = pointed_at_weir(&install, &sources)
            .into_iter()
            .filter(|t| t.kind == ToolKind::Vscode)
            .collect();
        assert!(others.is_empty(), "another proxy is not Weir: {others:?}");
        vscode::apply(&vs, &install.proxy_url()).unwrap();
        let found: Vec<_> = pointed_at_weir(&install, &sources)
            .into_iter()
            .filter(|t| t.kind == ToolKind::Vscode)
            .collect();
        assert_eq!(found.len(), 1);
        assert!(!found[0].falls_back_direct);
        assert_eq!(
            found[0].undo,
            format!("weir setup vscode --undo --settings {}", vs.display())
        );
        assert!(is_weir_pac("http://127.0.0.1:9347/proxy.pac", &install));
        assert!(!is_weir_pac("http://127.0.0.1:9348/proxy.pac", &install));
    }
}
