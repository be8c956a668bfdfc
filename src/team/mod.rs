//! Team outage signals over NATS (`[team]`, docs/team.md): each Weir publishes small signed
//! facts about its upstreams, and acts when enough teammates see an upstream failing, so the
//! team finds an outage once instead of once per laptop.
//!
//! - [`fact`]: the published message (versioned; nothing in it can identify a person, a
//!   repository or a token) and its subjects (`weir.v1.<upstream>.breaker.<sender>`);
//! - [`seal`]: HMAC-SHA256 signatures with the team key, and what they protect against;
//! - [`credentials`]: the team key and NATS login, from the keychain;
//! - `peers`: the decision logic (K teammates within T, counted by the name the server
//!   vouches for; local evidence wins; a cap on holds), pure;
//! - `tls`: TLS to the NATS server (OS roots plus `ca_file`) and the diagnosis that names
//!   why a handshake fails;
//! - `link`: the NATS client (reconnecting) and the publish / receive tasks. Nothing here is
//!   on the request path: it only sets the admission gate's caution, trips its breaker or
//!   holds its upstream-wide cooldown.

//!
//! The link, its decisions and its TLS are the `team` cargo feature (async-nats); the key, the
//! login and the fact format stay in every build, so `weir team` manages the keychain entries
//! and a config naming `[team]` fails with the feature to build (`config::load`).

pub mod credentials;
pub mod fact;
#[cfg(feature = "team")]
mod link;
#[cfg(feature = "team")]
pub(crate) mod peers;
pub mod seal;
#[cfg(feature = "team")]
mod tls;

pub use credentials::{NatsAuth, TeamSecrets};
pub use seal::{new_key_hex, TeamKey};

#[cfg(feature = "team")]
pub(crate) use link::{Team, TeamParts};

#[cfg(feature = "team")]
use std::path::Path;

/// This install's anonymous id on the team: 16 random bytes in the data dir (`team-id`, 0600),
/// unrelated to the control API's install id and to any account, so teammates can count
/// distinct Weirs and nothing else.
#[cfg(feature = "team")]
pub(crate) fn peer_id(data_dir: &Path) -> String {
    let path = data_dir.join("team-id");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim();
        if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return s.to_ascii_lowercase();
        }
    }
    let id = hex::encode(rand::random::<[u8; 16]>());
    match std::fs::write(&path, &id).and_then(|_| crate::paths::restrict(&path, 0o600)) {
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "cannot store the team id; using one for this run only")
        }
    }
    id
}

#[cfg(all(test, feature = "team"))]
mod tests {
    #[test]
    fn peer_id_is_stable_per_data_dir() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let id = super::peer_id(a.path());
        assert_eq!(id.len(), 32);
        assert_eq!(super::peer_id(a.path()), id);
        assert_ne!(super::peer_id(b.path()), id);
    }
}
