//! The team link's hooks into the engine (feature `team`): its secrets read at start, and the
//! link started with the background work. Built without the feature, the stubs of the same
//! names in `without.rs` stand in.

use super::{EngineOptions, Parts};
use crate::control::Control;
use crate::secrets::SecretStore;
use crate::team::TeamSecrets;
use std::sync::Arc;

/// The team key and NATS login, with `[team]`: as the options give them (tests, the lab), else
/// from the keychain.
pub(super) async fn secrets(opts: &EngineOptions, store: &SecretStore) -> Option<TeamSecrets> {
    opts.settings.team.as_ref()?;
    Some(match opts.team_secrets.clone() {
        Some(given) => given,
        None => TeamSecrets::load(store).await,
    })
}

/// Starts the team link (`[team]`); it connects in the background and never delays start.
pub(super) fn start(
    opts: &EngineOptions,
    parts: &Parts,
    control: &Arc<Control>,
    secrets: Option<TeamSecrets>,
) {
    let (Some(settings), Some(secrets)) = (parts.settings.team.clone(), secrets) else {
        return;
    };
    let weak = Arc::downgrade(control);
    let team = crate::team::Team::start(crate::team::TeamParts {
        settings,
        secrets,
        me: crate::team::peer_id(&opts.data_dir),
        upstreams: parts.upstreams.clone(),
        bus: parts.bus.clone(),
        indicator: Box::new(move || {
            let ctl = weak.upgrade()?;
            let snap = ctl.github_snapshot()?;
            crate::team::fact::Indicator::parse(snap.indicator.as_deref()?)
        }),
    });
    if control.team.set(team).is_err() {
        tracing::warn!("the team link was started twice; keeping the first");
    }
}
