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
//! Code, CA install, doctor checks) and [`secrets`] is the one secret store (OS keychain, or
//! owner-only files where there is none):
//! the CLI and the tray use the same code.
//!
//! # Layout
//! Each part owns its state and imports only parts in the layers below its own: layer 0
//! imports nothing of the crate, and a part's layer is one above the highest it imports.
//! `scripts/module-deps.sh` prints the graph and these layers, and fails on a cycle or when
//! this list (or the README's) is not the graph.
//!
//! **Layer 0** — leaves
//! - `body`: the one boxed body type; `identity`: the keyed hash of a request's credentials;
//! - [`control_proof`]: the challenge a Weir answers to prove it holds the control secret;
//! - [`paths`]: where config and data live, private files (the tray's launcher page too);
//! - `problem_kind`: the kinds of problem Weir answers with, and their pages;
//! - `surface`: which tool sent a request (`User-Agent`); [`time_fmt`]: RFC 3339 and `now_ms`;
//! - [`view`]: plain data the event stream and the status document share (mode, metered
//!   source, who chose, share mode, settings errors, session summaries).
//!
//! **Layer 1**
//! - [`policy`]: the fallback policy graph — rules, the org policy file, the decision log;
//! - `problem`: RFC 9457 problem responses; [`secrets`]: the secret store (keychain or files).
//!
//! **Layer 2**
//! - [`config`]: the file, its validation (file, line, key) and the typed `Settings` (its files
//!   import no circle: `config::error` is their leaf, `scripts/module-deps.sh` checks it);
//! - `body_budget`: one bound on request bytes buffered at once.
//!
//! **Layer 3**
//! - `accounts`: which GitHub account each credential belongs to (`GET /user` through a
//!   `UserApi` handle the upstreams implement) and the rule for when credentials share;
//! - [`events`]: typed events and the bus; [`intercept`]: the local CA and TLS interception;
//! - `server`: the listener (bounded accept, HTTP/1.1 + HTTP/2, one write for the answers an
//!   HTTP/2 poll makes, drain); `stats`: counters.
//!
//! **Layer 4**
//! - `upstream`: the client, connection routing, admission (cooldown → breaker → bulkhead),
//!   the one attempt-and-retry machinery and per-model breakers;
//! - [`network`]: whether the network is metered (the OS's report, the override).
//!
//! **Layer 5**
//! - [`mode`]: automatic (with its offline detector), cache only, pass-through;
//! - [`client_setup`]: pointing tools at Weir, for the CLI and the tray;
//! - `github_status`: the GitHub Status watcher wired to Weir's own client.
//!
//! **Layer 6**
//! - [`status`]: the typed status document, composed of the parts' own views.
//!
//! **Layer 7**
//! - `cache`: the per-identity cache, and its entries sealed into `cache.sqlite`;
//! - `queue`: the durable create queue (SQLite + keychain, or PostgreSQL) and its replays;
//! - [`team`]: team outage signals over NATS.
//!
//! **Layer 8**
//! - `coalesce`: single flight; [`handoff`]: local-agent hand-off offers (#14).
//!
//! **Layer 9**
//! - `pipeline`: the request path as ordered phases behind one front door (request id,
//!   header cap) → classify → identity → one request context → a class handler's step →
//!   the driver's admission (client rate) → attempt → rescue → response headers → one
//!   recording of its counters and decision log.
//!
//! **Layer 10**
//! - `reload`: settings changes while running; `sessions`: the agent-sessions companion.
//!
//! **Layer 11**
//! - `control`: `/_weir/api/*`, `/metrics`, the PAC, the dashboard.
//!
//! **Layer 12**
//! - [`gateway`]: team gateway mode (TLS listeners, allow-list, admin door, shared holds).
//!
//! **Layer 13**
//! - [`engine`]: builds the parts and wires them, each optional part through its hooks
//!   (`engine::gateway`, `engine::team`; without their feature, the stubs in `engine::without`);
//!   the front door (`engine::router`).
//!
//! **Layer 14**
//! - `fuzz_entry`: Weir's readers of untrusted bytes, for the fuzz targets (`fuzz/`; feature
//!   `fuzzing` only).

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
pub mod control_proof;
pub mod engine;
pub mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_entry;
#[cfg(feature = "gateway")]
pub mod gateway;
pub(crate) mod github_status;
pub mod handoff;
pub(crate) mod identity;
pub mod intercept;
pub mod mode;
pub mod network;
pub mod paths;
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
pub mod view;

pub use cache::ClearError;
pub use engine::{start, EngineError, EngineHandle, EngineOptions};
pub use problem_kind::ProblemKind;

/// Weir's own HTTP client, for the CLI's calls to a running Weir's control API and `weir
/// doctor`'s upstream checks (the same client and timeouts the engine uses).
pub mod http_client {
    pub use crate::body::{empty, full, Body};
    pub use crate::upstream::{FetchError, Timeouts, UpstreamClient};
}

/// The queue backends by themselves, for the tests that run the transition table against
/// both (tests/queue_machine.rs).
#[doc(hidden)]
pub mod queue_api {
    #[cfg(feature = "gateway")]
    pub use crate::queue::backend::open_postgres;
    pub use crate::queue::backend::{open_sqlite, BackendKind, QueueBackend};
}

/// Internals exposed only for the criterion benchmarks in `crates/lab` (not a stable API).
#[doc(hidden)]
pub mod bench_api {
    pub use crate::cache::CacheKey;
    pub use crate::identity::IdentityKey;
    pub use crate::problem::Problem;
    pub use crate::server::InlineFirst;

    /// An upstream called `name` (at a loopback origin it is never asked), for cache keys
    /// made outside an engine: a key names its upstream by its name.
    pub fn upstream_named(name: &str) -> crate::config::UpstreamSettings {
        let origin = crate::config::Origin::parse("http://127.0.0.1:9").expect("a valid origin");
        crate::config::UpstreamSettings {
            name: name.to_string(),
            origin,
            fallback: None,
            net: Default::default(),
            status_components: Vec::new(),
        }
    }
}
