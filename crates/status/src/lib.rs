//! Weir's GitHub Status watcher: polls a Statuspage v2 page (githubstatus.com by default)
//! for the tray and dashboard, and reports changes as events.
//!
//! # Layout
//! - [`config`]: `[status]` settings → validated [`StatusConfig`]; regions; jitter.
//! - [`fetch`]: the [`Fetch`] trait through which all HTTP goes (the engine's client).
//! - `wire`: serde shapes of `summary.json` and `incidents/unresolved.json`.
//! - `endpoint`: one URL with conditional requests (ETag / Last-Modified, 304 reuse).
//! - `project`: raw documents → watched components and relevant incidents.
//! - [`model`]: the [`GithubStatus`] snapshot (dashboard JSON).
//! - [`mod@diff`]: old snapshot + new snapshot → [`StatusEvent`]s (pure).
//! - `schedule`: interval, exponential backoff, jitter.
//! - `watcher`: [`StatusWatcher`] (one check) and [`StatusHandle`] (the background task).
//!
//! An unreachable or unintelligible status page is `Reachability::Unknown`, never an
//! outage: the last good data is kept and marked stale.

pub mod config;
pub mod diff;
mod endpoint;
pub mod fetch;
pub mod model;
mod project;
mod schedule;
mod watcher;
mod wire;

pub use config::{ConfigError, Jitter, Region, StatusConfig, StatusSettings, DEFAULT_COMPONENTS};
pub use diff::{diff, StatusEvent};
pub use endpoint::{Freshness, PollError};
pub use fetch::{BoxError, BoxFuture, Fetch, FetchError, FetchResponse};
pub use model::{ComponentState, GithubStatus, Incident, Reachability};
pub use schedule::next_delay;
pub use watcher::{PollReport, StatusHandle, StatusWatcher};
