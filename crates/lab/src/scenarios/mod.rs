//! The experiments. Each runs its rows one after another against fresh loopback upstreams (and
//! a fresh Weir where the row has one) and returns a [`Section`](crate::report::Section).

pub mod agents429;
pub mod cold;
pub mod devhour;
pub mod fleet;
pub mod oct29;
pub mod surfaces;
pub mod team;
pub mod token;

use crate::worker::Placement;

/// Knobs shared by every scenario.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Clients in the fleet scenarios (the published experiment has 1,000).
    pub clients: usize,
    /// Length of each row.
    pub seconds: u64,
    /// Where fleets run (a child process keeps their sockets out of the upstream's limit).
    pub placement: Placement,
    pub seed: u64,
}

impl LabConfig {
    /// A small, quick configuration (tests, CI).
    pub fn quick(clients: usize, seconds: u64) -> LabConfig {
        LabConfig {
            clients,
            seconds,
            placement: Placement::InProcess,
            seed: 1,
        }
    }
}

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Fleet,
    Oct29,
    #[value(name = "aug17-token")]
    Aug17Token,
    #[value(name = "agents-429")]
    Agents429,
    Cold,
    Team,
    /// A developer's hour at 10× (`--seconds 360` is the hour).
    Devhour,
}

impl Scenario {
    pub const ALL: [Scenario; 7] = [
        Scenario::Fleet,
        Scenario::Oct29,
        Scenario::Aug17Token,
        Scenario::Agents429,
        Scenario::Cold,
        Scenario::Team,
        Scenario::Devhour,
    ];
}
