//! # Weir
//!
//! A localhost proxy between a developer's tools and GitHub's Copilot cloud-agent services, so
//! that a wobbling control plane does not turn into a storm: identical calls are coalesced,
//! list/view/token answers are cached per identity, creates are never lost or doubled, and
//! Weir's own errors are RFC 9457 problems.
//!
//! # Public API
//! [`start`] an engine with [`EngineOptions`] (settings from [`config`]); the [`EngineHandle`]
//! gives the typed [`status::StatusSnapshot`] and [`events::Event`] stream, the [`mode`] and
//! shutdown.
//! [`intercept`] manages the local CA, [`client_setup`] points tools at Weir (`weir env`, VS
//! Code, CA install, doctor checks) and [`secrets`] is the one keychain-backed secret store:
//! the CLI and the tray use the same code.
//!
//! # Layout (each part owns its state; arrows are the only imports between parts)
//! - [`engine`]: builds the parts and wires them; the front door (`engine::router`).
//! - `pipeline`: the request path as ordered phases (classify → identity → limits →
//!   cache/coalesce → admission → attempt → rescue → response headers); owns the cache,
//!   coalescer, client rate limiter and create dedupe state. → upstream, queue, intercept,
//!   mode
//! - `upstream`: the client, connection routing, admission (cooldown → breaker → bulkhead)
//!   and the one attempt-and-retry machinery, shared by requests and replays.
//! - `accounts`: which GitHub account each credential belongs to (one `GET /user` per
//!   credential, off the request path) and the rule for when credentials share list/view
//!   answers. → upstream
//! - `queue`: the durable create queue (SQLite + keychain, or PostgreSQL shared by gateway
//!   replicas) and its replay worker. → upstream
//! - `reload`: settings changes while running (settings API, the watched config file): validate,
//!   put in force, reconfigure parts in place, report restart-only keys. → pipeline, upstream
//! - `sessions`: the agent-sessions companion — polls the stored token's session list through
//!   Weir's own listener, keeps counts and recent sessions, announces changes. → pipeline
//! - [`handoff`]: local-agent hand-off offers (#14): a create offered to the `[local_agent]`
//!   command waits in the queue as `offered`; a confirmation runs the command once, a decline
//!   or expiry puts it back in the queue. → queue
//! - `control`: `/_weir/api/*`, `/metrics`, the PAC, the dashboard. → pipeline, queue, reload,
//!   sessions, handoff
//! - [`team`]: team outage signals over NATS (`[team]`): publishes signed facts about the
//!   upstreams, sets their gates' caution / trips breakers / holds cooldowns. → upstream
//! - [`gateway`]: team gateway mode: TLS listeners, allow-list, admin door, holds shared
//!   between replicas. → pipeline, control, queue
//! - [`client_setup`]: pointing tools at Weir, for the CLI and the tray. → config, intercept
//! - [`secrets`]: every keychain service/account name, namespaced per data dir.
//! - [`mode`]: automatic (with its offline sub-state and probes), cache only, pass-through;
//!   the choice kept in the data dir. → upstream
//! - [`network`]: whether the network is metered — the OS's report (NetworkManager over
//!   D-Bus on Linux) and the override kept in the data dir. → config, mode
//! - `cache`: the per-identity cache in memory, and its list/view entries sealed into
//!   `cache.sqlite` by a writer thread (key in the keychain). → secrets, status
//! - Leaves: [`config`], `problem` (+ `problem_kind`), [`events`], [`status`], `coalesce`,
//!   `identity`, `surface`, `stats`, `body`, `body_budget`, `time_fmt`, `paths`, `server`, `github_status`.

// `Problem` (about 200 bytes) is the error of every request-path function: it becomes the
// response body, so it is built once and moved, never propagated through deep stacks.
#![allow(clippy::result_large_err)]

pub(crate) mod accounts;
pub(crate) mod body;
pub(crate) mod body_budget;
pub(crate) mod cache;
pub mod client_setup;
pub(crate) mod coalesce;
pub mod config;
pub(crate) mod control;
pub mod engine;
pub mod events;
#[cfg(feature = "gateway")]
pub mod gateway;
pub(crate) mod github_status;
pub mod handoff;
pub(crate) mod identity;
pub mod intercept;
pub mod mode;
pub mod network;
pub(crate) mod paths;
pub(crate) mod pipeline;
pub mod policy;
pub(crate) mod problem;
pub(crate) mod problem_kind;
pub(crate) mod queue;
pub(crate) mod reload;
pub mod secrets;
pub(crate) mod server;
pub(crate) mod sessions;
pub(crate) mod stats;
pub mod status;
pub(crate) mod surface;
pub mod team;
pub mod time_fmt;
pub(crate) mod upstream;

pub use cache::ClearError;
pub use engine::{start, EngineError, EngineHandle, EngineOptions};
pub use problem_kind::ProblemKind;

/// Weir's own HTTP client, for the CLI's calls to a running Weir's control API and `weir
/// doctor`'s upstream checks (the same client and timeouts the engine uses).
pub mod http_client {
    pub use crate::body::{empty, full, Body};
    pub use crate::upstream::{FetchError, Timeouts, UpstreamClient};
}

/// Internals exposed only for the criterion benchmarks in `crates/lab` (not a stable API).
#[doc(hidden)]
pub mod bench_api {
    pub use crate::cache::CacheKey;
    pub use crate::identity::IdentityKey;
    pub use crate::problem::Problem;
}
