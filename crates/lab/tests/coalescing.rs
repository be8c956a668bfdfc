//! The 200-cold-GETs check and the 429 agents through Weir: counts and states only.

use weir_lab::scenarios::agents429::{run_row, Habit, CALLS};
use weir_lab::scenarios::cold::run_cold;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_cold_gets_make_one_upstream_request() {
    let r = run_cold(200, 1200, "").await.unwrap();
    assert_eq!(r.upstream_requests, 1);
    assert_eq!(r.answered_ok, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_keeps_naive_retries_off_a_rate_limited_upstream() {
    let agents = 4;
    let r = run_row("naive through Weir", agents, Habit::Naive, true)
        .await
        .unwrap();
    assert_eq!(r.completed as usize, agents * CALLS, "{r:?}");
    // Every call reached the upstream at least once...
    assert!(r.upstream_calls >= r.completed);
    // ...but the refused ones were not sent again and again: Weir held them during the
    // cooldown, so far fewer 429s reached the upstream than there were refused agent attempts
    // or the agents' naive retries would have made.
    assert!(r.upstream_429 * 4 < r.upstream_calls, "{r:?}");
}
