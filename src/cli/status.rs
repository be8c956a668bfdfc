//! `weir status`: the running Weir's state at a glance, for a box with no tray and no browser
//! (an SSH remote, a dev container): its mode, each upstream's breaker (and any route family's
//! that is not closed), the queue, the cache, what it saved, interception and tunnels. It reads
//! the public `/_weir/api/status` (no secret), into [`Glance`]: the fields it prints, typed, from
//! the document `weir::status::StatusSnapshot` writes (`tests/cli_status.rs` reads a running
//! engine's real answer). `--json` prints the whole document as Weir sent it.

use super::serve::load_with_base;
use super::ServeArgs;
use http::Request;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};
use weir::view::ModeKind;
use weir_resilience::State;
use weir_store::StateCounts;

/// What `weir status` prints, read from the status document.
#[derive(Debug, Deserialize)]
pub struct Glance {
    pub version: String,
    pub listen: String,
    pub dashboard: String,
    pub mode: ModeGlance,
    pub upstreams: Vec<UpstreamGlance>,
    pub queue: QueueGlance,
    pub cache: CacheGlance,
    pub saved: SavedGlance,
    pub interception: Option<InterceptionGlance>,
    pub tunnels: u64,
    pub tunnel_bytes: TunnelBytesGlance,
}

#[derive(Debug, Deserialize)]
pub struct ModeGlance {
    pub mode: ModeKind,
    pub reason: String,
}

#[derive(Debug, Deserialize)]
pub struct UpstreamGlance {
    pub name: String,
    pub breaker: BreakerGlance,
    #[serde(default)]
    pub families: Vec<FamilyGlance>,
}

#[derive(Debug, Deserialize)]
pub struct BreakerGlance {
    pub state: State,
    pub since: String,
    pub reason: String,
    pub retry_after_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct FamilyGlance {
    pub family: String,
    pub breaker: BreakerGlance,
}

#[derive(Debug, Deserialize)]
pub struct QueueGlance {
    pub available: bool,
    pub error: Option<String>,
    #[serde(flatten)]
    pub counts: Option<StateCounts>,
}

#[derive(Debug, Deserialize)]
pub struct CacheGlance {
    pub entries: u64,
    pub bytes: u64,
}

#[derive(Debug, Deserialize)]
pub struct SavedGlance {
    pub window_secs: u64,
    pub upstream_calls_avoided: u64,
    pub failures_hidden: u64,
    pub creates_kept: u64,
}

#[derive(Debug, Deserialize)]
pub struct InterceptionGlance {
    pub connections: u64,
    pub leaves_issued: u64,
    pub handshake_failures: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
pub struct TunnelBytesGlance {
    pub up: u64,
    pub down: u64,
}

pub fn run(json: bool, args: ServeArgs) -> ExitCode {
    let base = match load_with_base(&args) {
        Ok((_, base)) => base,
        Err(code) => return code,
    };
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        eprintln!("weir: cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    let body = match rt.block_on(fetch(&base)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "weir: cannot reach Weir at {base} ({e}). Is `weir serve` or the tray running?"
            );
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!("{}", String::from_utf8_lossy(&body));
        return ExitCode::SUCCESS;
    }
    match serde_json::from_slice::<Glance>(&body) {
        Ok(g) => {
            print!("{}", render(&g));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weir: the program at {base} answered a status this weir cannot read ({e}); is it another version of Weir? `weir status --json` prints it as sent");
            ExitCode::FAILURE
        }
    }
}

async fn fetch(base: &str) -> Result<bytes::Bytes, String> {
    let mut req = Request::new(weir::http_client::empty());
    *req.uri_mut() = format!("{base}/_weir/api/status")
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    let t = Timeouts {
        headers: Duration::from_secs(10),
        body: Duration::from_secs(10),
    };
    let resp = UpstreamClient::new()
        .fetch(req, t, 8 << 20)
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("it answered {}", resp.status()));
    }
    Ok(resp.into_body())
}

/// The glance as lines, a label column then the facts.
pub fn render(g: &Glance) -> String {
    let mut out = String::new();
    let mut line = |label: &str, text: String| {
        out.push_str(&format!("{label:<13}{text}\n"));
    };
    line(
        "weir",
        format!(
            "{} at http://{}, dashboard {}",
            g.version, g.listen, g.dashboard
        ),
    );
    line(
        "mode",
        format!("{}: {}", mode_name(g.mode.mode), g.mode.reason),
    );
    for (i, u) in g.upstreams.iter().enumerate() {
        let label = if i == 0 { "upstreams" } else { "" };
        line(label, format!("{}: {}", u.name, breaker(&u.breaker)));
        for f in u
            .families
            .iter()
            .filter(|f| f.breaker.state != State::Closed)
        {
            line(
                "",
                format!("  {} family: {}", f.family, breaker(&f.breaker)),
            );
        }
    }
    line("queue", queue(&g.queue));
    line(
        "cache",
        format!("{} entries, {}", g.cache.entries, bytes(g.cache.bytes)),
    );
    line(
        "saved",
        format!(
            "in the last {}: {} upstream calls avoided, {} failures hidden, {} creates kept",
            window(g.saved.window_secs),
            g.saved.upstream_calls_avoided,
            g.saved.failures_hidden,
            g.saved.creates_kept
        ),
    );
    line(
        "interception",
        match &g.interception {
            None => "off".to_string(),
            Some(i) => {
                let failed: Vec<String> = i
                    .handshake_failures
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(cause, n)| format!("{cause} {n}"))
                    .collect();
                format!(
                    "{} connections, {} leaves issued; handshake failures: {}",
                    i.connections,
                    i.leaves_issued,
                    if failed.is_empty() {
                        "none".to_string()
                    } else {
                        failed.join(", ")
                    }
                )
            }
        },
    );
    line(
        "tunnels",
        format!(
            "{}, {} up, {} down",
            g.tunnels,
            bytes(g.tunnel_bytes.up),
            bytes(g.tunnel_bytes.down)
        ),
    );
    out
}

fn window(secs: u64) -> String {
    if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs / 60)
    }
}

fn mode_name(m: ModeKind) -> &'static str {
    match m {
        ModeKind::Automatic => "automatic",
        ModeKind::Offline => "offline",
        ModeKind::CacheOnly => "cache only",
        ModeKind::PassThrough => "pass-through",
    }
}

fn breaker(b: &BreakerGlance) -> String {
    let state = match b.state {
        State::Closed => "closed",
        State::Degraded => "degraded",
        State::Open => "open",
        State::HalfOpen => "half open",
    };
    let mut s = format!("{state} since {}", b.since);
    if b.state != State::Closed && !b.reason.is_empty() {
        s.push_str(&format!(" ({})", b.reason));
    }
    if let Some(wait) = b.retry_after_s.filter(|_| b.state == State::Open) {
        s.push_str(&format!("; probes in {wait:.0} s"));
    }
    s
}

fn queue(q: &QueueGlance) -> String {
    if !q.available {
        return format!(
            "unavailable: {}",
            q.error.as_deref().unwrap_or("no reason given")
        );
    }
    match &q.counts {
        None => "available, empty".to_string(),
        Some(c) => format!(
            "{} queued, {} replaying, {} in doubt, {} failed, {} done",
            c.queued, c.replaying, c.in_doubt, c.failed, c.done
        ),
    }
}

fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let n = n as f64;
    if n < KIB {
        format!("{n} B")
    } else if n < KIB * KIB {
        format!("{:.1} KiB", n / KIB)
    } else if n < KIB * KIB * KIB {
        format!("{:.1} MiB", n / (KIB * KIB))
    } else {
        format!("{:.1} GiB", n / (KIB * KIB * KIB))
    }
}
