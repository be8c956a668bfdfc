//! The environment that points command-line tools at Weir and makes them trust its CA, as
//! printed by `weir env` for `eval "$(weir env)"` (bash/zsh), `weir env --shell fish | source`
//! or PowerShell's `weir env --shell powershell | Invoke-Expression`.

use super::{proxy_url, sh_quote, Install};
use crate::intercept::CaError;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Hosts that must never go through the proxy (Weir itself).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// Syntax of the rendered variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// bash, zsh, sh: `export K=V`.
    Posix,
    /// `set -gx K V`.
    Fish,
    /// `$env:K = 'V'`.
    PowerShell,
}

/// What the variables are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellEnvInput {
    /// Where Weir listens.
    pub proxy_addr: SocketAddr,
    /// Weir's CA certificate alone (`NODE_EXTRA_CA_CERTS` adds it to Node's roots).
    pub ca_file: Option<PathBuf>,
    /// The system roots plus Weir's CA (`SSL_CERT_FILE` and friends replace the roots with it).
    pub bundle_file: Option<PathBuf>,
}

/// The variables, in the order they are printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellEnv {
    pub vars: Vec<(String, String)>,
}

/// The variables for `input`. Both spellings of the proxy variables: curl only reads the
/// lower-case `http_proxy`, Go and Python read either.
pub fn shell_env(input: &ShellEnvInput) -> ShellEnv {
    let proxy = proxy_url(input.proxy_addr);
    let mut vars: Vec<(&str, String)> = vec![
        ("HTTPS_PROXY", proxy.clone()),
        ("HTTP_PROXY", proxy.clone()),
        ("NO_PROXY", NO_PROXY.to_string()),
        ("https_proxy", proxy.clone()),
        ("http_proxy", proxy),
        ("no_proxy", NO_PROXY.to_string()),
    ];
    if let Some(ca) = &input.ca_file {
        vars.push(("NODE_EXTRA_CA_CERTS", ca.display().to_string()));
    }
    if let Some(bundle) = &input.bundle_file {
        let b = bundle.display().to_string();
        vars.push(("SSL_CERT_FILE", b.clone()));
        vars.push(("REQUESTS_CA_BUNDLE", b.clone()));
        vars.push(("CURL_CA_BUNDLE", b));
    }
    ShellEnv {
        vars: vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

impl ShellEnv {
    /// One line per variable in `shell`'s syntax, each ending in a newline.
    pub fn render(&self, shell: Shell) -> String {
        let mut out = String::new();
        for (k, v) in &self.vars {
            let line = match shell {
                Shell::Posix => format!("export {k}={}", sh_quote(v)),
                Shell::Fish => format!("set -gx {k} {}", sh_quote(v)),
                Shell::PowerShell => format!("$env:{k} = '{}'", v.replace('\'', "''")),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// Renders `vars` as commands that remove them in `shell`.
pub fn render_unset(vars: &[String], shell: Shell) -> String {
    let mut out = String::new();
    for k in vars {
        let line = match shell {
            Shell::Posix => format!("unset {k}"),
            Shell::Fish => format!("set -e {k}"),
            Shell::PowerShell => format!("Remove-Item Env:{k} -ErrorAction SilentlyContinue"),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The variables `weir env --unset` removes, given the current environment `get`: a proxy
/// variable when it names a loopback proxy (Weir, at any port it had; a company proxy
/// stays), `NO_PROXY` when it is Weir's, a CA variable when it names a file in Weir's CA
/// directory. Unset variables are left out.
pub fn unset_vars(install: &Install, get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let ca_dir = install.ca.cert_path().parent().map(|d| d.to_path_buf());
    let loopback_proxy = |v: &str| {
        let rest = v.trim().strip_prefix("http://").unwrap_or(v.trim());
        let host = rest.split('/').next().unwrap_or("");
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        matches!(host, "127.0.0.1" | "localhost" | "[::1]")
    };
    let mut out = Vec::new();
    for k in super::pointed::PROXY_VARS {
        if get(k).is_some_and(|v| loopback_proxy(&v)) {
            out.push(k.to_string());
        }
    }
    for k in ["NO_PROXY", "no_proxy"] {
        if get(k).is_some_and(|v| v == NO_PROXY) {
            out.push(k.to_string());
        }
    }
    for k in [
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ] {
        let in_ca_dir = |v: &str| {
            ca_dir
                .as_ref()
                .is_some_and(|d| std::path::Path::new(v).starts_with(d))
        };
        if get(k).is_some_and(|v| in_ca_dir(&v)) {
            out.push(k.to_string());
        }
    }
    out
}

/// Why a CA variable is missing (printed to stderr by `weir env`).
#[derive(Debug, thiserror::Error)]
pub enum EnvNote {
    #[error("TLS interception is off (intercept = false): no CA variables needed")]
    InterceptOff,
    #[error("no local CA, so no CA variables: {0} (fix: {fix})", fix = .0.fix())]
    NoCa(CaError),
    #[error("no local CA, so no CA variables: {0}{fix}", fix = .0.fix().map(|f| format!(" (fix: {f})")).unwrap_or_default())]
    NoStore(crate::secrets::ChooseError),
    #[error("cannot write the CA bundle {}: {source}", path.display())]
    Bundle {
        path: PathBuf,
        source: weir_tls::TlsError,
    },
}

/// The CA files the variables name, and why any is missing.
#[derive(Debug, Default)]
pub struct CaFiles {
    pub ca_file: Option<PathBuf>,
    pub bundle_file: Option<PathBuf>,
    pub notes: Vec<EnvNote>,
}

/// Makes sure the CA exists (creating it on a fresh install) and writes the bundle of system
/// roots plus Weir's CA. Blocks on the keychain when the CA has to be created.
pub fn prepare_ca_files(install: &Install) -> CaFiles {
    let mut out = CaFiles::default();
    if !install.settings.intercept {
        out.notes.push(EnvNote::InterceptOff);
        return out;
    }
    let store = &install.ca;
    let pem = match store.read_cert() {
        Ok(Some(pem)) => pem,
        // A fresh install: the CA is made here, its key where `weir serve` will look.
        _ => match install.settled_ca() {
            Err(e) => {
                out.notes.push(EnvNote::NoStore(e));
                return out;
            }
            Ok(ca) => match ca.load_or_create(&install.settings.intercept_hosts()) {
                Ok(loaded) => loaded.ca.cert_pem().to_string(),
                Err(e) => {
                    out.notes.push(EnvNote::NoCa(e));
                    return out;
                }
            },
        },
    };
    out.ca_file = Some(store.cert_path());
    // Tools that take one bundle replace the system roots with it, so it must hold both.
    let bundle = store.bundle_path();
    match weir_tls::write_bundle(&bundle, &pem) {
        Ok(_) => out.bundle_file = Some(bundle),
        Err(source) => out.notes.push(EnvNote::Bundle {
            path: bundle,
            source,
        }),
    }
    out
}

impl Install {
    /// [`prepare_ca_files`] then [`shell_env`]: what `weir env` prints, and its notes.
    pub fn shell_env(&self) -> (ShellEnv, Vec<EnvNote>) {
        let files = prepare_ca_files(self);
        let env = shell_env(&ShellEnvInput {
            proxy_addr: self.proxy_addr(),
            ca_file: files.ca_file,
            bundle_file: files.bundle_file,
        });
        (env, files.notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(ca: bool) -> ShellEnvInput {
        ShellEnvInput {
            proxy_addr: "127.0.0.1:9347".parse().unwrap(),
            ca_file: ca.then(|| PathBuf::from("/d/ca/weir-ca.pem")),
            bundle_file: ca.then(|| PathBuf::from("/a b/it's.pem")),
        }
    }

    #[test]
    fn variables_in_order() {
        let names: Vec<String> = shell_env(&input(true))
            .vars
            .into_iter()
            .map(|v| v.0)
            .collect();
        assert_eq!(
            names,
            [
                "HTTPS_PROXY",
                "HTTP_PROXY",
                "NO_PROXY",
                "https_proxy",
                "http_proxy",
                "no_proxy",
                "NODE_EXTRA_CA_CERTS",
                "SSL_CERT_FILE",
                "REQUESTS_CA_BUNDLE",
                "CURL_CA_BUNDLE"
            ]
        );
        assert_eq!(shell_env(&input(false)).vars.len(), 6);
    }

    #[test]
    fn unset_takes_out_weirs_variables_only() {
        let dir = tempfile::tempdir().unwrap();
        let install = Install::new(crate::config::Settings::default(), dir.path().to_path_buf());
        let ca = install.ca.cert_path().display().to_string();
        let env = [
            ("HTTPS_PROXY", "http://127.0.0.1:9347"),
            ("http_proxy", "http://127.0.0.1:1234/"),
            ("HTTP_PROXY", "http://proxy.corp:3128"),
            ("NO_PROXY", NO_PROXY),
            ("no_proxy", "corp.example"),
            ("NODE_EXTRA_CA_CERTS", ca.as_str()),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
        ];
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let vars = unset_vars(&install, get);
        assert_eq!(
            vars,
            [
                "HTTPS_PROXY",
                "http_proxy",
                "NO_PROXY",
                "NODE_EXTRA_CA_CERTS"
            ]
        );
        assert_eq!(
            render_unset(&vars[..2], Shell::Posix),
            "unset HTTPS_PROXY\nunset http_proxy\n"
        );
        assert_eq!(
            render_unset(&vars[..1], Shell::Fish),
            "set -e HTTPS_PROXY\n"
        );
        assert!(
            render_unset(&vars[..1], Shell::PowerShell).starts_with("Remove-Item Env:HTTPS_PROXY")
        );
    }

    #[test]
    fn renders_each_shell() {
        let env = shell_env(&input(true));
        let posix = env.render(Shell::Posix);
        assert!(posix.starts_with(
            "export HTTPS_PROXY=http://127.0.0.1:9347\nexport HTTP_PROXY=http://127.0.0.1:9347\nexport NO_PROXY=localhost,127.0.0.1,::1\n"
        ));
        assert!(posix.contains("export SSL_CERT_FILE='/a b/it'\\''s.pem'\n"));
        assert_eq!(
            env.render(Shell::Fish).lines().next(),
            Some("set -gx HTTPS_PROXY http://127.0.0.1:9347")
        );
        assert!(env
            .render(Shell::PowerShell)
            .contains("$env:SSL_CERT_FILE = '/a b/it''s.pem'\n"));
    }
}
