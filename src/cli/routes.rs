//! `weir routes`: the route table as the loaded config makes it — the managed hosts, each
//! method and path pattern with its class and the class's cache times — and, with
//! `--classify`, the class Weir gives each `METHOD URL` line read on stdin. The drift check
//! (`scripts/check-clients.sh`) feeds it every URL the real client packages build, so the
//! table it checks against is the binary's own, never a copy.

use super::args::GlobalArgs;
use super::context::load;
use super::EXIT_CONFIG;
use std::io::BufRead;
use std::process::ExitCode;
use weir::config::{classify, RouteClass, Settings};

pub fn run(classify_stdin: bool, json: bool, global: &GlobalArgs) -> ExitCode {
    let install = match load(global) {
        Ok(i) => i,
        Err(code) => return code,
    };
    if classify_stdin {
        return classify_lines(&install.settings, json);
    }
    let table = table(&install.settings);
    if json {
        println!("{table:#}");
        return ExitCode::SUCCESS;
    }
    println!("Managed hosts (every route below applies to each):");
    for u in install.settings.upstreams.iter() {
        println!("  {:<20} {}", u.name, u.origin);
    }
    println!();
    println!("Routes, first match wins; anything else is `other` (passed through, never cached):");
    println!(
        "  {:<7} {:<62} {:<7} {:>7} {:>7} {:>9}",
        "METHOD", "PATH", "CLASS", "FRESH", "SWR", "IF-ERROR"
    );
    for r in &install.settings.routes {
        let k = install.settings.classes.get(r.class).for_family(r.family);
        println!(
            "  {:<7} {:<62} {:<7} {:>7} {:>7} {:>9}",
            r.method.as_str(),
            r.pattern,
            r.class.as_str(),
            secs(k.fresh_ttl),
            secs(k.stale_while_revalidate),
            secs(k.stale_if_error),
        );
    }
    ExitCode::SUCCESS
}

/// `{"upstreams": [{name, origin}], "routes": [{method, path, class, fresh_ttl_s, …}]}`.
fn table(s: &Settings) -> serde_json::Value {
    let upstreams: Vec<_> = s
        .upstreams
        .iter()
        .map(|u| serde_json::json!({"name": u.name, "origin": u.origin.to_string()}))
        .collect();
    let routes: Vec<_> = s
        .routes
        .iter()
        .map(|r| {
            let k = s.classes.get(r.class).for_family(r.family);
            serde_json::json!({
                "method": r.method.as_str(),
                "path": r.pattern,
                "class": r.class.as_str(),
                "fresh_ttl_s": k.fresh_ttl.as_secs_f64(),
                "stale_while_revalidate_s": k.stale_while_revalidate.as_secs_f64(),
                "stale_if_error_s": k.stale_if_error.as_secs_f64(),
            })
        })
        .collect();
    serde_json::json!({"upstreams": upstreams, "routes": routes})
}

/// One line of `--classify`'s answer: the class of a managed request, or `unmanaged` (not a
/// host Weir manages: tunnelled untouched).
fn class_of(s: &Settings, method: &str, url: &str) -> Result<(String, Option<String>), String> {
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("`{method}` is not an HTTP method"))?;
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let (Some(scheme), Some(auth)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!(
            "`{url}` is not an absolute URL (scheme://host/path)"
        ));
    };
    let port = auth
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    match s.upstream_for(scheme, auth.host(), port) {
        Some(up) => {
            let class: RouteClass = classify(&s.routes, &method, uri.path());
            Ok((
                class.as_str().to_string(),
                Some(s.upstreams[up.index()].name.clone()),
            ))
        }
        None => Ok(("unmanaged".into(), None)),
    }
}

fn classify_lines(s: &Settings, json: bool) -> ExitCode {
    let mut out = Vec::new();
    let mut bad = 0;
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let Ok(line) = line else { break };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(m), Some(u), None) = (words.next(), words.next(), words.next()) else {
            eprintln!(
                "weir: stdin line {}: expected `METHOD URL`, got `{line}`",
                n + 1
            );
            bad += 1;
            continue;
        };
        match class_of(s, m, u) {
            Ok((class, upstream)) => {
                if json {
                    out.push(serde_json::json!({"method": m, "url": u, "class": class, "upstream": upstream}));
                } else {
                    println!("{m} {u}\t{class}\t{}", upstream.as_deref().unwrap_or("-"));
                }
            }
            Err(e) => {
                eprintln!("weir: stdin line {}: {e}", n + 1);
                bad += 1;
            }
        }
    }
    if json {
        println!("{:#}", serde_json::Value::Array(out));
    }
    if bad > 0 {
        ExitCode::from(EXIT_CONFIG)
    } else {
        ExitCode::SUCCESS
    }
}

fn secs(d: std::time::Duration) -> String {
    if d.is_zero() {
        "-".into()
    } else {
        humantime::format_duration(d).to_string()
    }
}
