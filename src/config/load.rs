//! Reading and validating a config file. Every error names the file, the line, the key and what
//! is wrong, so a person can fix it without reading Weir's source.

use super::classes::{default_routes, ClassSettings, ClassTable, RouteClass, RouteRule};
use super::error::{key_on_line, line_of, ConfigError, Ctx};
use super::file::{FileClass, FileConfig};
use super::{Limits, Origin, Settings, UpstreamSettings, DEFAULT_PORT};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Reads and validates `path`.
pub fn load_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&text, &path.display().to_string())
}

/// Parses and validates config text; `file` is only used in error messages.
pub fn parse_str(text: &str, file: &str) -> Result<Settings, ConfigError> {
    if let Some(at) = super::nesting::too_deep(text) {
        return Err(ConfigError::Invalid {
            file: file.to_string(),
            line: line_of(text, at),
            key: key_on_line(text, at),
            message: format!(
                "arrays and inline tables nest deeper than {} levels",
                super::nesting::MAX_DEPTH
            ),
        });
    }
    let raw: FileConfig = toml::from_str(text).map_err(|e| {
        let (line, key) = match e.span() {
            Some(span) => (line_of(text, span.start), key_on_line(text, span.start)),
            None => (1, String::from("?")),
        };
        ConfigError::Invalid {
            file: file.to_string(),
            line,
            key,
            message: e.message().to_string(),
        }
    })?;
    Settings::from_file(raw, file, text)
}

/// A table (or key) whose part this build left out: the error names the cargo feature to build
/// it with, rather than calling a documented table unknown.
#[cfg(not(all(feature = "gateway", feature = "team", feature = "metered")))]
fn not_built<T>(
    cx: &Ctx<'_>,
    key: &str,
    span: std::ops::Range<usize>,
    feature: &str,
) -> Result<T, ConfigError> {
    cx.err(
        key,
        span,
        format!("this Weir was built without the `{feature}` feature, which this needs; build it with `cargo build --release -p weir --features {feature}` (or leave the key out)"),
    )
}

impl Settings {
    /// Validates a parsed file into runtime settings.
    pub fn from_file(raw: FileConfig, file: &str, text: &str) -> Result<Settings, ConfigError> {
        let cx = Ctx::new(file, text);
        let listen = match &raw.listen {
            None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT),
            Some(s) => match s.get_ref().parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => a,
                Ok(a) => {
                    return cx.err(
                        "listen",
                        s.span(),
                        format!("{a} is not a loopback address; Weir only listens on 127.0.0.1 or [::1] so other machines cannot use it"),
                    )
                }
                Err(_) => {
                    return cx.err(
                        "listen",
                        s.span(),
                        format!("`{}` is not an address like \"127.0.0.1:{DEFAULT_PORT}\"", s.get_ref()),
                    )
                }
            },
        };

        let upstreams = upstreams(&cx, &raw, file)?;

        let mut routes = Vec::new();
        for r in &raw.route {
            let Some(class) = RouteClass::parse(r.class.get_ref()) else {
                return cx.err(
                    "route.class",
                    r.class.span(),
                    format!(
                        "`{}` is not one of list, view, stream, create, token, model, other",
                        r.class.get_ref()
                    ),
                );
            };
            match RouteRule::new(r.method.get_ref(), r.path.get_ref(), class) {
                Ok(rule) => routes.push(rule),
                Err(m) => return cx.err("route.path", r.path.span(), m),
            }
        }
        // Rules from the file come first so they can override the defaults.
        routes.extend(default_routes());

        let mut classes = ClassTable::default();
        for (class, fc) in [
            (RouteClass::List, &raw.classes.list),
            (RouteClass::View, &raw.classes.view),
            (RouteClass::Token, &raw.classes.token),
            (RouteClass::Stream, &raw.classes.stream),
            (RouteClass::Create, &raw.classes.create),
            (RouteClass::Other, &raw.classes.other),
            (RouteClass::Model, &raw.classes.model),
        ] {
            if let Some(fc) = fc {
                apply_class(&cx, class, fc, classes.get_mut(class))?;
            }
        }

        let l = &raw.limits;
        let defaults = Limits::default();
        let limits = Limits {
            max_header_bytes: cx
                .positive("limits.max_header_bytes", &l.max_header_bytes, 1024)?
                .unwrap_or(defaults.max_header_bytes),
            max_body_bytes: cx
                .positive("limits.max_body_bytes", &l.max_body_bytes, 1)?
                .unwrap_or(defaults.max_body_bytes),
            header_read_timeout: cx
                .duration("limits.header_read_timeout", &l.header_read_timeout)?
                .unwrap_or(defaults.header_read_timeout),
            max_connections: cx
                .positive("limits.max_connections", &l.max_connections, 1)?
                .unwrap_or(defaults.max_connections),
            drain_timeout: cx
                .duration("limits.drain_timeout", &l.drain_timeout)?
                .unwrap_or(defaults.drain_timeout),
            tunnel_idle_timeout: match cx
                .duration("limits.tunnel_idle_timeout", &l.tunnel_idle_timeout)?
            {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => defaults.tunnel_idle_timeout,
            },
        };

        let cache_max_bytes = cx
            .positive("cache.max_bytes", &raw.cache.max_bytes, 0)?
            .unwrap_or(64 << 20) as u64;
        let cache_disk_max_bytes = cx
            .positive("cache.disk_max_bytes", &raw.cache.disk_max_bytes, 4096)?
            .unwrap_or(64 << 20) as u64;
        let cache_disk_max_bytes = raw
            .cache
            .persist
            .as_ref()
            .is_none_or(|p| *p.get_ref())
            .then_some(cache_disk_max_bytes);
        let key_headers = match &raw.cache.key_headers {
            None => default_key_headers(),
            Some(list) => {
                let mut out = Vec::new();
                for h in list.get_ref() {
                    match http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()) {
                        Ok(n) => out.push(n),
                        Err(_) => {
                            return cx.err(
                                "cache.key_headers",
                                list.span(),
                                format!("`{h}` is not a header name"),
                            )
                        }
                    }
                }
                out
            }
        };

        let resilience = super::resilience::validate(
            &cx,
            &raw.breaker,
            &raw.retry,
            &raw.bulkhead,
            &raw.rate_limit,
        )?;

        let q = &raw.queue;
        let memory_credentials = match &q.credentials {
            None => false,
            Some(c) if c.get_ref() == "keychain" => false,
            Some(c) if c.get_ref() == "memory" => true,
            Some(c) => {
                return cx.err(
                    "queue.credentials",
                    c.span(),
                    format!("`{}` is not \"keychain\" or \"memory\"", c.get_ref()),
                )
            }
        };
        let secrets_store = match &raw.secrets.store {
            None => crate::secrets::StoreChoice::Auto,
            Some(c) => match crate::secrets::StoreChoice::parse(c.get_ref()) {
                Some(choice) => choice,
                None => {
                    return cx.err(
                        "secrets.store",
                        c.span(),
                        format!(
                            "`{}` is not \"auto\", \"keychain\" or \"file\"",
                            c.get_ref()
                        ),
                    )
                }
            },
        };
        let answer = match &q.answer {
            None => super::QueueAnswer::Job,
            Some(a) if a.get_ref() == "job" => super::QueueAnswer::Job,
            Some(a) if a.get_ref() == "accepted" => super::QueueAnswer::Accepted,
            Some(a) => {
                return cx.err(
                    "queue.answer",
                    a.span(),
                    format!("`{}` is not \"job\" or \"accepted\"", a.get_ref()),
                )
            }
        };
        let queue = super::QueueSettings {
            answer,
            memory_credentials,
            max_age: cx
                .duration("queue.max_age", &q.max_age)?
                .unwrap_or(Duration::from_secs(24 * 3600)),
            dedupe_window: cx
                .duration("queue.dedupe_window", &q.dedupe_window)?
                .unwrap_or(Duration::from_secs(60)),
            caps: super::queue_caps::validate(&cx, q)?,
            // 20 reads a 10 s: a few in-doubt items' lists and likeliest jobs per window, and
            // a fraction of the client rate limit's 200 a 10 s for one credential.
            lookup_reads: cx
                .positive("queue.lookup_reads", &q.lookup_reads, 1)?
                .map_or(20, |n| n.min(u32::MAX as usize) as u32),
            lookup_window: match (
                cx.duration("queue.lookup_window", &q.lookup_window)?,
                &q.lookup_window,
            ) {
                (Some(d), Some(v)) if d.is_zero() => {
                    return cx.err(
                        "queue.lookup_window",
                        v.span(),
                        "must be more than 0".into(),
                    )
                }
                (d, _) => d.unwrap_or(Duration::from_secs(10)),
            },
        };

        let offline = offline(&cx, &raw.offline)?;
        // `detect_os` (default true) means "ask the OS if this build can": a build without
        // the readers says so in the status (`network.os_watch`). A bus address is only for
        // the Linux reader, so naming one where it is not built is an error.
        #[cfg(not(feature = "metered"))]
        if let Some(a) = &raw.network.system_bus_address {
            return not_built(&cx, "network.system_bus_address", a.span(), "metered");
        }
        let network = super::NetworkSettings {
            detect_os: raw.network.detect_os.unwrap_or(true),
            system_bus_address: match &raw.network.system_bus_address {
                None => None,
                Some(a) if a.get_ref().trim().is_empty() => {
                    return cx.err(
                        "network.system_bus_address",
                        a.span(),
                        "must be a D-Bus address such as \"unix:path=/run/dbus/system_bus_socket\" (leave it out for the system bus)".into(),
                    )
                }
                Some(a) => Some(a.get_ref().trim().to_string()),
            },
        };
        let share = match &raw.identity.share {
            // `app`: an organisation's OAuth app restrictions hold (docs/identity.md).
            None => super::ShareMode::App,
            Some(v) => match super::ShareMode::parse(v.get_ref()) {
                Some(m) => m,
                None => {
                    return cx.err(
                        "identity.share",
                        v.span(),
                        format!(
                            "`{}` is not \"account\", \"app\" or \"credential\"",
                            v.get_ref()
                        ),
                    )
                }
            },
        };

        let upstream_proxy = match &raw.upstream_proxy {
            None => None,
            Some(p) => Some(
                super::UpstreamProxy::parse(p.get_ref())
                    .or_else(|m| cx.err("upstream_proxy", p.span(), m))?,
            ),
        };
        let github_status = if raw.watch_github_status == Some(false) {
            None
        } else {
            let (settings, span) = match &raw.status {
                Some(s) => (s.get_ref().clone(), s.span()),
                None => (weir_status::StatusSettings::default(), 0..0),
            };
            match settings.validate() {
                Ok(c) => Some(c),
                Err(e) => return cx.err("status", span, e.to_string()),
            }
        };

        // A component the watcher does not watch can never make a breaker cautious.
        if let Some(gs) = &github_status {
            for u in &raw.upstream {
                let Some(list) = &u.status_components else {
                    continue;
                };
                let watched = |c: &String| {
                    gs.components
                        .iter()
                        .any(|w| w.eq_ignore_ascii_case(c.trim()))
                };
                if let Some(c) = list.get_ref().iter().find(|c| !watched(c)) {
                    return cx.err(
                        "upstream.status_components",
                        list.span(),
                        format!(
                            "`{c}` is not a watched GitHub Status component; add it to [status] components ({})",
                            gs.components.join(", ")
                        ),
                    );
                }
            }
        }
        #[cfg(feature = "gateway")]
        let gateway = match &raw.gateway {
            None => None,
            Some(g) => Some(super::gateway::validate(&cx, g, file)?),
        };
        #[cfg(not(feature = "gateway"))]
        if let Some(g) = &raw.gateway {
            return not_built(&cx, "gateway", g.span(), "gateway");
        }
        #[cfg(not(feature = "team"))]
        if let Some(t) = &raw.team {
            return not_built(&cx, "team", t.span(), "team");
        }
        let team = super::team::validate(&cx, raw.team.as_ref(), file)?;
        let local_agent = super::local_agent::validate(&cx, raw.local_agent.as_ref(), file)?;
        let names: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
        let model_fallback = super::model_fallback::validate(&cx, &raw.model_fallback, &names)?;
        let policy = policy(&raw, file, text)?;
        // The org policy file's sharing mode is a floor: a user setting that would loosen it
        // is overruled (and said so).
        let share = match policy.org_share {
            Some(org) if org > share => {
                if raw.identity.share.is_some() {
                    tracing::warn!(user = share.as_str(), org = org.as_str(), "identity.share is looser than the org policy file's; the org's is in force");
                }
                org
            }
            _ => share,
        };

        Ok(Settings {
            model_fallback,
            policy,
            share,
            team,
            local_agent,
            #[cfg(feature = "gateway")]
            gateway,
            github_status,
            queue,
            secrets_store,
            offline,
            network,
            resilience,
            intercept: raw.intercept.as_ref().is_none_or(|i| *i.get_ref()),
            allow_private_targets: raw.allow_private_targets.unwrap_or(false),
            upstream_proxy,
            listen,
            data_dir: raw.data_dir.map(|d| PathBuf::from(d.into_inner())),
            upstreams,
            routes,
            classes,
            limits,
            cache_max_bytes,
            cache_disk_max_bytes,
            key_headers,
        })
    }
}

/// The managed upstreams: the `[[upstream]]` tables in the order written, each replacing the
/// built-in upstream of its name (whose origin it keeps when it names none), then the built-in
/// upstreams no table named. `enabled = false` removes one; `default_upstreams = false` keeps
/// only the tables.
fn upstreams(
    cx: &Ctx<'_>,
    raw: &FileConfig,
    file: &str,
) -> Result<Vec<UpstreamSettings>, ConfigError> {
    let builtin = default_upstreams();
    let with_builtin = raw.default_upstreams.as_ref().is_none_or(|d| *d.get_ref());
    let mut out: Vec<UpstreamSettings> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    for u in &raw.upstream {
        let name = u.name.get_ref().trim().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return cx.err(
                "upstream.name",
                u.name.span(),
                format!("`{name}` must be non-empty and use only letters, digits, `-` and `_`"),
            );
        }
        if named.contains(&name) {
            return cx.err(
                "upstream.name",
                u.name.span(),
                format!("upstream `{name}` is defined twice"),
            );
        }
        named.push(name.clone());
        let default = builtin.iter().find(|b| b.name == name && with_builtin);
        let origin = match (&u.origin, default) {
            (Some(o), _) => match Origin::parse(o.get_ref()) {
                Ok(o) => o,
                Err(m) => return cx.err("upstream.origin", o.span(), m),
            },
            (None, Some(d)) => d.origin.clone(),
            (None, None) => {
                return cx.err(
                    "upstream.origin",
                    u.name.span(),
                    format!(
                        "upstream `{name}` needs an `origin` (only the built-in upstreams {} may leave it out)",
                        builtin.iter().map(|b| format!("`{}`", b.name)).collect::<Vec<_>>().join(", ")
                    ),
                )
            }
        };
        if u.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
            continue;
        }
        let fallback = match &u.fallback {
            None => None,
            Some(f) => match Origin::parse(f.get_ref()) {
                Ok(o) => Some(o),
                Err(m) => return cx.err("upstream.fallback", f.span(), m),
            },
        };
        let net = super::upstream_net::upstream_net(cx, u, file)?;
        let status_components = match &u.status_components {
            None => super::default_status_components(&origin),
            Some(list) => {
                if let Some(bad) = list.get_ref().iter().find(|c| c.trim().is_empty()) {
                    return cx.err(
                        "upstream.status_components",
                        list.span(),
                        format!("`{bad}` is not a component name"),
                    );
                }
                list.get_ref()
                    .iter()
                    .map(|c| c.trim().to_string())
                    .collect()
            }
        };
        out.push(UpstreamSettings {
            name,
            origin,
            fallback,
            net,
            status_components,
        });
    }
    if with_builtin {
        out.extend(builtin.into_iter().filter(|b| !named.contains(&b.name)));
    }
    Ok(out)
}

/// `[[policy]]` and the org policy file above it; user rules that would loosen an org rule
/// are reported (log and status) and overruled where both apply.
fn policy(
    raw: &FileConfig,
    file: &str,
    text: &str,
) -> Result<crate::policy::PolicySet, ConfigError> {
    let user = crate::policy::validate_user_rules(&raw.policy, file, text)?;
    // The built-in defaults stand alone: they must never fail on a broken file elsewhere.
    if file == "<defaults>" {
        return Ok(crate::policy::PolicySet {
            user,
            ..Default::default()
        });
    }
    let configured = raw.policy_file.as_ref().map(|p| PathBuf::from(p.get_ref()));
    let org = crate::policy::load_org(configured.as_deref())?;
    let refused = crate::policy::refusals(&org.rules, &user);
    for r in &refused {
        tracing::warn!(user_rule = %r.user, org_rule = %r.org, "policy: {}", r.message);
    }
    Ok(crate::policy::PolicySet {
        org: org.rules,
        user,
        org_file: org.file,
        refused,
        org_share: org.share,
    })
}

/// `[offline]`: probe delays must be positive and the cap no shorter than the base.
fn offline(
    cx: &Ctx<'_>,
    o: &super::file::FileOffline,
) -> Result<super::OfflineSettings, ConfigError> {
    let base = cx
        .duration("offline.probe_base", &o.probe_base)?
        .unwrap_or(Duration::from_secs(1));
    let cap = cx
        .duration("offline.probe_cap", &o.probe_cap)?
        .unwrap_or(Duration::from_secs(60));
    if base.is_zero() {
        let span = o.probe_base.as_ref().map_or(0..0, |s| s.span());
        return cx.err("offline.probe_base", span, "must be longer than 0".into());
    }
    if cap < base {
        let span = o.probe_cap.as_ref().map_or(0..0, |s| s.span());
        return cx.err(
            "offline.probe_cap",
            span,
            format!("must be at least offline.probe_base ({base:?})"),
        );
    }
    Ok(super::OfflineSettings {
        detect: o.detect.unwrap_or(true),
        probe_base: base,
        probe_cap: cap,
        jitter: o.jitter.unwrap_or(true),
    })
}

fn apply_class(
    cx: &Ctx,
    class: RouteClass,
    fc: &FileClass,
    out: &mut ClassSettings,
) -> Result<(), ConfigError> {
    let knobs: [(&str, &Option<Spanned<String>>, &mut Duration); 10] = [
        ("fresh_ttl", &fc.fresh_ttl, &mut out.fresh_ttl),
        (
            "stale_while_revalidate",
            &fc.stale_while_revalidate,
            &mut out.stale_while_revalidate,
        ),
        (
            "revalidate_wait",
            &fc.revalidate_wait,
            &mut out.revalidate_wait,
        ),
        (
            "stale_if_error",
            &fc.stale_if_error,
            &mut out.stale_if_error,
        ),
        ("token_margin", &fc.token_margin, &mut out.token_margin),
        (
            "per_try_timeout",
            &fc.per_try_timeout,
            &mut out.per_try_timeout,
        ),
        ("deadline", &fc.deadline, &mut out.deadline),
        ("slow_call", &fc.slow_call, &mut out.slow_call),
        (
            "normal_latency",
            &fc.normal_latency,
            &mut out.normal_latency,
        ),
        (
            "degraded_refresh",
            &fc.degraded_refresh,
            &mut out.degraded_refresh,
        ),
    ];
    for (name, value, slot) in knobs {
        if let Some(d) = cx.duration(&format!("classes.{}.{name}", class.as_str()), value)? {
            *slot = d;
        }
    }
    // A client waits this long for a refresh it has a copy for: never longer than one attempt.
    if out.revalidate_wait > out.per_try_timeout {
        let span = fc.revalidate_wait.as_ref().map_or(0..0, |s| s.span());
        return cx.err(
            &format!("classes.{}.revalidate_wait", class.as_str()),
            span,
            format!(
                "must be at most the class's per_try_timeout ({}); a client with a copy in hand would wait longer for its refresh than one attempt may take",
                humantime::format_duration(out.per_try_timeout)
            ),
        );
    }
    Ok(())
}

impl Default for Settings {
    fn default() -> Self {
        // The defaults are a valid file with nothing in it.
        Settings::from_file(FileConfig::default(), "<defaults>", "")
            .unwrap_or_else(|e| unreachable!("built-in defaults must validate: {e}"))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 32 * 1024,
            max_body_bytes: 10 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 2048,
            drain_timeout: Duration::from_secs(10),
            // tinyproxy's and nginx stream's default: a held slot is freed, and protocols that
            // stay open idle for long (websockets, SSH) send keep-alives well inside it.
            tunnel_idle_timeout: Some(Duration::from_secs(600)),
        }
    }
}

/// The built-in upstreams, managed with no config file: the Copilot API hosts both real clients
/// send agent calls to (the per-plan hosts are what a Copilot token's `endpoints.api` and gh's
/// GraphQL `viewer.copilotEndpoints.api` name), and the GitHub REST API (the token, the user).
pub const DEFAULT_UPSTREAMS: [(&str, &str); 5] = [
    ("copilot-api", "https://api.githubcopilot.com"),
    (
        "copilot-individual",
        "https://api.individual.githubcopilot.com",
    ),
    ("copilot-business", "https://api.business.githubcopilot.com"),
    (
        "copilot-enterprise",
        "https://api.enterprise.githubcopilot.com",
    ),
    ("github-api", "https://api.github.com"),
];

fn default_upstreams() -> Vec<UpstreamSettings> {
    DEFAULT_UPSTREAMS
        .into_iter()
        .filter_map(|(name, origin)| {
            let origin = Origin::parse(origin).ok()?;
            Some(UpstreamSettings {
                name: name.to_string(),
                status_components: super::default_status_components(&origin),
                origin,
                fallback: None,
                net: Default::default(),
            })
        })
        .collect()
}

fn default_key_headers() -> Vec<http::HeaderName> {
    // VS Code sends `Copilot-Api-Version`; an answer for one API version is not another's.
    [
        "accept",
        "accept-encoding",
        "x-github-api-version",
        "copilot-api-version",
    ]
    .into_iter()
    .map(http::HeaderName::from_static)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let s = parse_str("", "w.toml").unwrap();
        assert_eq!(s.listen.port(), DEFAULT_PORT);
        let hosts: Vec<&str> = s.upstreams.iter().map(|u| u.origin.host()).collect();
        assert_eq!(
            hosts,
            [
                "api.githubcopilot.com",
                "api.individual.githubcopilot.com",
                "api.business.githubcopilot.com",
                "api.enterprise.githubcopilot.com",
                "api.github.com"
            ]
        );
        assert_eq!(
            s.classes.get(RouteClass::List).fresh_ttl,
            Duration::from_secs(15)
        );
    }

    #[test]
    fn contract_keys_parse() {
        let s = parse_str(
            "listen = \"127.0.0.1:1234\"\n[[upstream]]\nname = \"copilot-api\"\norigin = \"http://127.0.0.1:9\"\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(s.listen.port(), 1234);
        // The table replaces the built-in `copilot-api`; the other built-ins stay.
        assert_eq!(s.upstreams.len(), DEFAULT_UPSTREAMS.len());
        assert_eq!(s.upstreams[0].name, "copilot-api");
        assert_eq!(s.upstreams[0].origin.port(), 9);
        assert_eq!(s.upstreams[4].origin.host(), "api.github.com");
    }

    #[test]
    fn upstream_tables_merge_with_the_built_ins_by_name() {
        let names = |t: &str| -> Vec<(String, String)> {
            parse_str(t, "w.toml")
                .unwrap()
                .upstreams
                .iter()
                .map(|u| (u.name.clone(), u.origin.to_string()))
                .collect()
        };
        // A new host is added in front; every built-in stays.
        let n = names("[[upstream]]\nname = \"mirror\"\norigin = \"https://m.example\"\n");
        assert_eq!(n.len(), 6);
        assert_eq!(n[0], ("mirror".into(), "https://m.example".into()));
        assert_eq!(n[5], ("github-api".into(), "https://api.github.com".into()));
        // A built-in changed without its origin keeps its origin.
        let s = parse_str(
            "[[upstream]]\nname = \"github-api\"\nconnect_to = \"127.0.0.1:9\"\n",
            "w.toml",
        )
        .unwrap();
        let g = s.upstreams.iter().find(|u| u.name == "github-api").unwrap();
        assert_eq!(g.origin.to_string(), "https://api.github.com");
        assert_eq!(g.net.connect_to.as_ref().unwrap().port, 9);
        assert_eq!(g.status_components, ["API Requests"]);
        // `enabled = false` removes a built-in; `default_upstreams = false` keeps only the tables.
        let n = names("[[upstream]]\nname = \"copilot-business\"\nenabled = false\n");
        assert_eq!(n.len(), 4);
        assert!(n.iter().all(|(name, _)| name != "copilot-business"));
        let n = names("default_upstreams = false\n[[upstream]]\nname = \"up0\"\norigin = \"http://127.0.0.1:9\"\n");
        assert_eq!(n, [("up0".to_string(), "http://127.0.0.1:9".to_string())]);
        // A new name needs an origin: the error names the file, the line and the key.
        let e = parse_str("\n[[upstream]]\nname = \"mine\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:3: key `upstream.origin`: upstream `mine` needs an `origin`"),
            "{e}"
        );
        // So does a built-in's name once the built-ins are off.
        let e = parse_str(
            "default_upstreams = false\n[[upstream]]\nname = \"github-api\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:3: key `upstream.origin`"),
            "{e}"
        );
        let e = parse_str("default_upstreams = \"no\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:1: key `default_upstreams`"),
            "{e}"
        );
    }

    #[test]
    fn a_revalidate_wait_longer_than_an_attempt_is_refused_with_its_line() {
        let s = parse_str("[classes.view]\nrevalidate_wait = \"1s\"\n", "w.toml").unwrap();
        assert_eq!(
            s.classes.get(RouteClass::View).revalidate_wait,
            Duration::from_secs(1)
        );
        assert_eq!(
            s.classes.get(RouteClass::List).revalidate_wait,
            Duration::from_millis(250),
            "the default"
        );
        let e = parse_str("[classes.view]\n\nrevalidate_wait = \"1h\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:3: key `classes.view.revalidate_wait`: must be at most the class's per_try_timeout (10s)"),
            "{e}"
        );
    }

    #[test]
    fn the_disk_cache_keys() {
        let d = parse_str("", "w.toml").unwrap();
        assert_eq!(d.cache_disk_max_bytes, Some(64 << 20));
        let s = parse_str("[cache]\ndisk_max_bytes = 100000\n", "w.toml").unwrap();
        assert_eq!(s.cache_disk_max_bytes, Some(100_000));
        let off = parse_str("[cache]\npersist = false\n", "w.toml").unwrap();
        assert_eq!(off.cache_disk_max_bytes, None);
        let e = parse_str("[cache]\n\ndisk_max_bytes = 10\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:3: key `cache.disk_max_bytes`: must be at least 4096, got 10"
        );
    }

    // A build without `metered` refuses `system_bus_address` (tested below), so the table's
    // own checks are tested where it is built.
    #[cfg(feature = "metered")]
    #[test]
    fn the_network_table_is_checked_with_its_line() {
        let d = parse_str("", "w.toml").unwrap().network;
        assert!(d.detect_os);
        assert_eq!(d.system_bus_address, None);
        let s = parse_str(
            "[network]\ndetect_os = false\nsystem_bus_address = \"unix:path=/tmp/b\"\n",
            "w.toml",
        )
        .unwrap()
        .network;
        assert!(!s.detect_os);
        assert_eq!(s.system_bus_address.as_deref(), Some("unix:path=/tmp/b"));
        let e = parse_str("[network]\n\nsystem_bus_address = \" \"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:3: key `network.system_bus_address`: must be a D-Bus address"),
            "{e}"
        );
        let e = parse_str("[network]\nmetered = true\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("metered"), "{e}");
    }

    /// Each optional part's table, named in a build without its feature, fails with the file,
    /// the line, the key and the feature to build; leaving a part out is not an unknown key.
    #[test]
    fn a_table_whose_feature_is_not_built_names_the_feature() {
        let cases: &[(&str, &str, &str, bool)] = &[
            (
                "listen = \"127.0.0.1:0\"\n\n[gateway]\nlisten = \"0.0.0.0:8443\"\n",
                "w.toml:3: key `gateway`: this Weir was built without the `gateway` feature",
                "--features gateway",
                cfg!(feature = "gateway"),
            ),
            (
                "[team]\nnats_url = \"nats://127.0.0.1:4222\"\n",
                "w.toml:1: key `team`: this Weir was built without the `team` feature",
                "--features team",
                cfg!(feature = "team"),
            ),
            (
                "[network]\nsystem_bus_address = \"unix:path=/tmp/b\"\n",
                "w.toml:2: key `network.system_bus_address`: this Weir was built without the `metered` feature",
                "--features metered",
                cfg!(feature = "metered"),
            ),
        ];
        for (text, starts, fix, built) in cases {
            match parse_str(text, "w.toml") {
                Ok(_) => assert!(*built, "{text:?} was accepted without its feature"),
                Err(e) if !*built => {
                    let e = e.to_string();
                    assert!(e.starts_with(starts), "{e}");
                    assert!(e.contains(fix), "{e}");
                }
                // Built: whatever the table's own checks say, never "not built".
                Err(e) => assert!(!e.to_string().contains("built without"), "{e}"),
            }
        }
        // Turning OS detection on or off needs nothing built (without the readers the status
        // says they are not built).
        let s = parse_str("[network]\ndetect_os = false\n", "w.toml").unwrap();
        assert!(!s.network.detect_os);
        let s = parse_str("[network]\ndetect_os = true\n", "w.toml").unwrap();
        assert!(s.network.detect_os);
    }

    #[test]
    fn the_org_policy_file_sets_a_sharing_floor_a_user_cannot_loosen() {
        let dir = tempfile::tempdir().unwrap();
        let org = dir.path().join("policy.toml");
        std::fs::write(&org, "[identity]\nshare = \"app\"\n").unwrap();
        let top = format!("policy_file = {:?}\n", org.display().to_string());
        let with = |user: &str| parse_str(&format!("{top}{user}"), "w.toml").unwrap().share;
        use super::super::ShareMode;
        assert_eq!(with(""), ShareMode::App, "the org's mode by default");
        assert_eq!(
            with("[identity]\nshare = \"account\"\n"),
            ShareMode::App,
            "looser: overruled"
        );
        assert_eq!(
            with("[identity]\nshare = \"credential\"\n"),
            ShareMode::Credential,
            "stricter: kept"
        );
        std::fs::write(&org, "\n[identity]\nshare = \"everyone\"\n").unwrap();
        let e = parse_str(&top, "w.toml").unwrap_err().to_string();
        assert!(
            e.contains("identity.share") && e.contains("everyone"),
            "{e}"
        );
    }

    #[test]
    fn identity_share_is_checked_with_its_line() {
        assert_eq!(
            parse_str("", "w.toml").unwrap().share,
            super::super::ShareMode::App
        );
        let s = parse_str("[identity]\nshare = \"credential\"\n", "w.toml").unwrap();
        assert_eq!(s.share, super::super::ShareMode::Credential);
        let e = parse_str("[identity]\nshare = \"team\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:2: key `identity.share`: `team` is not \"account\", \"app\" or \"credential\""
        );
    }

    #[test]
    fn secrets_store_is_checked_with_its_line() {
        use crate::secrets::StoreChoice;
        assert_eq!(
            parse_str("", "w.toml").unwrap().secrets_store,
            StoreChoice::Auto
        );
        let s = parse_str("[secrets]\nstore = \"file\"\n", "w.toml").unwrap();
        assert_eq!(s.secrets_store, StoreChoice::File);
        let e = parse_str("\n[secrets]\nstore = \"vault\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:3: key `secrets.store`: `vault` is not \"auto\", \"keychain\" or \"file\""
        );
        let e = parse_str("[secrets]\nstroe = \"file\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().starts_with("w.toml:2:"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = parse_str(
            "listen = \"127.0.0.1:1\"\n\n[[upstream]]\nname = \"a\"\norigin = \"ftp://x\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:5: key `upstream.origin`: scheme `ftp` is not http or https"
        );
        let e = parse_str("lisen = \"x\"\n", "w.toml").unwrap_err();
        let ConfigError::Invalid {
            line, key, message, ..
        } = e
        else {
            panic!()
        };
        assert_eq!((line, key.as_str()), (1, "lisen"));
        assert!(message.contains("unknown field"), "{message}");
        let e = parse_str("[classes.list]\nfresh_ttl = \"soon\"\n", "w.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.toml:2: key `classes.list.fresh_ttl`"),
            "{e}"
        );
        let e = parse_str("listen = \"0.0.0.0:80\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("not a loopback"), "{e}");
        // The parser's own errors (a wrong type, an unknown key) name the key's whole path
        // under its table, as Weir's checks do (they said `persist`).
        let e = parse_str(
            "listen = \"127.0.0.1:1\"\n[cache]  # mine\npersist = \"yes\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:3: key `cache.persist`:"),
            "{e}"
        );
        let e = parse_str(
            "[[upstream]]\nname = \"a\"\norign = \"https://x\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:3: key `upstream.orign`:"),
            "{e}"
        );
    }
}
