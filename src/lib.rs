//! # Weir
//!
//! A localhost proxy between a developer's tools and GitHub's Copilot cloud-agent services, so
//! that a wobbling control plane does not turn into a storm: identical calls are coalesced,
//! list/view/token answers are cached per identity, and Weir's own errors are RFC 9457 problems.
//!
//! # Layout
//! - [`client_setup`]: pointing tools at Weir (`weir env`, VS Code, CA install, doctor checks),
//!   for the CLI and the tray.
//! - [`config`]: the TOML file, its validation (file/line errors) and typed runtime settings.
//! - [`engine`]: starts the listener and owns shared state; [`engine::EngineHandle`] is the API
//!   the CLI, the tray and tests use.
//! - [`server`]: accept loop, connection limits, slow-client guard, graceful drain.
//! - [`proxy`]: the request path (control / CONNECT / managed / pass-through), in order.
//! - [`cache`], [`coalesce`]: the per-identity cache and single-flight coalescing.
//! - [`github_status`]: the GitHub Status watcher wired to the engine's client and events.
//! - [`identity`], [`surface`]: who is asking (keyed credential hash) and with which tool.
//! - [`upstream`]: the pooled rustls HTTP client and typed fetch failures.
//! - [`resilience`]: per-upstream gate (cooldown, breaker, bulkhead) and the one retry layer.
//! - [`queue`]: creates never lost or doubled: dedupe, durable SQLite queue, replay worker.
//! - [`secrets`]: the one keychain-backed secret store; every service/account name, namespaced
//!   per data dir.
//! - [`upstream_pool`]: how upstream connections are made (`connect_to`, `ca_file`, `upstream_proxy`).
//! - [`intercept`]: TLS interception of managed https upstreams; the local CA's lifecycle.
//! - [`problem`]: problem+json documents and their explanation pages.
//! - [`control`]: `/_weir/api/*`, `/metrics`, problem pages; Host/Origin checks.
//! - [`stats`], [`events`]: counters and the event stream.
//! - [`paths`]: OS config/data directories.

// `Problem` (about 200 bytes) is the error of every request-path function: it becomes the
// response body, so it is built once and moved, never propagated through deep stacks.
#![allow(clippy::result_large_err)]

pub mod body;
pub mod cache;
pub mod client_setup;
pub mod coalesce;
pub mod config;
pub mod control;
pub mod engine;
pub mod events;
pub mod github_status;
pub mod identity;
pub mod intercept;
pub mod paths;
pub mod problem;
pub mod proxy;
pub mod queue;
pub mod resilience;
pub mod secrets;
pub mod server;
pub mod stats;
pub mod surface;
pub mod time_fmt;
pub mod upstream;
pub mod upstream_pool;

pub use engine::{start, EngineError, EngineHandle, EngineOptions};
