//! The developer's-hour scenario, shortened (4 simulated minutes at 10×): it runs all four rows
//! at once and its tallies add up. Counts only, never times.

use std::time::Duration;
use weir_lab::scenarios::devhour::{run_rows, Profile, Via};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_developer_hour_adds_up() {
    let rows = run_rows(Duration::from_secs(24), 1).await.expect("rows");
    assert_eq!(rows.len(), 4);
    let row = |p: Profile, v: Via| rows.iter().find(|r| r.profile == p && r.via == v).unwrap();
    for r in &rows {
        assert_eq!(r.intended, 3, "{r:?}");
        // The upstream saw what the tools asked for: sessions, lists, a token, creates.
        for route in ["list", "session", "token", "create", "logs"] {
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
}
