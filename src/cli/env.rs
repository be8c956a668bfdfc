//! `weir env`: the environment that points command-line tools at Weir and makes them trust its
//! CA, for `eval "$(weir env)"` (bash/zsh), `weir env --shell fish | source`, or PowerShell's
//! `weir env --shell powershell | Invoke-Expression`.

use super::context::{sh_quote, CommonArgs, Context};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Syntax of the output.
    #[arg(long, value_enum, default_value_t = Shell::Bash)]
    shell: Shell,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

/// Hosts that must never go through the proxy (Weir itself).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The variables, in order. Both spellings of the proxy variables: curl only reads the
/// lower-case `http_proxy`, Go and Python read either.
pub fn variables(cx: &Context) -> (Vec<(&'static str, String)>, Vec<String>) {
    let proxy = cx.proxy_url();
    let mut vars = vec![
        ("HTTPS_PROXY", proxy.clone()),
        ("HTTP_PROXY", proxy.clone()),
        ("NO_PROXY", NO_PROXY.to_string()),
        ("https_proxy", proxy.clone()),
        ("http_proxy", proxy),
        ("no_proxy", NO_PROXY.to_string()),
    ];
    let mut notes = Vec::new();
    if !cx.settings.intercept {
        notes.push(
            "TLS interception is off (intercept = false): no CA variables needed".to_string(),
        );
        return (vars, notes);
    }
    let ca_pem = match cx.store.read_cert() {
        Ok(Some(pem)) => Some(pem),
        _ => match cx.store.load_or_create(&cx.settings.intercept_hosts()) {
            Ok(out) => Some(out.ca.cert_pem().to_string()),
            Err(e) => {
                notes.push(format!(
                    "no local CA, so no CA variables: {e} (fix: {})",
                    e.fix()
                ));
                None
            }
        },
    };
    if let Some(pem) = ca_pem {
        let ca_path = cx.store.cert_path().display().to_string();
        vars.push(("NODE_EXTRA_CA_CERTS", ca_path));
        // Tools that take one bundle replace the system roots with it, so it must hold both.
        let bundle = cx.store.bundle_path();
        match weir_tls::write_bundle(&bundle, &pem) {
            Ok(_) => {
                let b = bundle.display().to_string();
                vars.push(("SSL_CERT_FILE", b.clone()));
                vars.push(("REQUESTS_CA_BUNDLE", b.clone()));
                vars.push(("CURL_CA_BUNDLE", b));
            }
            Err(e) => notes.push(format!(
                "cannot write the CA bundle {}: {e}",
                bundle.display()
            )),
        }
    }
    (vars, notes)
}

pub fn render(shell: Shell, vars: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (k, v) in vars {
        let line = match shell {
            Shell::Bash | Shell::Zsh => format!("export {k}={}", sh_quote(v)),
            Shell::Fish => format!("set -gx {k} {}", sh_quote(v)),
            Shell::Powershell => format!("$env:{k} = '{}'", v.replace('\'', "''")),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

pub fn run(args: EnvArgs) -> ExitCode {
    let cx = match Context::load(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (vars, notes) = variables(&cx);
    for n in notes {
        eprintln!("weir: {n}");
    }
    print!("{}", render(args.shell, &vars));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_shell() {
        let vars = vec![
            ("HTTPS_PROXY", "http://127.0.0.1:9347".to_string()),
            ("SSL_CERT_FILE", "/a b/it's.pem".to_string()),
        ];
        assert_eq!(
            render(Shell::Bash, &vars),
            "export HTTPS_PROXY=http://127.0.0.1:9347\nexport SSL_CERT_FILE='/a b/it'\\''s.pem'\n"
        );
        assert_eq!(
            render(Shell::Fish, &vars).lines().next(),
            Some("set -gx HTTPS_PROXY http://127.0.0.1:9347")
        );
        assert_eq!(
            render(Shell::Powershell, &vars).lines().nth(1),
            Some("$env:SSL_CERT_FILE = '/a b/it''s.pem'")
        );
    }
}
