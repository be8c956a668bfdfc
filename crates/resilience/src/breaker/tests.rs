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

/// Opens a default-config breaker with 20 failures.
fn trip(b: &Breaker) {
    for _ in 0..b.config().minimum_calls {
        call(b, true, false);
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_run_of_failures_opens_it() {
    let b = breaker(BreakerConfig::default());
    let mut rx = b.subscribe();
    for _ in 0..10 {
        call(&b, false, false);
    }
    for _ in 0..9 {
        call(&b, true, false);
    }
    // 19 calls: under minimum_calls, whatever the rate.
    assert_eq!(b.state(), State::Closed);
    call(&b, true, false);
    // 10 of 20 = 50 % ≥ 50 %.
    assert_eq!(b.state(), State::Open);
    let rejected = b.try_acquire().err().unwrap();
    assert_eq!(rejected.state, State::Open);
    assert_eq!(rejected.retry_after, SEC(5));
    assert_eq!(rejected.breaker, "api.test");

    let events = drain(&mut rx);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].from, events[0].to), (State::Closed, State::Open));
    assert_eq!(
        events[0].reason,
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
    assert_eq!(b.state(), State::Closed);
    call(&b, false, true);
    // 17 of 20 = 85 % ≥ 80 %.
    assert_eq!(b.state(), State::Open);
    let events = drain(&mut rx);
    assert_eq!(
        events[0].reason,
        "slow-call rate 85% ≥ 80% over last 20 calls (slower than 2s); rejecting calls for 5s"
    );
    assert_eq!(b.snapshot().slow_rate, 0.85);
    assert_eq!(b.snapshot().failure_rate, 0.0);
}

#[tokio::test(start_paused = true)]
async fn below_minimum_calls_never_opens() {
    let b = breaker(BreakerConfig::default());
    for _ in 0..19 {
        call(&b, true, true);
    }
    assert_eq!(b.state(), State::Closed);
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
    assert_eq!(events[0].reason, "3 of 3 half-open probes succeeded");
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
        b.snapshot().reason,
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
    assert_eq!(events[1].reason, "waited 5s; letting 3 probe calls through");
    assert_eq!(
        events[2].reason,
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
    for _ in 0..20 {
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
    assert_eq!(json["calls_in_window"], 20);
    assert_eq!(json["failure_rate"], 1.0);
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
async fn cautious_opens_on_the_first_failure_and_trip_opens_at_once() {
    let b = Breaker::new("cautious", BreakerConfig::default(), NoJitter).unwrap();
    b.try_acquire().unwrap().record(true, false);
    assert_eq!(
        b.state(),
        State::Closed,
        "one failure is below minimum_calls"
    );
    b.set_cautious(true);
    assert!(b.is_cautious());
    b.try_acquire().unwrap().record(true, false);
    assert_eq!(
        b.state(),
        State::Open,
        "cautious: the failure rate trips at once"
    );

    let t = Breaker::new("trip", BreakerConfig::default(), NoJitter).unwrap();
    assert!(t.trip("3 teammates see it failing"));
    assert_eq!(t.state(), State::Open);
    assert!(t.snapshot().reason.contains("teammates"));
    let first = t.snapshot().retry_after.unwrap();
    assert!(t.trip("again"), "an open breaker starts its next wait");
    assert!(t.snapshot().retry_after.unwrap() > first, "the wait grew");
    advance(Duration::from_secs(3600)).await;
    assert_eq!(t.state(), State::HalfOpen);
    assert!(!t.trip("probing"), "a half-open breaker is left alone");
}
