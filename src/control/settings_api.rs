//! `GET/PUT /_weir/api/settings`: the dashboard's settings panel. GET shows where the config
//! file is and the effective values; PUT changes class TTLs and breaker
//! thresholds in the file (comments and other keys kept, via toml_edit), validates the whole
//! file with the same rules as start-up, keeps a `.bak`, writes atomically, and puts the new
//! settings in force at once (`crate::reload`); the answer lists the changed settings that
//! wait for a restart (`restart_required`). Where credentials go (upstream names and origins,
//! fallbacks, `connect_to`, `ca_file`, `upstream_proxy`) is never changed here: a secret that
//! leaked to a local process must not be enough to send every token elsewhere.

use super::Control;
use super::{json, read_json, require_secret};
use crate::body::Body;
use crate::config::{Origin, RouteClass, UpstreamSettings};
use crate::problem::{Problem, ProblemKind};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;
use toml_edit::{value, DocumentMut, Item, Table};

pub(crate) async fn handle(
    ctl: &Arc<Control>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    // Reads too: the effective settings name the config file and every upstream.
    require_secret(ctl, &req)?;
    match *req.method() {
        Method::GET => Ok(json(&current(ctl))),
        Method::PUT => {
            let patch = read_json(req).await?;
            guard_routing(&patch, &ctl.proxy.settings().upstreams)?;
            save(ctl, &patch).await
        }
        _ => Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::NotFound,
            "use GET or PUT",
        )),
    }
}

fn current(ctl: &Control) -> Value {
    let s = &ctl.proxy.settings();
    let class = |c: RouteClass| {
        let k = s.classes.get(c);
        serde_json::json!({
            "fresh_ttl": humantime::format_duration(k.fresh_ttl).to_string(),
            "stale_while_revalidate": humantime::format_duration(k.stale_while_revalidate).to_string(),
            "revalidate_wait": humantime::format_duration(k.revalidate_wait).to_string(),
            "stale_if_error": humantime::format_duration(k.stale_if_error).to_string(),
            "slow_call": humantime::format_duration(k.slow_call).to_string(),
            "degraded_refresh": humantime::format_duration(k.degraded_refresh).to_string(),
        })
    };
    let b = &s.resilience.breaker;
    serde_json::json!({
        "config_file": ctl.reload.config_file().map(|p| p.display().to_string()),
        "exists": ctl.reload.config_file().is_some_and(|p| p.exists()),
        "effective": {
            "listen": s.listen.to_string(),
            "upstreams": s.upstreams.iter().map(|u| serde_json::json!({
                "name": u.name, "origin": u.origin.to_string(), "fallback": u.fallback.as_ref().map(|f| f.to_string()),
            })).collect::<Vec<_>>(),
            "classes": {"list": class(RouteClass::List), "view": class(RouteClass::View)},
            "breaker": {
                "failure_rate_threshold": b.failure_rate_threshold,
                "slow_call_rate_threshold": b.slow_call_rate_threshold,
                "minimum_calls": b.minimum_calls,
                "open_wait": humantime::format_duration(b.open_base).to_string(),
                "half_open_probes": b.half_open_probes,
            },
        },
        "restart_required": ctl.reload.status().restart_required,
    })
}

fn bad(detail: impl Into<String>) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ProblemKind::BadRequest,
        detail,
    )
}

/// Keys that decide where credentials are sent: config-file only.
const ROUTING_KEYS: [&str; 6] = [
    "origin",
    "fallback",
    "connect_to",
    "ca_file",
    "upstream_proxy",
    "allow_private_targets",
];

fn routing_refused(what: &str) -> Problem {
    bad(format!(
        "{what}: where credentials are sent (upstream origins, fallbacks, connect_to, ca_file, upstream_proxy, allow_private_targets) can only be changed in the config file, then restart Weir"
    ))
}

/// Refuses a patch that would change where credentials go: any routing key at the top level,
/// or `upstreams` that differ from the running ones at all. Names are identity: the stored
/// token, queued credentials and account lookups are keyed by an upstream's name, so a rename
/// (or two names swapped between origins) would send them to another origin.
fn guard_routing(patch: &Value, current: &[UpstreamSettings]) -> Result<(), Problem> {
    if let Some(k) = ROUTING_KEYS.iter().find(|k| patch.get(**k).is_some()) {
        return Err(routing_refused(&format!("`{k}`")));
    }
    let Some(ups) = patch.get("upstreams") else {
        return Ok(());
    };
    let arr = ups
        .as_array()
        .ok_or_else(|| bad("`upstreams` must be a list"))?;
    if arr.len() != current.len() {
        return Err(routing_refused("adding or removing managed upstreams"));
    }
    let same = |given: Option<&Value>, want: Option<&Origin>| match (given, want) {
        (None | Some(Value::Null), None) => true,
        (Some(Value::String(s)), None) => s.is_empty(),
        (Some(Value::String(s)), Some(o)) => Origin::parse(s).is_ok_and(|g| g == *o),
        _ => false,
    };
    for (i, (u, cur)) in arr.iter().zip(current).enumerate() {
        match u.get("name") {
            Some(Value::String(n)) if *n == cur.name => {}
            Some(Value::String(n)) if !n.is_empty() => {
                return Err(routing_refused(&format!(
                    "upstreams[{i}].name: renaming `{}` to `{n}` (a name is identity: the stored token, queued credentials and account lookups follow it to its origin)",
                    cur.name
                )));
            }
            _ => {
                return Err(bad(format!(
                    "upstreams[{i}].name must be `{}`, the running upstream's name",
                    cur.name
                )))
            }
        }
        if let Some(k) = ["connect_to", "ca_file"]
            .iter()
            .find(|k| u.get(**k).is_some())
        {
            return Err(routing_refused(&format!("upstreams[{i}].{k}")));
        }
        if !same(u.get("origin"), Some(&cur.origin)) {
            return Err(routing_refused(&format!("upstreams[{i}].origin")));
        }
        if !same(u.get("fallback"), cur.fallback.as_ref()) {
            return Err(routing_refused(&format!("upstreams[{i}].fallback")));
        }
    }
    Ok(())
}

/// Applies the patch to the file's text; errors name the offending field. `upstreams` in a
/// patch can only repeat what runs (`guard_routing` refuses any change), so the file's
/// `[[upstream]]` tables are never written: every key in them stays as the file has it
/// (`connect_to`, `ca_file`, …), also when the file names fewer tables than run (a table
/// overriding one built-in upstream) or was edited since the start and waits for a restart.
fn apply(text: &str, patch: &Value) -> Result<String, Problem> {
    let doc: DocumentMut = text
        .parse()
        .map_err(|e| bad(format!("the config file does not parse: {e}")))?;
    apply_rest(doc, patch)
}

/// What a patch may hold: the editable knobs, and the running upstreams repeated (checked by
/// `guard_routing`). Anything else is refused, never ignored: an answer of "saved, applied"
/// for a key that changed nothing reads as done.
const PATCH_KEYS: [&str; 3] = ["classes", "breaker", "upstreams"];

/// Classes and breaker knobs.
fn apply_rest(mut doc: DocumentMut, patch: &Value) -> Result<String, Problem> {
    let fields = patch.as_object().ok_or_else(|| {
        bad("the body must be a JSON object such as {\"classes\": {\"list\": {\"fresh_ttl\": \"30s\"}}}")
    })?;
    if let Some(k) = fields.keys().find(|k| !PATCH_KEYS.contains(&k.as_str())) {
        return Err(bad(format!(
            "`{k}` cannot be changed here: this API changes `classes` (list, view, token) and `breaker`; edit the config file for the rest"
        )));
    }
    for k in ["classes", "breaker"] {
        if fields.get(k).is_some_and(|v| !v.is_object()) {
            return Err(bad(format!("`{k}` must be an object")));
        }
    }
    if let Some(classes) = patch.get("classes").and_then(Value::as_object) {
        for (class, knobs) in classes {
            if !["list", "view", "token"].contains(&class.as_str()) {
                return Err(bad(format!(
                    "classes.{class}: only list, view and token are editable here"
                )));
            }
            let knobs = knobs
                .as_object()
                .ok_or_else(|| bad(format!("classes.{class} must be an object")))?;
            let table = table_at(&mut doc, &["classes", class.as_str()])?;
            for (k, v) in knobs {
                let v = v.as_str().ok_or_else(|| {
                    bad(format!(
                        "classes.{class}.{k} must be a duration string like \"15s\""
                    ))
                })?;
                table.insert(k, value(v));
            }
        }
    }
    if let Some(b) = patch.get("breaker").and_then(Value::as_object) {
        let table = table_at(&mut doc, &["breaker"])?;
        for (k, v) in b {
            let item = match v {
                Value::String(s) => value(s.as_str()),
                Value::Number(n) if n.is_i64() => value(n.as_i64().unwrap_or_default()),
                Value::Number(n) => value(n.as_f64().unwrap_or_default()),
                Value::Bool(x) => value(*x),
                _ => {
                    return Err(bad(format!(
                        "breaker.{k} must be a number, string or boolean"
                    )))
                }
            };
            table.insert(k, item);
        }
    }
    Ok(doc.to_string())
}

/// The `[a.b]` table, created as a real (not inline) table if missing; parents are implicit.
fn table_at<'d>(doc: &'d mut DocumentMut, path: &[&str]) -> Result<&'d mut Table, Problem> {
    let mut t: &mut Table = doc.as_table_mut();
    for (i, key) in path.iter().enumerate() {
        if !t.contains_key(key) {
            let mut new = Table::new();
            new.set_implicit(i + 1 < path.len());
            t.insert(key, Item::Table(new));
        }
        t = t[*key].as_table_mut().ok_or_else(|| {
            bad(format!(
                "`{}` in the config file is not a table",
                path[..=i].join(".")
            ))
        })?;
    }
    Ok(t)
}

async fn save(ctl: &Control, patch: &Value) -> Result<Response<Body>, Problem> {
    let Some(path) = ctl.reload.config_file().cloned() else {
        return Err(bad(
            "this Weir was started without a config file location; start it with --config FILE",
        ));
    };
    let old = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(bad(format!("cannot read {}: {e}", path.display()))),
    };
    let new = apply(&old, patch)?;
    // The same validation as at start-up, so a saved file always starts.
    crate::config::parse_str(&new, &path.display().to_string()).map_err(|e| {
        bad(format!("not saved, the file would be invalid: {e} (line numbers are those of the file as it would be saved)"))
    })?;
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if !old.is_empty() {
            std::fs::write(path.with_extension("toml.bak"), &old)?;
        }
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, &new)?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::Internal,
            format!("cannot write {}: {e}", path.display()),
        )
    })?;
    // Validated above with the same rules, so this only fails if the file changed under us
    // in a way that makes it invalid; the answer then says the save is not in force.
    let applied = ctl
        .reload
        .apply_text(&new, crate::events::SettingsSource::Api)
        .map_err(|e| {
            Problem::new(
                StatusCode::CONFLICT,
                ProblemKind::BadRequest,
                format!("saved, but not put in force: {e}"),
            )
        })?;
    Ok(json(&serde_json::json!({
        "saved": true,
        "applied": true,
        "config_file": path.display().to_string(),
        "restart_required": applied.restart_required,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_comments_and_validates_shape() {
        let text = "# mine\nlisten = \"127.0.0.1:9347\"\n";
        let patch = serde_json::json!({"classes": {"list": {"fresh_ttl": "30s"}}, "breaker": {"minimum_calls": 10},
            "upstreams": [{"name": "copilot-api", "origin": "https://api.githubcopilot.com"}]});
        let out = apply(text, &patch).unwrap();
        assert!(out.starts_with("# mine\n"));
        assert!(out.contains("[classes.list]\nfresh_ttl = \"30s\""), "{out}");
        assert!(out.contains("[breaker]\nminimum_calls = 10"), "{out}");
        let s = crate::config::parse_str(&out, "t").unwrap();
        assert_eq!(
            s.classes.get(RouteClass::List).fresh_ttl,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(s.resilience.breaker.minimum_calls, 10);
        // The table replaces the built-in `copilot-api`; the other built-ins stay.
        assert_eq!(s.upstreams.len(), crate::config::DEFAULT_UPSTREAMS.len());
        assert_eq!(s.upstreams[0].name, "copilot-api");
        let running = crate::config::Settings::default().upstreams;
        assert!(
            guard_routing(&serde_json::json!({"upstreams": [{"name": ""}]}), &running).is_err()
        );
    }

    /// A body that is not an object, a key this API does not change, or a knob table that is
    /// not a table is refused (each was answered "saved, applied" with nothing changed).
    #[test]
    fn a_patch_it_would_ignore_is_refused() {
        let text = "listen = \"127.0.0.1:9347\"\n";
        for (patch, says) in [
            (serde_json::json!([1, 2]), "must be a JSON object"),
            (serde_json::json!(null), "must be a JSON object"),
            (
                serde_json::json!({"bogus_key": 5}),
                "`bogus_key` cannot be changed here",
            ),
            (
                serde_json::json!({"limits": {"max_body_bytes": 1}}),
                "`limits` cannot",
            ),
            (
                serde_json::json!({"breaker": 5}),
                "`breaker` must be an object",
            ),
            (
                serde_json::json!({"classes": "fast"}),
                "`classes` must be an object",
            ),
        ] {
            let e = apply(text, &patch).expect_err(&patch.to_string());
            assert_eq!(e.status, 422, "{patch}");
            assert!(e.detail.contains(says), "{patch}: {}", e.detail);
        }
        assert!(
            apply(text, &serde_json::json!({})).is_ok(),
            "an empty patch is no change"
        );
    }

    /// Issue 31, item 4: a file that names fewer `[[upstream]]` tables than run (one table
    /// overriding a built-in) keeps every key of them through a PUT that repeats the running
    /// upstreams: `connect_to` and `ca_file` were dropped when the tables were rewritten.
    #[test]
    fn a_put_keeps_every_upstream_key_it_does_not_change() {
        let text = "[[upstream]]\nname = \"copilot-api\"\norigin = \"https://api.githubcopilot.com\"\nconnect_to = \"10.0.0.7:443\"\nca_file = \"/etc/corp-ca.pem\" # corp\n";
        let running = crate::config::Settings::default().upstreams;
        let ups: Vec<Value> = running
            .iter()
            .map(|u| serde_json::json!({"name": u.name, "origin": u.origin.to_string()}))
            .collect();
        assert!(ups.len() > 1, "the file names fewer tables than run");
        let patch = serde_json::json!({"upstreams": ups, "breaker": {"minimum_calls": 12}});
        guard_routing(&patch, &running).unwrap();
        let out = apply(text, &patch).unwrap();
        assert!(out.starts_with(text), "{out}");
        assert!(out.contains("[breaker]\nminimum_calls = 12"), "{out}");
        assert_eq!(out.matches("[[upstream]]").count(), 1, "{out}");
    }
}
