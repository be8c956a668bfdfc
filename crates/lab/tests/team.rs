//! The team scenario, bounded for CI: a few Weirs behind one upstream that breaks, with and
//! without team signals over a real `nats-server`. Counts only (the upstream's own count).

use weir_lab::scenarios::team::{run_row, Signals};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_signals_cut_the_failing_calls_an_outage_costs() {
    if weir_lab::nats::nats_server_bin().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED: `nats-server` is not installed (apt-get install nats-server; scripts/test.sh does) !!!!!!!!\n");
        return;
    }
    let (weirs, seconds) = (12, 30);
    let alone = run_row(weirs, seconds, Signals::Off).await.unwrap();
    let team = run_row(weirs, seconds, Signals::Open).await.unwrap();
    eprintln!("alone: {alone:?}\nteam: {team:?}");
    assert!(alone.failing_calls > 0 && team.failing_calls > 0);
    // With signals every Weir opens, most on their teammates' word.
    assert_eq!(team.opened, weirs, "{team:?}");
    assert!(
        team.failing_calls * 2 < alone.failing_calls,
        "with signals {} vs alone {}",
        team.failing_calls,
        alone.failing_calls
    );
}
