//! The per-identity response cache: keys (`key`), stored entries and their freshness (`entry`),
//! the bounded, least-recently-used store (`store`), degradation-aware freshness while an
//! upstream struggles (`pace`), and keeping list/view entries across restarts: sealed records
//! (`record`) in an SQLite file (`disk`) written by one thread (`persist`).

mod disk;
mod entry;
mod key;
mod pace;
mod persist;
mod record;
mod store;

pub use entry::{Freshness, Stored};
pub use key::{canonical_params, CacheKey};
pub use pace::{Pace, Paced};
pub use persist::ClearError;
pub use store::{Cache, Durability};
