//! `[gateway]`: Weir as a team's egress (`weir serve --gateway`): a TLS listener on any
//! address for allow-listed networks, the control API on its own admin listener with its own
//! token, and optionally the create queue shared in PostgreSQL by several replicas.
//!
//! Secrets are never in the config file: the TLS key, the admin token, the PostgreSQL password
//! and the replicas' shared key are named by file path (the admin token may also come from
//! the keychain).

use super::error::{ConfigError, Ctx};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// `[gateway]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGateway {
    pub listen: Option<Spanned<String>>,
    pub tls_cert_file: Option<Spanned<String>>,
    pub tls_key_file: Option<Spanned<String>>,
    pub allow: Option<Spanned<Vec<String>>>,
    pub admin_listen: Option<Spanned<String>>,
    pub admin_token_file: Option<Spanned<String>>,
    pub postgres_url: Option<Spanned<String>>,
    pub postgres_password_file: Option<Spanned<String>>,
    pub postgres_sslmode: Option<Spanned<String>>,
    pub postgres_ca_file: Option<Spanned<String>>,
    pub secret_key_file: Option<Spanned<String>>,
    pub lease: Option<Spanned<String>>,
    pub intercept_ca_cert_file: Option<Spanned<String>>,
    pub intercept_ca_key_file: Option<Spanned<String>>,
    pub proxy_protocol: Option<Spanned<bool>>,
    pub trusted_proxies: Option<Spanned<Vec<String>>>,
    pub public_url: Option<Spanned<String>>,
}

/// The validated `[gateway]` table.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// The clients' door: TLS only, any address.
    pub listen: SocketAddr,
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
    /// Networks whose clients may use the gateway; everyone else gets a 403 problem.
    pub allow: Vec<Cidr>,
    /// `Some`: `gateway.proxy_protocol` is on, and these are the load balancers whose PROXY
    /// headers are read (the allow-list then applies to the address in the header).
    pub trusted_proxies: Option<Vec<Cidr>>,
    /// `https://host[:port]` as clients reach the gateway (through the load balancer): the base
    /// of problem `type` URLs. `None`: the clients' listener's own address.
    pub public_url: Option<String>,
    /// The control API (TLS, with the admin token).
    pub admin_listen: SocketAddr,
    /// `None`: the admin token is kept in the keychain.
    pub admin_token_file: Option<PathBuf>,
    /// `None`: the queue stays in this replica's SQLite file (one replica only).
    pub postgres: Option<PostgresSettings>,
    /// The CA (certificate, key) every replica terminates CONNECTs to managed https hosts with;
    /// `None`: this replica's own local CA from the keychain, if any.
    pub intercept_ca: Option<(PathBuf, PathBuf)>,
}

/// The shared queue's database.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// Parsed `postgres_url` (never with a password).
    pub config: tokio_postgres::Config,
    pub password_file: Option<PathBuf>,
    /// 32 random bytes (hex) every replica shares: seals replay credentials and keys
    /// identities the same way on every replica.
    pub secret_key_file: PathBuf,
    /// How long a replica's claim on an item lasts without renewal (a replica renews its
    /// claims every `lease / 3` while it works on them).
    pub lease: Duration,
    /// TLS to the database (`postgres_sslmode`).
    pub sslmode: PgSslMode,
    /// `postgres_ca_file`'s certificates, trusted besides the OS roots (`verify-full`).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// `gateway.postgres_sslmode`: libpq's names, the three that make sense for a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    /// Plain TCP (a private network or a Unix socket); the default.
    Disable,
    /// TLS, without checking the server's certificate (protects against listeners on the
    /// wire, not against an active attacker).
    Require,
    /// TLS, the certificate checked against the OS roots plus `postgres_ca_file`, and the
    /// host name against it.
    VerifyFull,
}

/// An IP network (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a network like \"10.0.0.0/8\" or an address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("`{s}`: the prefix length must be 0..={max}")),
            },
        };
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 peer counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// The default admin listener: loopback, next to Weir's default port.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9348";
/// A claim lasts this long unless renewed. Renewed every third of it while the replica works
/// on the item, so it bounds how long a dead replica's item waits, not how long a replay may
/// take.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const MIN_LEASE: Duration = Duration::from_secs(1);

/// Validates `[gateway]`.
pub(super) fn validate(
    cx: &Ctx,
    g: &Spanned<FileGateway>,
    config_file: &str,
) -> Result<GatewaySettings, ConfigError> {
    // Missing keys are reported at the `[gateway]` table.
    let table = g.span();
    let g = g.get_ref();
    let required = |key: &str,
                    v: &Option<Spanned<String>>|
     -> Result<(String, std::ops::Range<usize>), ConfigError> {
        match v {
            Some(s) if !s.get_ref().trim().is_empty() => {
                Ok((s.get_ref().trim().to_string(), s.span()))
            }
            _ => cx.err(
                &format!("gateway.{key}"),
                table.clone(),
                format!("`gateway.{key}` is required in gateway mode"),
            ),
        }
    };
    let path = |p: &str| {
        let p = PathBuf::from(p);
        match Path::new(config_file).parent() {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        }
    };
    let addr = |key: &str, v: &str, span| -> Result<SocketAddr, ConfigError> {
        v.parse().or_else(|_| {
            cx.err(
                key,
                span,
                format!("`{v}` is not an address like \"0.0.0.0:8443\""),
            )
        })
    };
    let (listen, span) = required("listen", &g.listen)?;
    let listen = addr("gateway.listen", &listen, span)?;
    let tls_cert_file = path(&required("tls_cert_file", &g.tls_cert_file)?.0);
    let tls_key_file = path(&required("tls_key_file", &g.tls_key_file)?.0);
    let allow = match &g.allow {
        None => return cx.err("gateway.allow", table.clone(), "`gateway.allow` is required: the networks whose clients may use the gateway, e.g. [\"10.0.0.0/8\"]".into()),
        Some(list) => {
            let mut out = Vec::new();
            for s in list.get_ref() {
                out.push(Cidr::parse(s).or_else(|m| cx.err("gateway.allow", list.span(), m))?);
            }
            if out.is_empty() {
                return cx.err("gateway.allow", list.span(), "the allow-list is empty: no client could use the gateway".into());
            }
            out
        }
    };
    let networks = |key: &str, list: &Spanned<Vec<String>>| -> Result<Vec<Cidr>, ConfigError> {
        let mut out = Vec::new();
        for s in list.get_ref() {
            out.push(Cidr::parse(s).or_else(|m| cx.err(key, list.span(), m))?);
        }
        Ok(out)
    };
    let trusted_proxies = match (&g.proxy_protocol, &g.trusted_proxies) {
        (Some(on), Some(list)) if *on.get_ref() => {
            let list = networks("gateway.trusted_proxies", list)?;
            if list.is_empty() {
                return cx.err("gateway.trusted_proxies", g.trusted_proxies.as_ref().map_or(table.clone(), |s| s.span()), "is empty: list the load balancers' addresses (a PROXY header is believed from them only)".into());
            }
            Some(list)
        }
        (Some(on), None) if *on.get_ref() => {
            return cx.err("gateway.trusted_proxies", on.span(), "gateway.proxy_protocol = true needs gateway.trusted_proxies: the load balancers' addresses (a PROXY header from anyone else would let a client claim any address)".into());
        }
        (_, Some(list)) => {
            return cx.err(
                "gateway.trusted_proxies",
                list.span(),
                "only used with gateway.proxy_protocol = true".into(),
            );
        }
        _ => None,
    };
    let public_url = match &g.public_url {
        None => None,
        Some(u) => {
            let text = u.get_ref().trim().trim_end_matches('/');
            let ok = text
                .strip_prefix("https://")
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(['/', '?', '#', '@', ' ']));
            if !ok {
                return cx.err("gateway.public_url", u.span(), format!("`{text}` is not a URL like \"https://weir.corp.example:8443\" (https, no path)"));
            }
            Some(text.to_string())
        }
    };
    let admin_listen = match &g.admin_listen {
        None => addr("gateway.admin_listen", DEFAULT_ADMIN_LISTEN, table.clone())?,
        Some(s) => addr("gateway.admin_listen", s.get_ref(), s.span())?,
    };
    if admin_listen == listen && listen.port() != 0 {
        return cx.err(
            "gateway.admin_listen",
            g.admin_listen.as_ref().map_or(table.clone(), |s| s.span()),
            "the admin listener must be another address than gateway.listen".into(),
        );
    }
    let admin_token_file = g.admin_token_file.as_ref().map(|f| path(f.get_ref()));
    let postgres = match &g.postgres_url {
        None => None,
        Some(url) => {
            let config: tokio_postgres::Config = url.get_ref().parse().or_else(|e| {
                cx.err(
                    "gateway.postgres_url",
                    url.span(),
                    format!("not a PostgreSQL URL or key=value string: {e}"),
                )
            })?;
            if config.get_password().is_some() {
                return cx.err("gateway.postgres_url", url.span(), "holds a password; secrets never go in the config file: put it in a file named by gateway.postgres_password_file".into());
            }
            let secret_key_file = path(&required("secret_key_file", &g.secret_key_file)?.0);
            let lease = cx
                .duration("gateway.lease", &g.lease)?
                .unwrap_or(DEFAULT_LEASE);
            if lease < MIN_LEASE {
                return cx.err("gateway.lease", g.lease.as_ref().map_or(table.clone(), |s| s.span()), format!(
                    "{} is too short: at least {} (a replica renews its claims every lease/3; each renewal is a round trip to the database)",
                    humantime::format_duration(lease), humantime::format_duration(MIN_LEASE)
                ));
            }
            let sslmode = match &g.postgres_sslmode {
                // The URL's own `sslmode=require` or `=disable` counts (tokio-postgres parses
                // only disable/prefer/require there). Unsaid (prefer): encrypted unless every
                // host is this machine (loopback or a Unix socket).
                None => match config.get_ssl_mode() {
                    tokio_postgres::config::SslMode::Require => PgSslMode::Require,
                    tokio_postgres::config::SslMode::Disable => PgSslMode::Disable,
                    _ if all_local(&config) => PgSslMode::Disable,
                    _ => PgSslMode::Require,
                },
                Some(m) => match m.get_ref().as_str() {
                    "disable" => PgSslMode::Disable,
                    "require" => PgSslMode::Require,
                    "verify-full" => PgSslMode::VerifyFull,
                    other => {
                        return cx.err(
                            "gateway.postgres_sslmode",
                            m.span(),
                            format!("`{other}` is not \"disable\", \"require\" or \"verify-full\""),
                        )
                    }
                },
            };
            #[cfg(unix)]
            let unix_socket = config
                .get_hosts()
                .iter()
                .any(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
            #[cfg(not(unix))]
            let unix_socket = false;
            if unix_socket && sslmode != PgSslMode::Disable {
                return cx.err(
                    "gateway.postgres_sslmode",
                    g.postgres_sslmode.as_ref().map_or(url.span(), |s| s.span()),
                    "PostgreSQL does not speak TLS on a Unix socket: use \"disable\" there (the socket never leaves the machine), or a TCP host".into(),
                );
            }
            let extra_roots = match &g.postgres_ca_file {
                None => Vec::new(),
                Some(_) if sslmode != PgSslMode::VerifyFull => {
                    return cx.err(
                        "gateway.postgres_ca_file",
                        g.postgres_ca_file.as_ref().map_or(table.clone(), |s| s.span()),
                        "only used with postgres_sslmode = \"verify-full\" (the CA that signed the database's certificate)".into(),
                    )
                }
                Some(f) => super::net::read_roots(&path(f.get_ref()))
                    .or_else(|m| cx.err("gateway.postgres_ca_file", f.span(), m))?,
            };
            Some(PostgresSettings {
                config,
                password_file: g.postgres_password_file.as_ref().map(|f| path(f.get_ref())),
                secret_key_file,
                lease,
                sslmode,
                extra_roots,
            })
        }
    };
    for (key, v) in [
        ("secret_key_file", &g.secret_key_file),
        ("postgres_sslmode", &g.postgres_sslmode),
        ("postgres_ca_file", &g.postgres_ca_file),
    ] {
        if postgres.is_none() && v.is_some() {
            return cx.err(
                &format!("gateway.{key}"),
                v.as_ref().map_or(table.clone(), |s| s.span()),
                "only used with gateway.postgres_url".into(),
            );
        }
    }
    let intercept_ca = match (&g.intercept_ca_cert_file, &g.intercept_ca_key_file) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((path(c.get_ref()), path(k.get_ref()))),
        (Some(c), None) | (None, Some(c)) => {
            return cx.err(
                "gateway.intercept_ca_cert_file",
                c.span(),
                "intercept_ca_cert_file and intercept_ca_key_file go together".into(),
            )
        }
    };
    Ok(GatewaySettings {
        intercept_ca,
        listen,
        tls_cert_file,
        tls_key_file,
        allow,
        trusted_proxies,
        public_url,
        admin_listen,
        admin_token_file,
        postgres,
    })
}

/// Whether every host of a PostgreSQL config is this machine: a Unix socket, `localhost` or a
/// loopback address (then plain text never leaves it).
fn all_local(config: &tokio_postgres::Config) -> bool {
    config.get_hosts().iter().all(|h| match h {
        tokio_postgres::config::Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(_) => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[gateway]\nlisten = \"0.0.0.0:8443\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"k.pem\"\nallow = [\"10.0.0.0/8\"]\n";

    fn error(text: &str) -> String {
        crate::config::parse_str(text, "w.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_complete_table_validates_with_relative_paths_next_to_the_file() {
        let s = crate::config::parse_str(BASE, "/etc/weir/w.toml").unwrap();
        let g = s.gateway.unwrap();
        assert_eq!(g.listen, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(g.tls_key_file, PathBuf::from("/etc/weir/k.pem"));
        assert_eq!(g.tls_cert_file, PathBuf::from("/c.pem"));
        assert_eq!(g.admin_listen, DEFAULT_ADMIN_LISTEN.parse().unwrap());
        assert!(g.postgres.is_none());
        // The laptop listener stays loopback-only.
        assert!(s.listen.ip().is_loopback());
    }

    #[test]
    fn bad_tables_name_the_key_and_the_line() {
        let e = error("[gateway]\nlisten = \"0.0.0.0:8443\"\n");
        assert!(
            e.starts_with("w.toml:1: key `gateway.tls_cert_file`"),
            "{e}"
        );
        let e = error(&BASE.replace("10.0.0.0/8", "10.0.0.0/40"));
        assert!(e.starts_with("w.toml:5: key `gateway.allow`"), "{e}");
        let e = error(&format!(
            "{BASE}postgres_url = \"postgresql://weir:hunter2@db/weir\"\nsecret_key_file = \"k\"\n"
        ));
        assert!(
            e.starts_with("w.toml:6: key `gateway.postgres_url`") && e.contains("password"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = error(&format!(
            "{BASE}postgres_url = \"postgresql://weir@db/weir\"\n"
        ));
        assert!(e.contains("gateway.secret_key_file"), "{e}");
        let e = error(&format!("{BASE}postgres_url = \"postgresql://weir@db/weir\"\nsecret_key_file = \"k\"\nlease = \"500ms\"\n"));
        assert!(
            e.starts_with("w.toml:8: key `gateway.lease`") && e.contains("renews"),
            "{e}"
        );
        let pg = format!(
            "{BASE}postgres_url = \"postgresql://weir@db/weir\"\nsecret_key_file = \"k\"\n"
        );
        let e = error(&format!("{pg}postgres_sslmode = \"verify-ca\"\n"));
        assert!(
            e.starts_with("w.toml:8: key `gateway.postgres_sslmode`"),
            "{e}"
        );
        let e = error(&format!("{pg}postgres_ca_file = \"/ca.pem\"\n"));
        assert!(
            e.starts_with("w.toml:8: key `gateway.postgres_ca_file`") && e.contains("verify-full"),
            "{e}"
        );
        let e = error(&format!(
            "{pg}postgres_sslmode = \"verify-full\"\npostgres_ca_file = \"/nonexistent/ca.pem\"\n"
        ));
        assert!(
            e.starts_with(
                "w.toml:9: key `gateway.postgres_ca_file`: cannot read /nonexistent/ca.pem"
            ),
            "{e}"
        );
        let e = error(&format!("{BASE}postgres_url = \"host=/run/postgresql user=weir\"\nsecret_key_file = \"k\"\npostgres_sslmode = \"verify-full\"\n"));
        assert!(
            e.starts_with("w.toml:8: key `gateway.postgres_sslmode`") && e.contains("Unix socket"),
            "{e}"
        );
        let e = error(&format!("{BASE}postgres_sslmode = \"require\"\n"));
        assert!(
            e.starts_with("w.toml:6: key `gateway.postgres_sslmode`") && e.contains("postgres_url"),
            "{e}"
        );
        let e = error(&format!("{BASE}proxy_protocol = true\n"));
        assert!(
            e.starts_with("w.toml:6: key `gateway.trusted_proxies`"),
            "{e}"
        );
        let e = error(&format!("{BASE}trusted_proxies = [\"10.0.0.1\"]\n"));
        assert!(
            e.starts_with("w.toml:6: key `gateway.trusted_proxies`")
                && e.contains("proxy_protocol"),
            "{e}"
        );
        let e = error(&format!(
            "{BASE}proxy_protocol = true\ntrusted_proxies = [\"10.0.0.1/99\"]\n"
        ));
        assert!(
            e.starts_with("w.toml:7: key `gateway.trusted_proxies`"),
            "{e}"
        );
        let ok = crate::config::parse_str(
            &format!("{BASE}proxy_protocol = true\ntrusted_proxies = [\"10.0.0.1\"]\n"),
            "w.toml",
        )
        .unwrap();
        assert_eq!(
            ok.gateway.unwrap().trusted_proxies.unwrap(),
            vec![Cidr::parse("10.0.0.1").unwrap()]
        );
        let e = error(&format!("{BASE}public_url = \"http://weir.example\"\n"));
        assert!(e.starts_with("w.toml:6: key `gateway.public_url`"), "{e}");
        let ok = crate::config::parse_str(
            &format!("{BASE}public_url = \"https://weir.example:8443/\"\n"),
            "w.toml",
        )
        .unwrap();
        assert_eq!(
            ok.gateway.unwrap().public_url.as_deref(),
            Some("https://weir.example:8443")
        );
        let e = error(&format!("{BASE}tls_key = \"x\"\n"));
        assert!(e.contains("tls_key"), "{e}");
    }

    #[test]
    fn networks_contain_their_addresses_only() {
        let n = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.1".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("127.0.0.1")
            .unwrap()
            .contains("127.0.0.1".parse().unwrap()));
        assert!(!Cidr::parse("127.0.0.1")
            .unwrap()
            .contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("fd00::/8")
            .unwrap()
            .contains("fd12::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("ten").is_err());
    }
}
