//! Team gateway mode (`weir serve --gateway`): the same engine as on a laptop, reached by many
//! developers' tools through one egress.
//!
//! - [`setup`]: reads what `[gateway]` names (certificate and key, admin token, PostgreSQL
//!   password, the replicas' shared key) into a [`Gateway`], with errors that name the file.
//! - [`listener`]: a TLS-only listener; a client outside the allow-list gets a 403 problem, a
//!   plain-HTTP client a 400 that says to use TLS.
//! - [`admin`]: the control API on its own listener, behind the admin token; the clients'
//!   listener refuses control calls.
//! - [`signals`]: breaker openings and upstream-wide cooldowns shared between replicas
//!   through PostgreSQL.
//!
//! GitHub tokens pass through as they are (the gateway holds none of its own), so GitHub's
//! per-user rules, and Weir's per-identity cache, limits and cooldowns, stay per developer.

pub(crate) mod admin;
pub(crate) mod listener;
pub mod setup;
pub(crate) mod signals;

pub use setup::{Gateway, GatewayError};
