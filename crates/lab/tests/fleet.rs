//! A small fleet against real loopback servers: amplification comes from the upstream's own
//! counter, buggy clients amplify, and Weir (caching off) brings it back to about one upstream
//! request per logical request while answering every one. Counts and states only.

use weir_lab::fleet::FleetSpec;
use weir_lab::policy::Policy;
use weir_lab::scenarios::fleet::{run_rows, variants, Variant};
use weir_lab::scenarios::LabConfig;
use weir_lab::upstream::{Upstream, UpstreamSpec};
use weir_lab::worker::{run_fleet, Placement};

fn pick(names: &[&str]) -> Vec<Variant> {
    variants()
        .into_iter()
        .filter(|v| names.contains(&v.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buggy_clients_amplify_and_weir_coalesces_them() {
    let cfg = LabConfig::quick(20, 4);
    let rows = run_rows(
        &cfg,
        &pick(&[
            "healthy",
            "buggy clients",
            "buggy clients through Weir (caching off)",
        ]),
    )
    .await
    .unwrap();
    let (healthy, buggy, weir) = (&rows[0], &rows[1], &rows[2]);

    // Amplification is the upstream's own per-second count over the healthy row's.
    assert!(healthy.upstream_rps > 0.0);
    assert_eq!(healthy.amplification, 1.0);
    assert_eq!(
        buggy.amplification,
        buggy.upstream_rps / healthy.upstream_rps
    );
    assert!(
        healthy.upstream_total >= healthy.clients.logical,
        "every healthy logical request reached the upstream"
    );
    assert_eq!(healthy.clients.failed, 0);

    // Buggy clients: several attempts per logical request, all of them reaching the upstream.
    assert!(buggy.amplification > 1.5, "{buggy:?}");
    assert!(buggy.clients.attempts > buggy.clients.logical * 3 / 2);
    assert!(buggy.upstream_total > buggy.clients.logical);

    // Through Weir: every logical request answered; the reissues are coalesced, so the
    // upstream sees about one request per logical request, and Weir agrees with its count.
    assert_eq!(weir.clients.failed, 0, "{weir:?}");
    assert_eq!(weir.clients.succeeded, weir.clients.logical);
    assert!(
        weir.clients.attempts > weir.clients.logical * 3 / 2,
        "the clients still reissued"
    );
    // A reissue that reaches Weir after its flight has finished starts a fetch of its own
    // (caching is off), so a loaded machine sees a few more than one per logical request:
    // 1.10 was seen with both cores saturated, against ~8 for the buggy row.
    assert!(
        weir.upstream_total <= weir.clients.logical + weir.clients.logical / 4 + 2,
        "{weir:?}"
    );
    assert_eq!(weir.weir_upstream_requests, Some(weir.upstream_total));
    assert!(weir.amplification < buggy.amplification / 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_in_a_child_process_reports_back() {
    let up = Upstream::start(UpstreamSpec::with_latency(1))
        .await
        .unwrap();
    let spec = FleetSpec::new(
        5,
        2,
        format!("{}/agents/sessions", up.origin()),
        Policy::Reissue { timeout_ms: 1000 },
    );
    let placement = Placement::Child(env!("CARGO_BIN_EXE_weir-lab").into());
    let counters = up.counters().clone();
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = started.clone();
    let report = run_fleet(&placement, &spec, move || {
        counters.requests.restart();
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    })
    .await
    .unwrap();
    assert!(started.load(std::sync::atomic::Ordering::SeqCst));
    // 5 clients, one request per 500 ms over 2 s: 4 each.
    assert_eq!(report.logical, 20);
    assert_eq!(report.succeeded, 20);
    assert_eq!(report.attempts, 20);
    assert_eq!(up.counters().requests.total(), 20);
}
