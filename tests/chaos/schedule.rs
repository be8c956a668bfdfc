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
    /// `nats-server` stopped, started again on the same port after `down`: every replica's
    /// team link drops and must come back by itself.
    NatsRestart { down: Duration },
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
            Fault::KillReplica { down, .. } | Fault::NatsRestart { down } => down,
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
            Fault::NatsRestart { down } => {
                write!(f, "NATS server restart after {}s down", down.as_secs())
            }
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

/// An upstream fault held around a process fault ([`Planned::under`]) starts this much before
/// it and ends this much after it: creates are being queued when the replica dies or the
/// database goes away, and replayed while it comes back.
pub const AROUND: Duration = Duration::from_secs(3);

/// One fault at `at` from the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
    /// For a process fault (kill, PostgreSQL, NATS): an upstream fault held around it, or none.
    pub under: Option<Fault>,
}

impl Planned {
    /// From the first fault's start to the last one's end.
    pub fn span(&self) -> Duration {
        match self.under {
            Some(_) => AROUND + self.fault.lasting() + AROUND,
            None => self.fault.lasting(),
        }
    }
}

impl fmt::Display for Planned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.under {
            Some(u) => write!(f, "{} during an {u}", self.fault),
            None => write!(f, "{}", self.fault),
        }
    }
}

/// Kinds 0..PROCESS_KINDS are process faults (replica, PostgreSQL, NATS), the rest upstream.
const PROCESS_KINDS: u8 = 4;

/// An upstream fault lasting `lasting`, of kind `k` (0..4).
fn upstream_fault(k: u8, lasting: Duration, rng: &mut StdRng) -> Fault {
    match k {
        0 => Fault::Storm5xx { lasting },
        1 => Fault::Blackhole { lasting },
        2 => Fault::Trickle { lasting },
        _ => Fault::RateLimited {
            lasting,
            retry_after_secs: rng.gen_range(2..=10),
        },
    }
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
            deck = (0..8).collect();
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
            3 => Fault::NatsRestart {
                down: Duration::from_secs(rng.gen_range(2..=8)),
            },
            k => upstream_fault(k - PROCESS_KINDS, lasting, &mut rng),
        };
        // Half the process faults strike while the upstream is failing too.
        let under = (kind < PROCESS_KINDS && rng.gen_bool(0.5)).then(|| {
            let span = AROUND + fault.lasting() + AROUND;
            upstream_fault(rng.gen_range(0..4), span, &mut rng)
        });
        let planned = Planned {
            at: t,
            fault,
            under,
        };
        if t + planned.span() >= end {
            // Too long for what is left: try the rest of the deck once, then stop.
            if deck.is_empty() || out.len() > 10_000 {
                break;
            }
            continue;
        }
        out.push(planned);
        t += planned.span() + Duration::from_secs(rng.gen_range(3..=10));
    }
    out
}

#[test]
fn a_seed_names_one_schedule_and_every_fault_ends_in_time() {
    let a = draw(7, 600, Duration::from_secs(5), 3);
    assert_eq!(a, draw(7, 600, Duration::from_secs(5), 3));
    assert_ne!(a, draw(8, 600, Duration::from_secs(5), 3));
    for p in &a {
        assert!(p.at + p.span() < Duration::from_secs(600));
    }
    assert!(a.iter().any(|p| p.under.is_some()), "{a:?}");
    // Ten minutes deal the whole deck several times.
    let kinds: std::collections::BTreeSet<u8> = a
        .iter()
        .map(|p| match p.fault {
            Fault::KillReplica { .. } => 0,
            Fault::PgRestart => 1,
            Fault::PgUnreachable => 2,
            Fault::NatsRestart { .. } => 3,
            Fault::Storm5xx { .. } => 4,
            Fault::Blackhole { .. } => 5,
            Fault::Trickle { .. } => 6,
            Fault::RateLimited { .. } => 7,
        })
        .collect();
    assert_eq!(kinds.len(), 8, "{a:?}");
}
