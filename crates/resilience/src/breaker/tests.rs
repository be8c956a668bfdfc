//! Breaker behaviour under paused time with deterministic jitter.

use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tokio::time::advance;

use super::*;
use crate::backoff::NoJitter;

const SEC: fn(u64) -> Duration = Duration::from_secs;

fn breaker(config: BreakerConfig) -> Breaker {
    Breaker::new("api.test", config, NoJitter).unwrap()
}

fn call(b: &Breaker, failure: bool, slow: bool) {
    b.try_acquire().unwrap().record(failure, slow);
}

fn drain(rx: &mut broadcast::Receiver<BreakerEvent>) -> Vec<BreakerEvent> {
    let mut out = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(e) => out.push(e),
            Err(TryRecvError::Empty) => return out,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// The windowed rates alone: the consecutive-failure trigger off.
fn windowed() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: 0,
        ..Default::default()
    }
}

/// Opens a breaker with failures in a row; returns how many it took.
fn trip(b: &Breaker) -> u32 {
    let mut n = 0;
    while b.state() != State::Open {
        call(b, true, false);
        n += 1;
        assert!(n <= 100, "never opened");
    }
    n
}

#[tokio::test(start_paused = true)]
async fn a_failure_rate_opens_it() {
    let b = breaker(windowed());
    let mut rx = b.subscribe();
    for _ in 0..10 {
        call(&b, false, false);
    }
    for _ in 0..9 {
        call(&b, true, false);
    }
    // 19 calls: under minimum_calls, whatever the rate (degraded, not open).
    assert_eq!(b.state(), State::Degraded);
    call(&b, true, false);
    // 10 of 20 = 50 % ≥ 50 %.
    assert_eq!(b.state(), State::Open);
    let rejected = b.try_acquire().err().unwrap();
    assert_eq!(rejected.state, State::Open);
    assert_eq!(rejected.retry_after, SEC(5));
    assert_eq!(rejected.breaker, "api.test");

    // On the way: degraded at 4 failures of 14 calls (29 % ≥ 25 %).
    let events = drain(&mut rx);
    let pairs: Vec<_> = events.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(
        pairs,
        [
            (State::Closed, State::Degraded),
            (State::Degraded, State::Open)
        ]
    );
    assert_eq!(
        events[0].reason.to_string(),
        "failure rate 29% ≥ 25% over last 14 calls"
    );
    assert_eq!(
        events[1].reason.to_string(),
        "failure rate 50% ≥ 50% over last 20 calls; rejecting calls for 5s"
    );
    let snap = b.snapshot();
    assert_eq!(snap.failure_rate, 0.5);
    assert_eq!(snap.calls_in_window, 20);
    assert_eq!(snap.open_count, 1);
    assert_eq!(snap.retry_after, Some(SEC(5)));
}

#[tokio::test(start_paused = true)]
async fn all_success_but_slow_opens_it() {
    let b = breaker(BreakerConfig {
        slow_call_duration: Some(SEC(2)),
        ..Default::default()
    });
    let mut rx = b.subscribe();
    for _ in 0..3 {
        call(&b, false, false);
    }
    for _ in 0..16 {
        call(&b, false, true);
    }
    assert_eq!(b.state(), State::Degraded);
    call(&b, false, true);
    // 17 of 20 = 85 % ≥ 80 %.
    assert_eq!(b.state(), State::Open);
    let events = drain(&mut rx);
    assert_eq!(events.len(), 2, "degraded first, then open");
    assert_eq!(events[0].to, State::Degraded);
    assert_eq!(
        events[1].reason.to_string(),
        "slow-call rate 85% ≥ 80% over last 20 calls (slower than 2s); rejecting calls for 5s"
    );
    assert_eq!(b.snapshot().slow_rate, 0.85);
    assert_eq!(b.snapshot().failure_rate, 0.0);
}

#[tokio::test(start_paused = true)]
async fn below_minimum_calls_never_opens() {
    let b = breaker(windowed());
    for _ in 0..19 {
        call(&b, true, true);
    }
    // Not open, but visibly unwell.
    assert_eq!(b.state(), State::Degraded);
    // The window slides: those 19 failures age out, so one more is 1 call, not 20.
    advance(SEC(31)).await;
    call(&b, true, true);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().calls_in_window, 1);
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_the_probes() {
    let b = breaker(BreakerConfig::default());
    trip(&b);
    advance(SEC(4)).await;
    assert_eq!(b.try_acquire().err().unwrap().retry_after, SEC(1));
    advance(SEC(1)).await;
    assert_eq!(b.state(), State::HalfOpen);

    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    let p3 = b.try_acquire().unwrap();
    assert!(p1.is_probe() && p2.is_probe() && p3.is_probe());
    let full = b.try_acquire().err().unwrap();
    assert_eq!(full.state, State::HalfOpen);
    assert_eq!(full.retry_after, HALF_OPEN_RETRY_AFTER);

    // An abandoned probe frees its slot without counting.
    drop(p3);
    let p4 = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());

    let mut rx = b.subscribe();
    p1.record(false, false);
    p2.record(false, false);
    assert_eq!(b.state(), State::HalfOpen);
    p4.record(false, false);
    assert_eq!(b.state(), State::Closed);
    let events = drain(&mut rx);
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].reason.to_string(),
        "3 of 3 half-open probes succeeded"
    );
    assert_eq!(b.snapshot().calls_in_window, 0);
}

#[tokio::test(start_paused = true)]
async fn one_bad_probe_of_three_still_closes() {
    let b = breaker(BreakerConfig::default());
    trip(&b);
    advance(SEC(5)).await;
    call(&b, true, false);
    call(&b, false, false);
    call(&b, false, false);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        b.snapshot().reason.to_string(),
        "2 of 3 half-open probes succeeded (failure rate 33% < 50%, slow-call rate 0% < 80%)"
    );
}

#[tokio::test(start_paused = true)]
async fn probe_failures_reopen_with_a_longer_wait() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    trip(&b);
    for (round, wait) in [(1u32, 5u64), (2, 10), (3, 20)] {
        assert_eq!(b.snapshot().open_count, round);
        assert_eq!(b.try_acquire().err().unwrap().retry_after, SEC(wait));
        advance(SEC(wait)).await;
        call(&b, true, false);
        call(&b, true, false);
        call(&b, false, false);
        assert_eq!(b.state(), State::Open);
    }
    let events = drain(&mut rx);
    let pairs: Vec<_> = events.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(
        pairs,
        [
            (State::Closed, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Open),
        ]
    );
    assert_eq!(
        events[1].reason.to_string(),
        "waited 5s; letting 3 probe calls through"
    );
    assert_eq!(
        events[2].reason.to_string(),
        "2 of 3 half-open probes failed (failure rate 67% ≥ 50%); rejecting calls for 10s"
    );
    assert_eq!(b.snapshot().opens_total, 4);
    assert_eq!(b.snapshot().retry_after, Some(SEC(40)));
}

#[tokio::test(start_paused = true)]
async fn slow_probes_reopen() {
    let b = breaker(BreakerConfig {
        slow_call_rate_threshold: 0.5,
        ..Default::default()
    });
    trip(&b);
    advance(SEC(5)).await;
    call(&b, false, true);
    call(&b, false, true);
    call(&b, false, false);
    assert_eq!(b.state(), State::Open);
    assert!(b
        .snapshot()
        .reason
        .to_string()
        .starts_with("2 of 3 half-open probes were slow (slow-call rate 67% ≥ 50%)"));
}

#[tokio::test(start_paused = true)]
async fn growth_resets_after_staying_closed() {
    let b = breaker(BreakerConfig::default());
    let close = |b: &Breaker| {
        for _ in 0..3 {
            call(b, false, false);
        }
        assert_eq!(b.state(), State::Closed);
    };
    trip(&b);
    advance(SEC(5)).await;
    close(&b);
    // Reopening soon after: the wait keeps growing.
    trip(&b);
    assert_eq!(b.try_acquire().err().unwrap().retry_after, SEC(10));
    advance(SEC(10)).await;
    close(&b);
    assert_eq!(b.snapshot().open_count, 2);
    // Closed for reset_growth_after: the next opening starts from the base again.
    advance(SEC(120)).await;
    assert_eq!(b.snapshot().open_count, 0);
    trip(&b);
    assert_eq!(b.try_acquire().err().unwrap().retry_after, SEC(5));
}

#[tokio::test(start_paused = true)]
async fn stale_permits_are_ignored() {
    let b = breaker(BreakerConfig::default());
    let early = b.try_acquire().unwrap();
    trip(&b);
    advance(SEC(5)).await;
    assert_eq!(b.state(), State::HalfOpen);
    // Started while closed, finished while half-open: not a probe, not counted.
    early.record(true, true);
    assert_eq!(b.state(), State::HalfOpen);
    for _ in 0..3 {
        call(&b, false, false);
    }
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn record_kind_counts_only_upstream_failures() {
    let b = breaker(BreakerConfig::default());
    for _ in 0..20 {
        b.try_acquire()
            .unwrap()
            .record_kind(Kind::RateLimited, false);
    }
    assert_eq!(b.state(), State::Closed);
    for _ in 0..5 {
        b.try_acquire()
            .unwrap()
            .record_kind(Kind::ServerError, false);
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn jitter_shortens_the_wait_at_most_by_half() {
    struct Zero;
    impl Jitter for Zero {
        fn pick(&mut self, _max: Duration) -> Duration {
            Duration::ZERO
        }
    }
    let b = Breaker::new("j", BreakerConfig::default(), Zero).unwrap();
    trip(&b);
    assert_eq!(
        b.try_acquire().err().unwrap().retry_after,
        Duration::from_millis(2500)
    );
}

#[tokio::test(start_paused = true)]
async fn snapshot_serialises() {
    let b = breaker(BreakerConfig::default());
    trip(&b);
    let json = serde_json::to_value(b.snapshot()).unwrap();
    assert_eq!(json["state"], "open");
    assert_eq!(json["name"], "api.test");
    assert_eq!(json["calls_in_window"], 5);
    assert_eq!(json["failure_rate"], 1.0);
    assert_eq!(json["consecutive_threshold"], 5);
    assert_eq!(json["caution"], serde_json::Value::Null);
}

#[test]
fn invalid_config_is_refused() {
    let cfg = BreakerConfig {
        minimum_calls: 0,
        ..Default::default()
    };
    assert_eq!(
        Breaker::new("x", cfg, NoJitter).err().unwrap().field,
        "minimum_calls"
    );
}

#[tokio::test(start_paused = true)]
async fn reconfigure_keeps_the_state_and_applies_new_thresholds() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    trip(&b);
    let opened = drain(&mut rx);
    assert_eq!(opened.len(), 1);
    // Open stays open, with its wait and subscribers, across a settings change.
    b.reconfigure(BreakerConfig {
        minimum_calls: 4,
        cautious_minimum_calls: 4,
        ..BreakerConfig::default()
    })
    .unwrap();
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.snapshot().opens_total, 1);
    assert!(
        drain(&mut rx).is_empty(),
        "no transition from a reconfigure"
    );
    // A closed breaker counts against the new minimum: 4 failures open it.
    let c = breaker(BreakerConfig::default());
    for _ in 0..3 {
        call(&c, true, false);
    }
    c.reconfigure(BreakerConfig {
        minimum_calls: 4,
        cautious_minimum_calls: 4,
        ..BreakerConfig::default()
    })
    .unwrap();
    assert_eq!(
        c.state(),
        State::Closed,
        "the 3 calls in the window are kept"
    );
    call(&c, true, false);
    assert_eq!(c.state(), State::Open);
    // A bad config is refused and the old one stays.
    let bad = BreakerConfig {
        minimum_calls: 0,
        ..BreakerConfig::default()
    };
    assert!(c.reconfigure(bad).is_err());
    assert_eq!(c.config().minimum_calls, 4);
}

#[tokio::test(start_paused = true)]
async fn five_failures_in_a_row_open_it_and_a_success_resets_the_run() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    for _ in 0..4 {
        call(&b, true, false);
    }
    call(&b, false, false);
    assert_eq!(
        b.snapshot().consecutive_failures,
        0,
        "a success ends the run"
    );
    for _ in 0..4 {
        call(&b, true, false);
    }
    assert_eq!(b.snapshot().consecutive_failures, 4);
    assert_ne!(b.state(), State::Open);
    call(&b, true, false);
    assert_eq!(b.state(), State::Open);
    let events = drain(&mut rx);
    let last = events.last().unwrap();
    assert_eq!(last.to, State::Open);
    assert_eq!(
        last.reason.to_string(),
        "5 consecutive failures; rejecting calls for 5s"
    );
    assert_eq!(
        last.reason,
        Reason::Opened {
            cause: "5 consecutive failures".into(),
            wait: SEC(5)
        }
    );
    // 10 calls, far below minimum_calls = 20: only the run could open it.
    assert_eq!(b.snapshot().opens_total, 1);
}

#[tokio::test(start_paused = true)]
async fn consecutive_zero_is_off() {
    let b = breaker(BreakerConfig {
        consecutive_failures: 0,
        ..Default::default()
    });
    for _ in 0..19 {
        call(&b, true, false);
    }
    assert_eq!(b.state(), State::Degraded);
    assert_eq!(b.snapshot().consecutive_threshold, 0);
    // Cautious does not switch an "off" trigger on; the window's lowered minimum does open.
    let c = breaker(BreakerConfig {
        consecutive_failures: 0,
        cautious_minimum_calls: 10,
        ..Default::default()
    });
    c.set_cautious(true);
    for _ in 0..9 {
        call(&c, true, false);
    }
    assert_eq!(c.state(), State::Degraded);
    call(&c, true, false);
    assert_eq!(c.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn caution_lowers_the_bar_but_never_opens_alone() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    for _ in 0..2 {
        call(&b, true, false);
    }
    // Turning caution on with a failing run under way: no transition by itself.
    b.set_caution(Some("GitHub Status: Copilot incident".into()));
    assert!(b.is_cautious());
    assert_eq!(b.state(), State::Closed);
    assert!(drain(&mut rx).is_empty());
    let snap = b.snapshot();
    assert_eq!((snap.minimum_calls, snap.consecutive_threshold), (5, 3));
    assert_eq!(
        snap.caution.as_deref(),
        Some("GitHub Status: Copilot incident")
    );
    // Successes while cautious never open it, however long caution lasts.
    let c = breaker(BreakerConfig::default());
    c.set_cautious(true);
    for _ in 0..50 {
        call(&c, false, false);
        advance(SEC(1)).await;
    }
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.snapshot().opens_total, 0);
    // The third failure in a row opens it (5 without caution), and says why.
    call(&b, true, false);
    assert_eq!(b.state(), State::Open);
    let events = drain(&mut rx);
    assert_eq!(
        events.last().unwrap().reason.to_string(),
        "3 consecutive failures (cautious: GitHub Status: Copilot incident); rejecting calls for 5s"
    );
    // Caution over: the normal thresholds again.
    b.set_cautious(false);
    let snap = b.snapshot();
    assert_eq!((snap.minimum_calls, snap.consecutive_threshold), (20, 5));
    assert_eq!(snap.caution, None);
}

#[tokio::test(start_paused = true)]
async fn caution_lowers_minimum_calls_for_the_rates() {
    let b = breaker(windowed());
    b.set_cautious(true);
    // 2 of 4 failed: under the cautious minimum of 5.
    call(&b, true, false);
    call(&b, false, false);
    call(&b, true, false);
    call(&b, false, false);
    assert_ne!(b.state(), State::Open);
    // 3 of 5 = 60 % ≥ 50 % with 5 calls: enough while cautious (20 otherwise).
    call(&b, true, false);
    assert_eq!(b.state(), State::Open);
    assert!(b
        .snapshot()
        .reason
        .to_string()
        .starts_with("failure rate 60% ≥ 50% over last 5 calls (cautious: cautious)"));
}

/// A list class whose calls usually take 100 ms.
fn timed(b: &Breaker, failure: bool, ms: u64) -> Slowness {
    b.try_acquire().unwrap().record_latency(
        failure,
        "list",
        Duration::from_millis(ms),
        Timing {
            normal: None,
            ceiling: Duration::from_secs(5),
        },
    )
}

#[tokio::test(start_paused = true)]
async fn slower_than_its_own_baseline_is_degraded_not_open() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    for _ in 0..30 {
        assert!(!timed(&b, false, 100).slow);
        advance(SEC(2)).await;
    }
    let snap = b.snapshot();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.latency[0].class, "list");
    assert_eq!(snap.latency[0].p50, Some(Duration::from_millis(100)));
    assert_eq!(snap.latency[0].slow_after, Some(SEC(1)));
    // The Oct 29 shape: 1.2 s, well under the absolute 5 s, but 12× the usual.
    let mut to_degraded = 0;
    while b.state() != State::Degraded {
        let s = timed(&b, false, 1200);
        assert_eq!((s.slow, s.too_slow), (true, false));
        to_degraded += 1;
        advance(SEC(2)).await;
        assert!(to_degraded < 20, "never degraded");
    }
    // 15 healthy calls in the 30 s window; slow calls push the slow rate to 50 %.
    assert!(to_degraded <= 15, "{to_degraded}");
    // It stays degraded (the slowdown is not learned as normal) and never opens: the calls
    // succeed.
    for _ in 0..100 {
        timed(&b, false, 1200);
        advance(SEC(2)).await;
    }
    let snap = b.snapshot();
    assert_eq!(snap.state, State::Degraded);
    assert_eq!(snap.opens_total, 0);
    assert_eq!(snap.slow_rate, 1.0);
    assert_eq!(snap.latency[0].p50, Some(Duration::from_millis(100)));
    let events = drain(&mut rx);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].from, events[0].to),
        (State::Closed, State::Degraded)
    );
    assert!(
        events[0].reason.to_string().contains("slower than usual"),
        "{}",
        events[0].reason
    );
    // Back to 100 ms: healthy again once the window's slow rate falls under 50 %.
    let mut to_closed = 0;
    while b.state() != State::Closed {
        timed(&b, false, 100);
        to_closed += 1;
        advance(SEC(2)).await;
        assert!(to_closed < 20, "never recovered");
    }
    let events = drain(&mut rx);
    assert_eq!(events.len(), 1);
    assert!(
        matches!(events[0].reason, Reason::Recovered(_)),
        "{}",
        events[0].reason
    );
    assert_eq!(b.snapshot().opens_total, 0);
}

#[tokio::test(start_paused = true)]
async fn degraded_keeps_in_flight_calls_and_clears_when_the_window_empties() {
    let b = breaker(BreakerConfig::default());
    let early = b.try_acquire().unwrap();
    // 2 failures of 5 (40 % ≥ 25 %), no run of 5: degraded.
    for f in [true, false, true, false, false] {
        call(&b, f, false);
    }
    assert_eq!(b.state(), State::Degraded);
    // Issued while closed, recorded while degraded: still counted (same generation).
    early.record(true, false);
    assert_eq!(b.snapshot().calls_in_window, 6);
    // Nothing for a whole window: no evidence of trouble left.
    let mut rx = b.subscribe();
    advance(SEC(31)).await;
    assert_eq!(b.state(), State::Closed);
    let idle = &drain(&mut rx)[0].reason;
    assert_eq!(*idle, Reason::Idle { window: SEC(30) });
    assert_eq!(idle.to_string(), "no calls in the last 30s");
}

#[tokio::test(start_paused = true)]
async fn absolute_cut_off_still_opens_through_record_latency() {
    let b = breaker(BreakerConfig::default());
    // No baseline yet: 20 calls over the 5 s ceiling open on the slow-call rate.
    for _ in 0..20 {
        let s = timed(&b, false, 6000);
        assert!(s.too_slow);
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn retries_do_not_pile_onto_a_failing_run() {
    let b = breaker(BreakerConfig::default());
    // Healthy: a retry is an ordinary call.
    b.try_acquire_retry().unwrap().record(false, false);
    // Four refreshes fail at once, each wanting a retry.
    let first: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    for p in first {
        p.record(true, false);
    }
    assert_eq!(b.snapshot().consecutive_failures, 4);
    // One retry may go (4 failures + 1 in flight = the 5 that open it); the rest wait. (4 of 5
    // calls failed: degraded already.)
    let r1 = b.try_acquire_retry().unwrap();
    let refused = b.try_acquire_retry().err().unwrap();
    assert_eq!(refused.state, State::Degraded);
    // A first attempt is still a closed breaker's ordinary call.
    let fresh = b.try_acquire().unwrap();
    drop(fresh);
    r1.record(true, false);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.snapshot().opens_total, 1);
    // A success ends the run: retries flow again.
    let c = breaker(BreakerConfig::default());
    call(&c, true, false);
    call(&c, false, false);
    let a = c.try_acquire_retry().unwrap();
    let b2 = c.try_acquire_retry().unwrap();
    drop((a, b2));
}

#[tokio::test(start_paused = true)]
async fn trip_opens_now_restarts_an_open_wait_and_leaves_probes_alone() {
    let t = breaker(BreakerConfig::default());
    assert!(t.trip("3 teammates see it failing"));
    assert_eq!(t.state(), State::Open);
    assert!(t.snapshot().reason.to_string().contains("teammates"));
    let first = t.snapshot().retry_after.unwrap();
    assert!(t.trip("again"), "an open breaker starts its next wait");
    assert!(t.snapshot().retry_after.unwrap() > first, "the wait grew");
    advance(Duration::from_secs(3600)).await;
    assert_eq!(t.state(), State::HalfOpen);
    assert!(!t.trip("probing"), "a half-open breaker is left alone");
}

#[tokio::test(start_paused = true)]
async fn a_fresh_breaker_sees_a_slowdown_it_started_in() {
    // Every list takes 3 s from the first call: nothing good to learn from, and 3 s is under the
    // 5 s ceiling. The class's normal latency (250 ms) judges until a baseline is learned.
    let b = breaker(BreakerConfig::default());
    let t = Timing {
        normal: Some(Duration::from_millis(250)),
        ceiling: Duration::from_secs(5),
    };
    let mut calls = 0;
    while b.state() == State::Closed {
        let s = b
            .try_acquire()
            .unwrap()
            .record_latency(false, "list", SEC(3), t);
        assert_eq!((s.slow, s.too_slow), (true, false));
        calls += 1;
        advance(SEC(1)).await;
        assert!(calls < 50, "never left closed");
    }
    assert_eq!(b.state(), State::Degraded);
    // `degraded_minimum_calls` is the bound: the first window that may speak does.
    assert_eq!(calls, 5);
    let snap = b.snapshot();
    assert!(snap.latency[0].prior);
    assert_eq!(snap.latency[0].samples, 0);
}

#[tokio::test(start_paused = true)]
async fn baselines_come_out_and_go_back_in() {
    let b = breaker(BreakerConfig::default());
    for _ in 0..12 {
        timed(&b, false, 100);
    }
    let kept = b.baselines();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].0, kept[0].1.len()), ("list", 12));
    let fresh = breaker(BreakerConfig::default());
    fresh.restore_baseline("list", &kept[0].1);
    let snap = fresh.snapshot();
    assert_eq!(snap.latency[0].p50, Some(Duration::from_millis(100)));
    assert!(!snap.latency[0].prior);
    // The restored baseline judges at once: 1.2 s is 12× the usual.
    assert!(timed(&fresh, false, 1200).slow);
}
