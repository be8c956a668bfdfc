//! Starts the Weir engine (the library, in this process) in front of a lab upstream, with a
//! configuration written the way a user would write it.

use crate::LabError;
use std::net::SocketAddr;
use tempfile::TempDir;
use weir::{EngineHandle, EngineOptions};

/// Weir's cache settings for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caching {
    /// The shipped defaults (list fresh 15 s, stale-while-revalidate 60 s, ...).
    Default,
    /// `list` and `view` never served from the cache: the only saving left is coalescing.
    Off,
}

/// Turns Weir's per-client rate limit off (for rows that isolate coalescing).
pub const NO_RATE_LIMIT: &str = "[rate_limit]\nenabled = false\n";

/// The lab's Weir configuration: one managed upstream and `extra` TOML appended (for
/// scenario-specific keys). One lab Weir stands in for every developer's own Weir, so the
/// limits that are per Weir (connections, the per-upstream bulkhead) are raised to fit a
/// 1,000-client fleet; the per-client ones (rate limit, cache, coalescing) stay as shipped.
/// No keychain runs in the lab, so the create queue keeps credentials in memory.
pub fn lab_config(upstream_origin: &str, caching: Caching, extra: &str) -> String {
    let mut s = format!(
        "default_upstreams = false\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"lab\"\norigin = \"{upstream_origin}\"\n\n\
         [limits]\n# A 1,000-client buggy fleet holds ~10,000 connections open.\nmax_connections = 30000\n\
         header_read_timeout = \"30s\"\ndrain_timeout = \"1s\"\n\n\
         [bulkhead]\nmax_in_flight = 4096\nmax_queue = 4096\n\n[queue]\ncredentials = \"memory\"\n"
    );
    if caching == Caching::Off {
        for class in ["list", "view"] {
            s.push_str(&format!(
                "\n[classes.{class}]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"0s\"\n"
            ));
        }
    }
    if !extra.is_empty() {
        s.push('\n');
        s.push_str(extra);
        s.push('\n');
    }
    s
}

/// A Weir engine running for one lab row, with its own temporary data directory.
pub struct LabWeir {
    handle: EngineHandle,
    _data: TempDir,
}

impl LabWeir {
    /// Starts Weir with [`lab_config`].
    pub async fn start(
        upstream_origin: &str,
        caching: Caching,
        extra: &str,
    ) -> Result<LabWeir, LabError> {
        LabWeir::start_with(&lab_config(upstream_origin, caching, extra)).await
    }

    /// Starts Weir with a whole configuration file's text.
    pub async fn start_with(toml: &str) -> Result<LabWeir, LabError> {
        LabWeir::start_team(toml, None).await
    }

    /// [`LabWeir::start_with`], with the team key and NATS login `[team]` uses (the lab has no
    /// keychain).
    pub async fn start_team(
        toml: &str,
        team: Option<weir::team::TeamSecrets>,
    ) -> Result<LabWeir, LabError> {
        let settings = weir::config::parse_str(toml, "lab.toml")?;
        let data = tempfile::tempdir()?;
        let mut opts = EngineOptions::new(settings, data.path().to_path_buf());
        opts.team_secrets = team;
        let handle = weir::start(opts).await?;
        Ok(LabWeir {
            handle,
            _data: data,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    pub fn handle(&self) -> &EngineHandle {
        &self.handle
    }

    /// Upstream requests Weir made, per its own counters (a cross-check of the upstream's).
    pub async fn upstream_requests(&self) -> u64 {
        self.handle
            .status()
            .await
            .upstreams
            .iter()
            .map(|u| u.totals.upstream_requests)
            .sum()
    }

    pub async fn stop(self) {
        self.handle.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_configs_validate() {
        for caching in [Caching::Default, Caching::Off] {
            let s =
                weir::config::parse_str(&lab_config("http://127.0.0.1:9", caching, ""), "lab.toml")
                    .unwrap();
            assert_eq!(s.upstreams.len(), 1);
            let list = s.classes.get(weir::config::RouteClass::List);
            assert_eq!(list.fresh_ttl.is_zero(), caching == Caching::Off);
        }
    }
}
