//! The optional parts' hooks as a build without their cargo feature has them: each does
//! nothing and answers `None`, and the types only a feature can make are empty enums, so no
//! code path can reach them. The engine calls the same names either way (`gateway::…`,
//! `team::…`); the real hooks live in `gateway.rs` and `team.rs`.

/// Feature `gateway` off: no gateway mode (`weir serve --gateway` says which build has it).
#[cfg(not(feature = "gateway"))]
pub(super) mod gateway {
    use super::super::{EngineError, EngineOptions};
    use crate::config::Settings;
    use crate::control::Control;
    use crate::events::Bus;
    use crate::identity::IdentityKey;
    use crate::pipeline::Proxy;
    use crate::queue::QueueState;
    use crate::secrets::SecretStore;
    use crate::upstream::Upstreams;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use tokio::sync::oneshot;

    pub(in crate::engine) fn check(_: &EngineOptions) -> Result<(), EngineError> {
        Ok(())
    }

    pub(in crate::engine) fn listen(_: &EngineOptions) -> Option<(SocketAddr, SocketAddr)> {
        None
    }

    pub(in crate::engine) async fn admin_token(
        _: &EngineOptions,
        _: &SecretStore,
    ) -> Result<Option<String>, EngineError> {
        Ok(None)
    }

    pub(in crate::engine) fn identity_key(_: &EngineOptions) -> Option<IdentityKey> {
        None
    }

    pub(in crate::engine) fn ca_certificate(
        _: &EngineOptions,
    ) -> Option<crate::intercept::CaCertificate> {
        None
    }

    pub(in crate::engine) enum SharedQueue {}

    pub(in crate::engine) fn shared_queue(_: &EngineOptions) -> Option<SharedQueue> {
        None
    }

    impl SharedQueue {
        pub async fn open(
            self,
            _: SecretStore,
            _: &Settings,
            _: &Arc<Upstreams>,
            _: &Bus,
        ) -> Result<QueueState, EngineError> {
            match self {}
        }
    }

    pub(in crate::engine) fn base_url(_: &EngineOptions, _: SocketAddr) -> Option<String> {
        None
    }

    pub(in crate::engine) fn status(
        _: &EngineOptions,
        _: SocketAddr,
        _: Option<SocketAddr>,
        _: &str,
    ) -> Option<crate::status::GatewayStatus> {
        None
    }

    pub(in crate::engine) enum Doors {}

    pub(in crate::engine) fn doors(
        _: &EngineOptions,
        _: Option<tokio::net::TcpListener>,
        _: Option<String>,
    ) -> Option<Doors> {
        None
    }

    impl Doors {
        pub fn serve(
            self,
            _: tokio::net::TcpListener,
            _: &Arc<Proxy>,
            _: &Arc<Control>,
            _: &Settings,
            _: oneshot::Receiver<()>,
        ) -> std::future::Ready<()> {
            match self {}
        }
    }
}

/// Feature `team` off: a config naming `[team]` is refused at load (`config::load`), so there
/// is never a link to start.
#[cfg(not(feature = "team"))]
pub(super) mod team {
    use super::super::{EngineOptions, Parts};
    use crate::control::Control;
    use crate::secrets::SecretStore;
    use crate::team::TeamSecrets;
    use std::sync::Arc;

    pub(in crate::engine) async fn secrets(
        _: &EngineOptions,
        _: &SecretStore,
    ) -> Option<TeamSecrets> {
        None
    }

    pub(in crate::engine) fn start(
        _: &EngineOptions,
        _: &Parts,
        _: &Arc<Control>,
        _: Option<TeamSecrets>,
    ) {
    }
}
