//! # Weir's storm lab
//!
//! Loopback-only experiments that show what Weir does to the load a fleet of misbehaving
//! clients puts on an upstream, and the numbers behind `BENCHMARKS.md`.
//!
//! # Layout
//! - [`timeline`]: per-second request counters (the upstream's own count, the chart data).
//! - [`upstream`]: the lab upstream — a real HTTP/1.1 server with latency, failures, a rate
//!   limit, a Copilot token endpoint, creates it can count, and failover.
//! - [`client`]: the raw hyper client the simulated tools use, direct or through Weir as an
//!   HTTP proxy (absolute-form requests), and [`policy`]: how a client reissues on a timeout.
//! - [`fleet`]: N clients each sending one logical request per period, and [`worker`]: running
//!   a fleet in a child process so its sockets do not count against the upstream's.
//! - [`weir_ctl`]: starts the Weir engine (the library, in process) in front of an upstream.
//! - [`scenarios`]: the experiments (`fleet`, `oct29`, `aug17-token`, `agents-429`, `cold`,
//!   `team`); [`nats`]: the real `nats-server` the team scenario starts.
//! - [`report`]: the Markdown tables and the SVG charts.
//! - [`stats`]: latency percentiles; [`hold`]: idle connections for the memory check;
//!   [`run`]: runs scenarios and writes the report; [`bare_proxy`]: the hyper-only forward
//!   proxy the overhead benchmark measures as the floor under Weir's pass-through;
//!   [`bare_tls`]: the TLS server answering from memory (hyper or h2 alone), the floor under
//!   Weir's intercepted cache hit.

pub mod bare_proxy;
pub mod bare_tls;
pub mod client;
pub mod error;
pub mod fleet;
pub mod hold;
pub mod nats;
pub mod policy;
pub mod report;
pub mod run;
pub mod scenarios;
pub mod stats;
pub mod timeline;
pub mod upstream;
pub mod weir_ctl;
pub mod worker;

pub use error::LabError;
