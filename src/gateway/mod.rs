//! Team gateway mode (`weir serve --gateway`): the same engine as on a laptop, reached by many
//! developers' tools through one egress.
//!
//! - [`setup`]: reads what `[gateway]` names (certificate and key, admin token, PostgreSQL
//!   password, the replicas' shared key) into a [`Gateway`], with errors that name the file.
//! - `listener`: a TLS-only listener; a client outside the allow-list gets a 403 problem, a
//!   plain-HTTP client a 400 that says to use TLS.
//! - `proxy_protocol`: PROXY protocol v1/v2 headers from trusted load balancers, so the
//!   allow-list sees the client's address behind a balancer.
//! - `admin`: the control API on its own listener, behind the admin token; the clients'
//!   listener refuses control calls.
//! - `signals`: breaker openings and upstream-wide cooldowns shared between replicas
//!   through PostgreSQL.
//!
//! GitHub tokens pass through as they are (the gateway holds none of its own), so GitHub's
//! per-user rules, and Weir's per-identity cache, limits and cooldowns, stay per developer.

pub(crate) mod admin;
pub(crate) mod listener;
pub(crate) mod proxy_protocol;
pub mod setup;
pub(crate) mod signals;

pub use setup::{Gateway, GatewayError};

/// The base of the gateway's problem `type` URLs: `gateway.public_url`, else `https://` and
/// the clients' listener's address (a wildcard address becomes the machine's host name).
pub(crate) fn public_base_url(
    settings: &crate::config::GatewaySettings,
    bound: std::net::SocketAddr,
) -> String {
    if let Some(u) = &settings.public_url {
        return u.clone();
    }
    let host = if bound.ip().is_unspecified() {
        crate::queue::pg::owner_name()
            .split('/')
            .next()
            .unwrap_or("localhost")
            .to_string()
    } else {
        match bound.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        }
    };
    format!("https://{host}:{}", bound.port())
}
