//! The per-identity response cache: keys (`key`), stored entries and their freshness (`entry`),
//! the bounded, least-recently-used store (`store`), degradation-aware freshness while an
//! upstream struggles (`pace`), the longest log each caller was given (`served`: logs never
//! shrink), and keeping list/view/log entries across restarts: sealed records (`record`) in an
//! SQLite file (`disk`) written by one thread (`persist`).

mod disk;
mod entry;
mod key;
mod pace;
mod persist;
mod record;
mod served;
mod store;

pub use entry::{Freshness, Stored};
pub use key::{canonical_params, CacheKey};
pub use pace::{Pace, Paced};
pub use persist::ClearError;
pub use served::{extends, Served, Settled};
pub use store::{Cache, Durability};
