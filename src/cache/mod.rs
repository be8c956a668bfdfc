//! The per-identity response cache: keys (`key`), stored entries and their freshness (`entry`),
//! and the bounded, least-recently-used store (`store`).

mod entry;
mod key;
mod store;

pub use entry::{Freshness, Stored};
pub use key::CacheKey;
pub use store::Cache;
