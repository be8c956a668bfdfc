//! A developer's hour (#20): one account, VS Code's cloud-sessions provider and `gh agent-task`
//! polling as their sources do ([`clients`]), at 10× speed, against the lab upstream answering
//! in the real shapes; healthy and with the Oct 29 profile (2 % 5xx, 1.2 s), direct and through
//! Weir, every row at once (one run, side by side).
//!
//! The hour (simulated): two tasks already running at the start (done at minutes 20 and 40), a
//! history of ten finished ones; VS Code open all hour; `gh agent-task list` every minute;
//! `gh agent-task view --log --follow` on the longer task from minute 2; three tasks delegated
//! from VS Code at minutes 10, 30 and 50 (each runs 20 minutes). The newer traffic (issue #29,
//! item 7): two live turns of VS Code's Task API backend at minutes 15 and 45, 6 minutes each
//! (an event every 2 s: the events grow from one page to two), followed by [`turn`]; and one
//! local agent session mirrored to Mission Control all hour ([`mission`]: events every 500 ms,
//! commands every 3 s, one command typed on github.com every 5 minutes).
//!
//! Two lab upstreams: the agent API host (sessions, jobs, Mission Control) and api.github.com
//! (Weir's `github-api`: the token and `copilot_internal/user`, the Task API, and `GET /user`,
//! which VS Code's Task API backend asks before each of its task lists and Weir asks to
//! resolve a credential). Weir's own calls are counted apart (issue #29, item 8: every call
//! Weir makes for itself must be paid for by a saving).
//!
//! Everything that has a time is divided by the speed: the clients' intervals, the upstream's
//! latency and token lifetimes, and Weir's class timings and breaker window (its config below),
//! so each row is the real hour played fast. Durations in the report are simulated.

pub mod clients;
pub mod mission;
pub mod tally;
pub mod turn;

use super::LabConfig;
use crate::client::LabClient;
use crate::report::{ms, num, times, Section, Table};
use crate::upstream::{SessionTiming, Upstream, UpstreamSpec};
use crate::weir_ctl::{lab_config, Caching, LabWeir};
use crate::LabError;
use clients::{Desk, VsCode};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tally::{SurfaceSummary, Tally};
use tokio::time::Instant;

/// Simulated seconds per wall second.
pub const SPEED: f64 = 10.0;

/// Whether the Oct 29 profile's 2 % 5xx also fails Mission Control. The Task API is served by
/// the same agents backend as the sessions (issue #29), so it is always affected; Mission
/// Control's backend is known from no public source. Its calls go to the same host and under
/// the same `/agents/sessions` path as the agent-sessions service, so the lab assumes it shares
/// that service's fate (the harder case for Weir, which must then never lose or double an
/// event). Latency applies to it either way.
pub const MISSION_CONTROL_IN_OCT29: bool = true;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Profile {
    Healthy,
    Oct29,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Via {
    Direct,
    /// Weir as shipped (its timings scaled).
    Weir,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub profile: Profile,
    pub via: Via,
    /// Upstream requests per route (the upstream's own count).
    pub upstream: BTreeMap<String, u64>,
    pub upstream_total: u64,
    pub surfaces: Vec<SurfaceSummary>,
    pub failures: u64,
    pub stopped_following: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Age of the session data VS Code got (simulated ms).
    pub age_p50_ms: f64,
    pub age_p99_ms: f64,
    pub intended: u64,
    pub accepted: u64,
    /// Intended tasks with a session upstream after the grace period.
    pub made: u64,
    pub lost: u64,
    pub doubled: u64,
    /// Age of the Task API task data VS Code got during its live turns (simulated ms).
    pub task_age_p50_ms: f64,
    pub task_age_p99_ms: f64,
    /// Events of the live turns VS Code never got before it stopped following (the upstream's
    /// final count − the distinct events it saw).
    pub turn_events_missed: u64,
    pub mirror: MirrorRow,
    /// Calls Weir sent for itself (`User-Agent: weir/…`; in `upstream_total` too).
    pub weir_own: u64,
}

impl Row {
    /// Requests the tools sent in this row (to Weir, or direct to the upstream).
    pub fn tools_sent(&self) -> u64 {
        self.surfaces.iter().map(|s| s.requests).sum()
    }

    /// What Weir saved the upstream of the tools' own traffic in this row: the requests they
    /// sent it minus the calls it sent upstream for them (its own calls left out: they are
    /// what the saving pays for). Measured on the row itself, not against the direct row,
    /// whose tools do not send exactly the same requests (a session followed a poll longer).
    pub fn saved(&self) -> i64 {
        self.tools_sent() as i64 - (self.upstream_total - self.weir_own) as i64
    }
}

/// Mission Control's events and commands in one row (see [`tally::MirrorTally`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MirrorRow {
    /// Distinct event ids the client sent, and event sends in all (resends included).
    pub events: u64,
    pub event_sends: u64,
    /// Failed batches the client put back and sent again (its own behaviour).
    pub batches_resent: u64,
    /// Events the upstream received more than once, each explained by the client's own
    /// resends (a batch applied, then answered 504, then sent again).
    pub doubled_by_client: u64,
    /// Events acknowledged to the client (2xx) that never reached the upstream.
    pub lost_by_weir: u64,
    /// Events the upstream received more often than the client sent them.
    pub doubled_by_weir: u64,
    /// Events the client sent that never reached the upstream (acknowledged or not: in flight
    /// when the hour ended, or dropped by the client).
    pub never_arrived: u64,
    pub commands_run: u64,
    pub commands_run_twice: u64,
}

fn spec(profile: Profile, seed: u64) -> UpstreamSpec {
    let scale = |real_ms: u64| (real_ms as f64 / SPEED).round() as u64;
    let (latency, failures) = match profile {
        // A healthy agent API answers in ~150 ms.
        Profile::Healthy => (scale(150), 0.0),
        Profile::Oct29 => (scale(1200), 0.02),
    };
    UpstreamSpec {
        latency_ms: latency,
        token_latency_ms: latency,
        failure_rate: failures,
        list_body_bytes: 1024,
        token_refresh_in_s: 150,
        token_expires_in_s: 180,
        rate_limit: None,
        seed,
        session_timing: task_timing(20 * 60),
        mission_control_faults: profile == Profile::Healthy || MISSION_CONTROL_IN_OCT29,
        api_origin: None,
    }
}

fn task_timing(run_s: u64) -> SessionTiming {
    let s = |secs: u64| (secs as f64 * 1000.0 / SPEED) as u64;
    SessionTiming {
        queued_ms: s(20),
        pr_after_ms: s(15),
        run_ms: s(run_s),
        log_every_ms: s(15),
    }
}

/// Weir's shipped class timings and breaker window, divided by [`SPEED`] (the token's
/// `token_margin` is the shipped 5 minutes: with the 60 s it had before, VS Code fetched the
/// token, and `copilot_internal/user` beside it, twice as often through Weir, issue #29 item 8). The per-client rate
/// limit is off: at 10× speed one developer sends what ten would.
pub fn weir_toml(origin: &str, github: &str) -> String {
    let mut extra = String::from(crate::weir_ctl::NO_RATE_LIMIT);
    extra.push_str(
        "[breaker]\nwindow = \"3s\"\nslow_floor = \"100ms\"\n\
         [retry]\nbase = \"10ms\"\ncap = \"200ms\"\n\
         [classes.list]\nfresh_ttl = \"1500ms\"\nstale_while_revalidate = \"6s\"\nrevalidate_wait = \"25ms\"\ndegraded_refresh = \"12s\"\n\
         per_try_timeout = \"1s\"\ndeadline = \"2s\"\nslow_call = \"500ms\"\n\
         [classes.view]\nfresh_ttl = \"300ms\"\nstale_while_revalidate = \"3s\"\nrevalidate_wait = \"25ms\"\ndegraded_refresh = \"12s\"\n\
         per_try_timeout = \"1s\"\ndeadline = \"2s\"\nslow_call = \"500ms\"\n\
         [classes.token]\ntoken_margin = \"30s\"\nper_try_timeout = \"500ms\"\ndeadline = \"1s\"\nslow_call = \"300ms\"\n\
         [classes.stream]\nfresh_ttl = \"300ms\"\nstale_while_revalidate = \"3s\"\nrevalidate_wait = \"25ms\"\ndegraded_refresh = \"12s\"\n\
         per_try_timeout = \"3s\"\ndeadline = \"3s\"\nslow_call = \"1s\"\n\
         [classes.create]\nper_try_timeout = \"3s\"\ndeadline = \"3s\"\nslow_call = \"1s\"\n\
         [classes.other]\nper_try_timeout = \"3s\"\ndeadline = \"6s\"\nslow_call = \"1s\"\n\
         [network]\ndetect_os = false\n",
    );
    extra.push_str(&format!(
        "\n[[upstream]]\nname = \"github-api\"\norigin = \"{github}\"\n"
    ));
    // No GitHub Status watcher: the lab never leaves loopback.
    lab_config(origin, Caching::Default, &extra).replacen(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n",
        1,
    )
}

/// One row: the hour against a fresh upstream (and a fresh Weir).
pub async fn run_row(
    profile: Profile,
    via: Via,
    wall: Duration,
    seed: u64,
) -> Result<Row, LabError> {
    let up = Upstream::start(spec(profile, seed)).await?;
    // api.github.com: as the agents backend, healthy or Oct 29 (the Task API is served by it).
    let gh = Upstream::start(UpstreamSpec {
        api_origin: Some(up.origin()),
        ..spec(profile, seed)
    })
    .await?;
    let world = &up.counters().world;
    let long_ago = Duration::from_secs(3600);
    for i in 0..10 {
        world.add(&format!("finished task {i}"), long_ago, task_timing(600));
    }
    let ago = |sim_s: f64| Duration::from_secs_f64(sim_s / SPEED);
    world.add("running task A", ago(5.0 * 60.0), task_timing(25 * 60));
    let (following, _) = world.add("running task B", ago(10.0 * 60.0), task_timing(50 * 60));
    up.counters()
        .mirror
        .issue_commands_every(Duration::from_secs_f64(300.0 / SPEED));

    let weir = match via {
        Via::Direct => None,
        Via::Weir => Some(LabWeir::start_with(&weir_toml(&up.origin(), &gh.origin())).await?),
    };
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let hour = wall.as_secs_f64() * SPEED;
    // Two live Task API turns at a quarter and three quarters of the hour, each a tenth of it
    // long (6 minutes in the hour), an event every 2 s; one Mission Control command every 5
    // minutes.
    let turn_len = hour / 10.0;
    let turns: Vec<(f64, String)> = [hour / 4.0, hour * 3.0 / 4.0]
        .iter()
        .enumerate()
        .map(|(k, &at)| {
            let id = gh.counters().tasks.add(
                &format!("devhour turn {k}"),
                Duration::from_secs_f64(at / SPEED),
                Duration::from_secs_f64(turn_len / SPEED),
                Duration::from_secs_f64(2.0 / SPEED),
            );
            (at, id)
        })
        .collect();
    let desk = Desk {
        client: LabClient::new(weir.as_ref().map(|w| w.addr())),
        api: up.origin(),
        github: gh.origin(),
        speed: SPEED,
        tally: tally.clone(),
        end: start + wall,
    };
    let vscode = VsCode::new(desk.clone());
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(vscode.clone().token());
    tasks.spawn(vscode.clone().task_lists());
    tasks.spawn(vscode.clone().lists());
    tasks.spawn(vscode.clone().poller());
    tasks.spawn(clients::gh_list(desk.clone()));
    tasks.spawn(mission::mirror(desk.clone()));
    for (at, id) in &turns {
        let (d, at, id) = (desk.clone(), *at, id.clone());
        tasks.spawn(async move {
            if clients::at(&d, start, at).await {
                turn::follow(d, id).await;
            }
        });
    }
    {
        let d = desk.clone();
        tasks.spawn(async move {
            if clients::at(&d, start, 120.0).await {
                clients::gh_follow(d, following).await;
            }
        });
    }
    let statements: Vec<String> = (0..3).map(|k| format!("devhour task {k}")).collect();
    for (k, s) in statements.iter().enumerate() {
        let (d, v, s) = (desk.clone(), vscode.clone(), s.clone());
        let when = hour * (1.0 + 2.0 * k as f64) / 6.0;
        tasks.spawn(async move {
            if clients::at(&d, start, when).await {
                v.create(s).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}

    // Queued creates are replayed after the hour: give them time to land.
    let made = |up: &Upstream| {
        let m = up.counters().creates();
        statements.iter().filter(|s| m.contains_key(*s)).count() as u64
    };
    let intended = tally.creates().intended;
    let grace = Instant::now() + Duration::from_secs(20);
    while Instant::now() < grace && made(&up) < intended {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if let Some(w) = weir {
        w.stop().await;
    }
    let creates = up.counters().creates();
    let mut upstream: BTreeMap<String, u64> = BTreeMap::new();
    for (k, v) in up
        .counters()
        .by_route()
        .into_iter()
        .chain(gh.counters().by_route())
    {
        *upstream.entry(k.to_string()).or_default() += v;
    }
    let weir_own = up.counters().weir_own() + gh.counters().weir_own();
    let surfaces = tally.surfaces();
    let stops = tally.stops();
    let lat = tally.all_latency();
    let age = tally.staleness();
    let c = tally.creates();
    let made_n = made(&up);
    let task_age = tally.task_staleness();
    let seen = tally.turn_events();
    let turn_events_missed = turns
        .iter()
        .map(|(_, id)| {
            let total = gh.counters().tasks.total(id) as u64;
            total.saturating_sub(seen.get(id).copied().unwrap_or(0) as u64)
        })
        .sum();
    let mirror = mirror_row(&tally.mirror_tally(), &up.counters().mirror.received());
    up.stop();
    gh.stop();
    Ok(Row {
        profile,
        via,
        upstream_total: upstream.values().sum(),
        upstream,
        failures: surfaces.iter().map(|s| s.failures).sum::<u64>()
            + stops
            + mirror.commands_run_twice
            + mirror.lost_by_weir
            + mirror.doubled_by_weir,
        surfaces,
        stopped_following: stops,
        p50_ms: lat.p50_ms,
        p99_ms: lat.p99_ms,
        age_p50_ms: age.p50_ms,
        age_p99_ms: age.p99_ms,
        intended: c.intended,
        accepted: c.accepted,
        made: made_n,
        lost: c.intended.saturating_sub(made_n),
        doubled: statements
            .iter()
            .filter(|s| creates.get(*s).is_some_and(|n| *n > 1))
            .count() as u64,
        task_age_p50_ms: task_age.p50_ms,
        task_age_p99_ms: task_age.p99_ms,
        turn_events_missed,
        mirror,
        weir_own,
    })
}

/// What became of the mirrored session's events, from the client's sends and the upstream's
/// receipts.
fn mirror_row(m: &tally::MirrorTally, received: &BTreeMap<String, u32>) -> MirrorRow {
    let got = |id: &str| received.get(id).copied().unwrap_or(0);
    MirrorRow {
        events: m.sent.len() as u64,
        event_sends: m.sent.values().map(|n| u64::from(*n)).sum(),
        batches_resent: m.batches_resent,
        doubled_by_client: m
            .sent
            .iter()
            .filter(|(id, n)| got(id) > 1 && got(id) <= **n)
            .count() as u64,
        lost_by_weir: m.acked.iter().filter(|id| got(id) == 0).count() as u64,
        doubled_by_weir: received
            .iter()
            .filter(|(id, n)| **n > m.sent.get(*id).copied().unwrap_or(0))
            .count() as u64,
        never_arrived: m.sent.keys().filter(|id| got(id) == 0).count() as u64,
        commands_run: m.runs.len() as u64,
        commands_run_twice: m.runs.values().filter(|n| **n > 1).count() as u64,
    }
}

/// Every row at once: {healthy, Oct 29} × {direct, through Weir}.
pub async fn run_rows(wall: Duration, seed: u64) -> Result<Vec<Row>, LabError> {
    let mut set = tokio::task::JoinSet::new();
    let mut order = Vec::new();
    for profile in [Profile::Healthy, Profile::Oct29] {
        for via in [Via::Direct, Via::Weir] {
            order.push((profile, via));
            set.spawn(run_row(profile, via, wall, seed));
        }
    }
    let mut rows = Vec::new();
    while let Some(r) = set.join_next().await {
        rows.push(r.map_err(|e| LabError::Settings(format!("a devhour row panicked: {e}")))??);
    }
    rows.sort_by_key(|r| order.iter().position(|o| *o == (r.profile, r.via)));
    Ok(rows)
}

pub async fn run(cfg: &LabConfig) -> Result<Vec<Section>, LabError> {
    let wall = Duration::from_secs(cfg.seconds);
    eprintln!(
        "devhour: {:.0} simulated minutes at {SPEED}× ({} s), 4 rows at once",
        cfg.seconds as f64 * SPEED / 60.0,
        cfg.seconds
    );
    let rows = run_rows(wall, cfg.seed).await?;
    Ok(sections(cfg, &rows))
}

fn label(r: &Row) -> String {
    let p = match r.profile {
        Profile::Healthy => "healthy",
        Profile::Oct29 => "Oct 29",
    };
    let v = match r.via {
        Via::Direct => "direct",
        Via::Weir => "through Weir",
    };
    format!("{p}, {v}")
}

pub fn sections(cfg: &LabConfig, rows: &[Row]) -> Vec<Section> {
    let direct = |p: Profile| {
        rows.iter()
            .find(|r| r.profile == p && r.via == Via::Direct)
            .map(|r| r.upstream_total)
            .unwrap_or(0)
    };
    let routes = [
        "list",
        "session",
        "logs",
        "job",
        "token",
        "create",
        "task",
        "task events",
        "mc events",
        "mc commands",
        "task list",
        "user",
        "copilot user",
        "weir user",
    ];
    let mut head = vec![
        "row",
        "upstream calls",
        "fewer than direct",
        "tools' requests",
        "Weir's own calls / saved",
    ];
    head.extend(routes);
    head.extend([
        "other",
        "client-visible failures",
        "of which stopped following",
        "p50",
        "p99",
        "session data age p50 / p99",
        "creates intended / accepted / made / lost / doubled",
    ]);
    let mut table = Table::new(&head);
    for r in rows {
        let d = direct(r.profile);
        let mut row = vec![
            label(r),
            r.upstream_total.to_string(),
            if r.upstream_total == 0 {
                "-".into()
            } else {
                times(d as f64 / r.upstream_total as f64)
            },
            r.tools_sent().to_string(),
            match r.via {
                Via::Weir => format!("{} / {}", r.weir_own, r.saved()),
                Via::Direct => "-".into(),
            },
        ];
        let mut other = r.upstream_total;
        for k in routes {
            let n = r.upstream.get(k).copied().unwrap_or(0);
            other -= n;
            row.push(n.to_string());
        }
        row.push(other.to_string());
        row.push(r.failures.to_string());
        row.push(r.stopped_following.to_string());
        row.push(ms(r.p50_ms));
        row.push(ms(r.p99_ms));
        row.push(format!("{} / {}", ms(r.age_p50_ms), ms(r.age_p99_ms)));
        row.push(format!(
            "{} / {} / {} / {} / {}",
            r.intended, r.accepted, r.made, r.lost, r.doubled
        ));
        table.push(row);
    }
    let mut newer = Table::new(&[
        "row",
        "task turn events missed",
        "task data age p50 / p99",
        "mc events sent / sends",
        "mc batches resent by the client",
        "mc events received twice after the client's resend",
        "mc events lost / doubled by Weir",
        "mc events never arrived",
        "mc commands run / run twice",
    ]);
    for r in rows {
        let m = &r.mirror;
        newer.push(vec![
            label(r),
            r.turn_events_missed.to_string(),
            format!("{} / {}", ms(r.task_age_p50_ms), ms(r.task_age_p99_ms)),
            format!("{} / {}", m.events, m.event_sends),
            m.batches_resent.to_string(),
            m.doubled_by_client.to_string(),
            format!("{} / {}", m.lost_by_weir, m.doubled_by_weir),
            m.never_arrived.to_string(),
            format!("{} / {}", m.commands_run, m.commands_run_twice),
        ]);
    }
    let mut by_surface = Table::new(&[
        "row",
        "surface",
        "requests",
        "failures",
        "absorbed failures",
        "p50",
        "p99",
    ]);
    for r in rows {
        for s in &r.surfaces {
            by_surface.push(vec![
                label(r),
                s.surface.clone(),
                s.requests.to_string(),
                s.failures.to_string(),
                s.absorbed.to_string(),
                ms(s.latency.p50_ms),
                ms(s.latency.p99_ms),
            ]);
        }
    }
    let minutes = num(cfg.seconds as f64 * SPEED / 60.0);
    vec![
        Section {
            key: "devhour".into(),
            title: format!("devhour: one developer, {minutes} simulated minutes at {SPEED}×"),
            intro: "One account: VS Code's cloud-sessions provider (each running session every 5 s, the list at \
                    start and every 5 min, the job every 2 s for up to 30 s after a create, the token ahead of \
                    its expiry) and `gh agent-task` (`list` every minute, `view --log --follow` from minute 2), \
                    three creates from VS Code, real request shapes (see `scenarios/devhour/clients.rs` for the \
                    sources). Oct 29 = 2 % 5xx (half before the work, half after), 1.2 s per call. All four rows \
                    run at once. Times are simulated (wall × 10). A failure is what the person would see: an \
                    error printed (gh), an empty view, a create refused, a job never showing its pull request, \
                    or a running session VS Code silently stopped following after one failed poll. \
                    The newer traffic (issue #29): two live turns of VS Code's Task API backend (the task and \
                    every events page every 2 s, `scenarios/devhour/turn.rs`; a turn ended by 15 failed gets \
                    is a failure) and one local session mirrored to Mission Control all hour (events every \
                    500 ms, commands every 3 s, `scenarios/devhour/mission.rs`; a command run twice, or an \
                    event lost or doubled by Weir, is a failure). Oct 29 fails the Task API like the \
                    sessions; Mission Control too (`MISSION_CONTROL_IN_OCT29`). \
                    On api.github.com (a second lab upstream, Weir's `github-api`): VS Code's token with \
                    `copilot_internal/user` beside each fetch, its Task API list at start and every 5 min \
                    with `GET /user` before it, and the Task API turns. Weir's own calls (its `GET /user`, \
                    `User-Agent: weir/…`) are counted apart (`weir user`), next to what Weir saved in the \
                    same row: the tools' requests minus the calls Weir sent upstream for them."
                .into(),
            table,
            series: vec![],
            notes: vec![],
        },
        Section {
            key: "devhour-newer".into(),
            title: "devhour: the Task API turns and Mission Control".into(),
            intro: "Events VS Code never got from its live turns; how old the task data was; what became of \
                    the mirrored session's events (the client's own resends after a failed batch counted apart \
                    from what Weir did); commands run, and run twice."
                .into(),
            table: newer,
            series: vec![],
            notes: vec![],
        },
        Section {
            key: "devhour-surfaces".into(),
            title: "devhour: by surface".into(),
            intro: "Requests each tool sent (to Weir or to the upstream), the failures it showed, and the failed \
                    answers it absorbed without showing them (a batch sent again, a poll read as empty, a \
                    failed get short of the 15 that end a turn)."
                .into(),
            table: by_surface,
            series: vec![],
            notes: vec![],
        },
    ]
}
