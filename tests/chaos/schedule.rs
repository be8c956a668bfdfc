//! The fault schedule: drawn from a seeded RNG before the run starts, so a seed names one
//! schedule exactly (print it, run it again). Faults come one after another with a quiet gap
//! between them, dealt from a shuffled deck of every kind so that a short run still sees a
//! mix and a long one sees each kind many times.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::time::Duration;

/// PostgreSQL unreachable this long (the figure).
pub const PG_FREEZE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of replica `slot`, restarted after `down`.
    KillReplica { slot: usize, down: Duration },
    /// `pg_ctl stop -m fast` then start: every connection is cut.
    PgRestart,
    /// The postmaster and its backends SIGSTOPped for [`PG_FREEZE`]: connections hang.
    PgUnreachable,
    /// The upstream answers 5xx to everything for `lasting`.
    Storm5xx { lasting: Duration },
    /// The upstream answers nothing for `lasting`.
    Blackhole { lasting: Duration },
    /// The upstream's answers trickle out for `lasting`.
    Trickle { lasting: Duration },
    /// The upstream answers 429 + `Retry-After` for `lasting`.
    RateLimited {
        lasting: Duration,
        retry_after_secs: u64,
    },
}

impl Fault {
    /// How long the fault holds before things are put back.
    pub fn lasting(&self) -> Duration {
        match *self {
            Fault::KillReplica { down, .. } => down,
            Fault::PgRestart => Duration::ZERO,
            Fault::PgUnreachable => PG_FREEZE,
            Fault::Storm5xx { lasting }
            | Fault::Blackhole { lasting }
            | Fault::Trickle { lasting }
            | Fault::RateLimited { lasting, .. } => lasting,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Fault::KillReplica { slot, down } => {
                write!(
                    f,
                    "kill -9 replica {slot}, restart after {}s",
                    down.as_secs()
                )
            }
            Fault::PgRestart => write!(f, "PostgreSQL restart"),
            Fault::PgUnreachable => {
                write!(
                    f,
                    "PostgreSQL unreachable {}s (SIGSTOP)",
                    PG_FREEZE.as_secs()
                )
            }
            Fault::Storm5xx { lasting } => write!(f, "upstream 5xx storm {}s", lasting.as_secs()),
            Fault::Blackhole { lasting } => write!(f, "upstream blackhole {}s", lasting.as_secs()),
            Fault::Trickle { lasting } => write!(f, "upstream slow trickle {}s", lasting.as_secs()),
            Fault::RateLimited {
                lasting,
                retry_after_secs,
            } => write!(
                f,
                "upstream 429 Retry-After {retry_after_secs} for {}s",
                lasting.as_secs()
            ),
        }
    }
}

/// One fault at `at` from the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
}

/// The schedule for `seed` over `seconds` (faults start after `warm_up`; the last one ends
/// before `seconds`), for `replicas` replicas.
pub fn draw(seed: u64, seconds: u64, warm_up: Duration, replicas: usize) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = Duration::from_secs(seconds);
    let mut deck: Vec<u8> = Vec::new();
    let mut t = warm_up;
    let mut out = Vec::new();
    loop {
        if deck.is_empty() {
            deck = (0..7).collect();
            deck.shuffle(&mut rng);
        }
        let kind = deck.pop().unwrap_or(0);
        let lasting = Duration::from_secs(rng.gen_range(5..=15));
        let fault = match kind {
            0 => Fault::KillReplica {
                slot: rng.gen_range(0..replicas),
                down: Duration::from_secs(rng.gen_range(1..=5)),
            },
            1 => Fault::PgRestart,
            2 => Fault::PgUnreachable,
            3 => Fault::Storm5xx { lasting },
            4 => Fault::Blackhole { lasting },
            5 => Fault::Trickle { lasting },
            _ => Fault::RateLimited {
                lasting,
                retry_after_secs: rng.gen_range(2..=10),
            },
        };
        if t + fault.lasting() >= end {
            // Too long for what is left: try the rest of the deck once, then stop.
            if deck.is_empty() || out.len() > 10_000 {
                break;
            }
            continue;
        }
        out.push(Planned { at: t, fault });
        t += fault.lasting() + Duration::from_secs(rng.gen_range(3..=10));
    }
    out
}

#[test]
fn a_seed_names_one_schedule_and_every_fault_ends_in_time() {
    let a = draw(7, 600, Duration::from_secs(5), 3);
    assert_eq!(a, draw(7, 600, Duration::from_secs(5), 3));
    assert_ne!(a, draw(8, 600, Duration::from_secs(5), 3));
    for p in &a {
        assert!(p.at + p.fault.lasting() < Duration::from_secs(600));
    }
    // Ten minutes deal the whole deck several times.
    let kinds: std::collections::BTreeSet<u8> = a
        .iter()
        .map(|p| match p.fault {
            Fault::KillReplica { .. } => 0,
            Fault::PgRestart => 1,
            Fault::PgUnreachable => 2,
            Fault::Storm5xx { .. } => 3,
            Fault::Blackhole { .. } => 4,
            Fault::Trickle { .. } => 5,
            Fault::RateLimited { .. } => 6,
        })
        .collect();
    assert_eq!(kinds.len(), 7, "{a:?}");
}
