//! The developer's-hour scenario, shortened (4 simulated minutes at 10×): it runs all four rows
//! at once and its tallies add up. Counts only, never times. With the newer traffic (issue #29):
//! the Task API turns and the Mission Control mirror.

use std::time::Duration;
use weir_lab::scenarios::devhour::{run_rows, Profile, Row, Via};

/// Requests the tools sent on `surface` (to Weir or to the upstream).
fn sent(r: &Row, surface: &str) -> u64 {
    r.surfaces
        .iter()
        .find(|s| s.surface == surface)
        .map_or(0, |s| s.requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_developer_hour_adds_up() {
    let rows = run_rows(Duration::from_secs(24), 1).await.expect("rows");
    assert_eq!(rows.len(), 4);
    let row = |p: Profile, v: Via| rows.iter().find(|r| r.profile == p && r.via == v).unwrap();
    for r in &rows {
        assert_eq!(r.intended, 3, "{r:?}");
        // The upstream saw what the tools asked for: sessions, lists, a token, creates.
        for route in [
            "list",
            "session",
            "token",
            "create",
            "logs",
            "task",
            "task events",
            "mc session",
            "mc events",
            "mc commands",
            "user",
            "copilot user",
            "task list",
        ] {
            assert!(
                r.upstream.get(route).copied().unwrap_or(0) > 0,
                "{route}: {r:?}"
            );
        }
        assert_eq!(r.upstream_total, r.upstream.values().sum::<u64>(), "{r:?}");
    }
    {
        let v = Via::Weir;
        for p in [Profile::Healthy, Profile::Oct29] {
            let r = row(p, v);
            assert_eq!((r.lost, r.doubled), (0, 0), "{r:?}");
            // A Task API turn never ends without its last events (`task_events`).
            assert_eq!(r.turn_events_missed, 0, "{r:?}");
            // Mission Control passes through: Weir never loses an acknowledged event, never
            // sends one more often than the client did, never sends more batches than the
            // client sent it. (A failed commands poll, a read, Weir may try again: that spares
            // the client the `[]` that empties its processed-command set.)
            let m = &r.mirror;
            assert_eq!((m.lost_by_weir, m.doubled_by_weir), (0, 0), "{r:?}");
            assert!(m.events > 0, "{r:?}");
            assert!(r.upstream["mc events"] <= sent(r, "mc events"), "{r:?}");
        }
        // Healthy: never more upstream calls than direct, and nothing the person would see.
        let (h, d) = (row(Profile::Healthy, v), row(Profile::Healthy, Via::Direct));
        assert!(
            h.upstream_total <= d.upstream_total,
            "{} > {}",
            h.upstream_total,
            d.upstream_total
        );
        assert_eq!(h.failures, 0, "{h:?}");
        // Healthy: every Mission Control call reaches the upstream once (never cached), and
        // a cached task poll reaches it at most once per fresh window (a Task API view's
        // `fresh_ttl`: a third of the lab's view 300 ms on the wall clock, under the
        // streamer's 2 s poll / 10, so that the data is never a poll old) of each live turn (a
        // tenth of the run each), never more often than VS Code's own polls direct.
        assert_eq!(h.upstream["mc events"], sent(h, "mc events"), "{h:?}");
        assert_eq!(h.upstream["mc commands"], sent(h, "mc commands"), "{h:?}");
        let turn_wall = 24.0 / 10.0;
        let windows = (turn_wall / 0.1_f64).ceil() as u64 + 1;
        assert!(h.upstream["task"] <= 2 * windows, "{h:?}");
        assert!(h.upstream["task"] <= sent(h, "vscode task"), "{h:?}");
        // The events pages: one call per poll at most, and one more each time a turn moves
        // (starts or ends), fetched after the task's answer (`task_events`): two turns.
        assert!(
            h.upstream["task events"] <= sent(h, "vscode task events") + 2 * 2,
            "{h:?}"
        );
    }
    // Weir's own calls (its `GET /user`, issue #29 item 8) are paid for by what it saved, in
    // both profiles. VS Code asks `/user` itself: Weir reads that answer, so at most gh's
    // credential (which never asks) and VS Code's (if another of its calls came first) are
    // resolved by a call of Weir's; never more than one each. Direct, Weir sends nothing.
    for p in [Profile::Healthy, Profile::Oct29] {
        let (w, d) = (row(p, Via::Weir), row(p, Via::Direct));
        assert_eq!(d.weir_own, 0, "{d:?}");
        assert!(w.weir_own <= 2, "{w:?}");
        assert_eq!(
            w.weir_own,
            w.upstream.get("weir user").copied().unwrap_or(0)
        );
        assert!(
            w.weir_own as i64 <= w.saved(),
            "{} own > {} saved",
            w.weir_own,
            w.saved()
        );
        assert_eq!(
            d.saved(),
            0,
            "direct, every request is an upstream call: {d:?}"
        );
        // VS Code comes back for its token (and `copilot_internal/user` beside it) no more
        // often through Weir than direct (a run longer than a token's life shows it). On Oct
        // 29 Weir may retry a failed one: healthy only, for the upstream's count.
        assert!(sent(w, "vscode token") <= sent(d, "vscode token"), "{w:?}");
        if p == Profile::Healthy {
            assert!(
                w.upstream["copilot user"] <= d.upstream["copilot user"],
                "{w:?}"
            );
        }
        // The client's own `/user` calls reach the upstream at most as often as it sends them.
        assert!(w.upstream["user"] <= sent(w, "vscode user"), "{w:?}");
    }
    // Oct 29: Weir sends fewer calls than the tools send direct, the logs polls included (the
    // lab answers them as a whole document, so Weir caches them like a session).
    let (w, d) = (
        row(Profile::Oct29, Via::Weir),
        row(Profile::Oct29, Via::Direct),
    );
    assert!(
        w.upstream_total < d.upstream_total,
        "{} vs {}",
        w.upstream_total,
        d.upstream_total
    );
    assert!(w.upstream["logs"] < d.upstream["logs"], "{w:?} vs {d:?}");
    // Healthy, direct: the tools' own traffic, as their sources poll: VS Code follows the two
    // running sessions (and each new one) every 5 s: ≥ 2 × 48 polls in 240 simulated seconds.
    let d = row(Profile::Healthy, Via::Direct);
    assert!(d.upstream["session"] >= 90, "{d:?}");
    assert_eq!(d.failures, 0, "{d:?}");
    // Mission Control direct: one events POST per 500 ms tick (at least three quarters of
    // the 480 in 240 simulated seconds on a loaded machine), the commands every 3 s; the Task
    // API turns' task and events pages polled every 2 s (each turn 24 simulated seconds).
    assert!(d.upstream["mc events"] >= 360, "{d:?}");
    assert!(d.upstream["mc commands"] >= 60, "{d:?}");
    assert!(d.upstream["task"] >= 2 * 6, "{d:?}");
    assert_eq!(d.mirror.events, d.mirror.event_sends, "{d:?}");
}
