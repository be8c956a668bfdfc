//! `[team]`: team outage signals over NATS (see `crate::team` and docs/team.md). The file's
//! keys, their validation (file:line errors) and the typed [`TeamSettings`].

use super::error::{ConfigError, Ctx};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTeam {
    /// `nats://host:port` or `tls://host:port`.
    pub nats_url: Option<Spanned<String>>,
    /// K: distinct teammates reporting an upstream failing before this Weir acts.
    pub peers_needed: Option<Spanned<i64>>,
    /// T: how recent a teammate's report must be to count.
    pub window: Option<Spanned<String>>,
    /// `"cautious"` (default) or `"open"`.
    pub action: Option<Spanned<String>>,
    /// PEM file of extra root certificates for a `tls://` server (a private CA).
    pub ca_file: Option<Spanned<String>>,
    /// `nats://` to a server that is not on this machine sends the team's login and facts in
    /// clear: refused unless this is `true`.
    pub allow_plaintext: Option<Spanned<bool>>,
}

/// What K failing teammates make this Weir do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TeamAction {
    /// The breaker opens on this Weir's first failing call instead of waiting for a full
    /// window of them.
    Cautious,
    /// The breaker opens at once (then probes as usual after its wait).
    Open,
}

/// Validated `[team]` settings; present only when `nats_url` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSettings {
    pub nats_url: String,
    /// The URL asks for TLS (`tls://`).
    pub tls: bool,
    pub peers_needed: usize,
    pub window: Duration,
    pub action: TeamAction,
    pub ca_file: Option<PathBuf>,
    /// The certificates in `ca_file`, read and checked at load (trusted besides the OS roots).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl TeamSettings {
    pub const DEFAULT_PEERS_NEEDED: usize = 2;
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

    /// Settings for `nats_url` with every default (tests, the lab).
    pub fn new(nats_url: &str) -> TeamSettings {
        TeamSettings {
            nats_url: nats_url.to_string(),
            tls: nats_url.starts_with("tls://"),
            peers_needed: Self::DEFAULT_PEERS_NEEDED,
            window: Self::DEFAULT_WINDOW,
            action: TeamAction::Cautious,
            ca_file: None,
            extra_roots: Vec::new(),
        }
    }
}

/// `None` when there is no `[team]` table; an error naming the key when one is unusable.
pub(super) fn validate(
    cx: &Ctx<'_>,
    raw: Option<&Spanned<FileTeam>>,
    file: &str,
) -> Result<Option<TeamSettings>, ConfigError> {
    let Some(table) = raw else {
        return Ok(None);
    };
    let t = table.get_ref();
    let Some(url) = &t.nats_url else {
        return cx.err(
            "team.nats_url",
            table.span(),
            "[team] needs nats_url = \"nats://host:4222\" (or \"tls://host:4222\")".into(),
        );
    };
    let u = url.get_ref().trim();
    let rest = u
        .strip_prefix("nats://")
        .or_else(|| u.strip_prefix("tls://"));
    let Some(rest) = rest.filter(|r| !r.is_empty() && !r.contains(['/', '@', ' '])) else {
        return cx.err(
            "team.nats_url",
            url.span(),
            format!(
                "`{u}` is not a URL like \"nats://host:4222\" or \"tls://host:4222\" (no path; credentials go in the keychain: `weir team set-credentials`)"
            ),
        );
    };
    let plain_ok = t.allow_plaintext.as_ref().is_some_and(|a| *a.get_ref());
    if u.starts_with("nats://") && !is_loopback_host(rest) && !plain_ok {
        return cx.err(
            "team.nats_url",
            url.span(),
            format!(
                "`{u}` is plain text to a server off this machine: the team's login (`weir team set-credentials`) and its facts would cross the network in clear. Use \"tls://{rest}\", or set allow_plaintext = true in [team] if the network is private"
            ),
        );
    }
    let peers_needed = cx
        .positive("team.peers_needed", &t.peers_needed, 1)?
        .unwrap_or(TeamSettings::DEFAULT_PEERS_NEEDED);
    let window = cx
        .duration("team.window", &t.window)?
        .unwrap_or(TeamSettings::DEFAULT_WINDOW);
    if window < Duration::from_secs(1) {
        if let Some(w) = &t.window {
            return cx.err(
                "team.window",
                w.span(),
                "must be at least 1s (teammates' reports travel over the network)".into(),
            );
        }
    }
    let action = match &t.action {
        None => TeamAction::Cautious,
        Some(a) if a.get_ref() == "cautious" => TeamAction::Cautious,
        Some(a) if a.get_ref() == "open" => TeamAction::Open,
        Some(a) => {
            return cx.err(
                "team.action",
                a.span(),
                format!("`{}` is not \"cautious\" or \"open\"", a.get_ref()),
            )
        }
    };
    let ca_file = t.ca_file.as_ref().map(|c| {
        let p = PathBuf::from(c.get_ref());
        // Relative to the config file, like `upstream.ca_file`.
        let p = match std::path::Path::new(file).parent() {
            Some(dir) if p.is_relative() && !dir.as_os_str().is_empty() => dir.join(p),
            _ => p,
        };
        (p, c.span())
    });
    // Read now: a CA file that is missing or holds no certificate is a config error (with its
    // line), not a handshake that fails later for reasons nobody can see.
    let extra_roots = match &ca_file {
        None => Vec::new(),
        Some((p, span)) => {
            super::net::read_roots(p).or_else(|m| cx.err("team.ca_file", span.clone(), m))?
        }
    };
    let ca_file = ca_file.map(|(p, _)| p);
    Ok(Some(TeamSettings {
        nats_url: u.to_string(),
        tls: u.starts_with("tls://"),
        peers_needed,
        window,
        action,
        ca_file,
        extra_roots,
    }))
}

/// Whether `host:port` names this machine (`localhost`, 127.0.0.0/8, `[::1]`).
fn is_loopback_host(host_port: &str) -> bool {
    let host = match host_port.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host_port,
    };
    let host = host.trim_matches(['[', ']']);
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(all(test, feature = "team"))]
mod tests {
    use crate::config::{parse_str, TeamAction};
    use std::time::Duration;

    #[test]
    fn defaults_and_errors_name_the_key_and_line() {
        let s = parse_str("[team]\nnats_url = \"tls://nats.example:4222\"\n", "w.toml").unwrap();
        let t = s.team.unwrap();
        assert!(t.tls);
        assert_eq!(t.peers_needed, 2);
        assert_eq!(t.window, Duration::from_secs(60));
        assert_eq!(t.action, TeamAction::Cautious);
        assert!(parse_str("", "w.toml").unwrap().team.is_none());

        let e = parse_str("[team]\npeers_needed = 3\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("team.nats_url"), "{e}");
        let e = parse_str("[team]\nnats_url = \"http://x:1\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:2: key `team.nats_url`"),
            "{e}"
        );
        let e = parse_str(
            "[team]\nnats_url = \"nats://127.0.0.1:1\"\naction = \"panic\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:3: key `team.action`"),
            "{e}"
        );
        let e = parse_str(
            "[team]\nnats_url = \"nats://127.0.0.1:1\"\npeers_needed = 0\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("team.peers_needed"), "{e}");
        let e = parse_str("[team]\nnats_url = \"nats://u:p@x:1\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("keychain"), "{e}");
    }

    #[test]
    fn a_ca_file_that_is_missing_or_not_pem_names_the_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("w.toml");
        let cfg = cfg.to_str().unwrap();
        let e = parse_str(
            "[team]\nnats_url = \"tls://x:1\"\nca_file = \"nope.pem\"\n",
            cfg,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":3: key `team.ca_file`: cannot read"), "{e}");
        std::fs::write(dir.path().join("bad.pem"), "not a certificate\n").unwrap();
        let e = parse_str(
            "[team]\nnats_url = \"tls://x:1\"\nca_file = \"bad.pem\"\n",
            cfg,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(":3: key `team.ca_file`:") && e.contains("no PEM certificate"),
            "{e}"
        );
        let ck = rcgen::generate_simple_self_signed(vec!["nats.example".into()]).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ck.cert.pem()).unwrap();
        let t = parse_str(
            "[team]\nnats_url = \"tls://x:1\"\nca_file = \"ca.pem\"\n",
            cfg,
        )
        .unwrap()
        .team
        .unwrap();
        assert_eq!(t.extra_roots.len(), 1);
        assert_eq!(t.ca_file.unwrap(), dir.path().join("ca.pem"));
    }
}
