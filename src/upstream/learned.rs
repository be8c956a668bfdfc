//! Copilot API hosts learned at run time. A Copilot token answer names the account's API host
//! (`endpoints.api`, e.g. `https://api.individual.githubcopilot.com`); VS Code sends its agent
//! calls there. A `*.githubcopilot.com` host named so that no configured upstream covers
//! becomes managed with the same policies as the built-in Copilot hosts: its own gate (breaker,
//! bulkhead, cooldowns), counters and cache keys, TLS interception, no fallback. A host outside
//! `githubcopilot.com` is never learned, and nothing but `https` on port 443.
//!
//! Upstreams are indexed by position ([`UpstreamIndex`]) everywhere on the request path, so a
//! learned host takes one of [`SPARE`] slots made empty at start: index `configured + slot`. A slot is set
//! once and never reused, so an index handed out stays valid for the life of the engine, and
//! lookups of configured upstreams cost what they did. The learned set is not kept across a
//! restart (the next token answer names the host again). The cache and dedupe keys hash the
//! upstream's name (`learned:HOST`), not its index, so a learned host's list and view answers
//! are written to the disk cache like a configured upstream's (tokens never are) and answer for
//! that host again after a restart, once it is learned again.

use super::admission::Gate;
use super::{Upstream, UpstreamIndex};
use crate::config::{is_copilot_host, Origin, ResilienceSettings, UpstreamSettings};
use crate::stats::UpstreamCounters;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};

/// How many hosts may be learned in one run (an account has one API host; a few accounts on
/// one machine have a few).
pub const SPARE: usize = 8;

/// The learned hosts and the spare slots they take.
pub(crate) struct Learned {
    /// Index of the first slot (the number of configured upstreams).
    base: usize,
    slots: Box<[OnceLock<Upstream>]>,
    /// Host → index, of the slots set so far; also serialises learning.
    hosts: Mutex<Vec<(String, UpstreamIndex)>>,
    /// The upstream (configured or learned) of the Copilot API host most recently announced.
    announced: Mutex<Option<UpstreamIndex>>,
    /// Told whenever a slot is set (its replay worker starts then).
    learned_one: tokio::sync::Notify,
}

/// What a token answer (or gh's GraphQL `copilotEndpoints`) announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Announced {
    /// A configured upstream already manages the host.
    Configured(UpstreamIndex),
    /// The host was learned just now, or earlier.
    Learned(UpstreamIndex),
    /// Not learned: outside githubcopilot.com, not https:443, or no slot left.
    Refused(String),
}

impl Learned {
    pub fn new(base: usize) -> Learned {
        Learned {
            base,
            slots: (0..SPARE).map(|_| OnceLock::new()).collect(),
            hosts: Mutex::new(Vec::new()),
            announced: Mutex::new(None),
            learned_one: tokio::sync::Notify::new(),
        }
    }

    /// The indices the spare slots take, set or not.
    pub fn indices(&self) -> impl Iterator<Item = UpstreamIndex> {
        (self.base..self.base + SPARE).map(UpstreamIndex::at)
    }

    /// Waits until slot `up` is set (at once when it is).
    pub async fn wait_for(&self, up: UpstreamIndex) {
        loop {
            let notified = self.learned_one.notified();
            if self.get(up).is_some() {
                return;
            }
            notified.await;
        }
    }

    /// The learned upstream at index `up` (≥ base), if that slot is set.
    pub fn get(&self, up: UpstreamIndex) -> Option<&Upstream> {
        self.slots.get(up.index().checked_sub(self.base)?)?.get()
    }

    /// Every learned upstream with its index, in the order learned.
    pub fn iter(&self) -> impl Iterator<Item = (UpstreamIndex, &Upstream)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((UpstreamIndex::at(self.base + i), s.get()?)))
    }

    /// The index of the learned upstream for `https://host:port`.
    pub fn find(&self, scheme: &str, host: &str, port: u16) -> Option<UpstreamIndex> {
        if !scheme.eq_ignore_ascii_case("https") || port != 443 {
            return None;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        hosts.iter().find(|(h, _)| *h == host).map(|(_, i)| *i)
    }

    pub fn announced(&self) -> Option<UpstreamIndex> {
        *self.announced.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns the API base URL `api` (`https://host[:443][/]`): managed from now on unless it is
    /// refused. `configured` finds a configured upstream for it.
    pub fn learn(
        &self,
        api: &str,
        configured: impl Fn(&Origin) -> Option<UpstreamIndex>,
        resilience: &ResilienceSettings,
    ) -> Announced {
        let origin = match Origin::parse(api.trim()) {
            Ok(o) => o,
            Err(m) => return Announced::Refused(m),
        };
        if let Some(up) = configured(&origin) {
            self.set_announced(up);
            return Announced::Configured(up);
        }
        if origin.scheme().as_str() != "https"
            || origin.port() != 443
            || !is_copilot_host(origin.host())
            || origin.host().parse::<std::net::IpAddr>().is_ok()
        {
            return Announced::Refused(format!(
                "`{origin}` is not an https host in {}",
                crate::config::COPILOT_DOMAIN
            ));
        }
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, up)) = hosts.iter().find(|(h, _)| *h == origin.host()) {
            let up = *up;
            drop(hosts);
            self.set_announced(up);
            return Announced::Learned(up);
        }
        let slot = hosts.len();
        let Some(cell) = self.slots.get(slot) else {
            return Announced::Refused(format!(
                "already {SPARE} learned hosts; add `{origin}` as an [[upstream]] to manage it"
            ));
        };
        let settings = UpstreamSettings {
            name: learned_name(origin.host()),
            status_components: crate::config::default_status_components(&origin),
            origin: origin.clone(),
            fallback: None,
            net: Default::default(),
        };
        let gate = match Gate::new(&settings, resilience) {
            Ok(g) => g,
            Err(e) => return Announced::Refused(e),
        };
        // Set before the host is published: a lookup that finds the index finds the slot set.
        let _ = cell.set(Upstream {
            settings,
            counters: UpstreamCounters::default(),
            gate,
            fallback_attempts: AtomicU64::new(0),
        });
        let up = UpstreamIndex::at(self.base + slot);
        hosts.push((origin.host().to_string(), up));
        drop(hosts);
        self.learned_one.notify_waiters();
        tracing::info!(host = %origin.host(), "learned a Copilot API host from a token answer; it is managed from now on");
        self.set_announced(up);
        Announced::Learned(up)
    }

    fn set_announced(&self, up: UpstreamIndex) {
        *self.announced.lock().unwrap_or_else(|p| p.into_inner()) = Some(up);
    }
}

/// What a learned upstream's name starts with (`learned:api.x.githubcopilot.com`): a name no
/// `[[upstream]]` can have (names are letters, digits, `-` and `_`), shown in status and
/// problems.
pub(crate) const NAME_PREFIX: &str = "learned:";

fn learned_name(host: &str) -> String {
    format!("{NAME_PREFIX}{host}")
}

/// The API base URLs a JSON answer announces: a Copilot token answer's `endpoints.api`, and gh's
/// GraphQL answer to `viewer { copilotEndpoints { api } }` (`data.viewer.copilotEndpoints.api`),
/// the query gh sends to learn the host.
pub(crate) fn announced_api(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let api = v
        .pointer("/endpoints/api")
        .or_else(|| v.pointer("/data/viewer/copilotEndpoints/api"))?;
    api.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(i: usize) -> UpstreamIndex {
        UpstreamIndex::at(i)
    }

    fn learn(l: &Learned, api: &str) -> Announced {
        let r = crate::config::Settings::default().resilience;
        l.learn(
            api,
            |o| (o.host() == "api.githubcopilot.com").then_some(ix(0)),
            &r,
        )
    }

    #[test]
    fn only_https_copilot_hosts_are_learned_each_once() {
        let l = Learned::new(3);
        assert_eq!(
            learn(&l, "https://api.githubcopilot.com"),
            Announced::Configured(ix(0))
        );
        assert_eq!(l.announced(), Some(ix(0)));
        assert_eq!(
            learn(&l, "https://api.new-plan.githubcopilot.com/"),
            Announced::Learned(ix(3))
        );
        assert_eq!(
            learn(&l, "https://API.new-plan.githubcopilot.com"),
            Announced::Learned(ix(3))
        );
        assert_eq!(l.announced(), Some(ix(3)));
        assert_eq!(
            l.find("https", "api.new-plan.githubcopilot.com", 443),
            Some(ix(3))
        );
        assert_eq!(l.find("http", "api.new-plan.githubcopilot.com", 443), None);
        assert_eq!(
            l.get(ix(3)).unwrap().settings.name,
            "learned:api.new-plan.githubcopilot.com"
        );
        assert_eq!(
            l.get(ix(3)).unwrap().settings.status_components,
            ["Copilot"]
        );
        for bad in [
            "https://api.example.com",
            "https://githubcopilot.com.example.com",
            "https://evilgithubcopilot.com",
            "http://api.x.githubcopilot.com",
            "https://api.x.githubcopilot.com:8443",
            "https://api.x.githubcopilot.com/path",
            "not a url",
        ] {
            assert!(matches!(learn(&l, bad), Announced::Refused(_)), "{bad}");
        }
        assert_eq!(l.iter().count(), 1);
    }

    #[test]
    fn learning_stops_when_the_spare_slots_are_taken() {
        let l = Learned::new(0);
        for i in 0..SPARE {
            assert_eq!(
                learn(&l, &format!("https://a{i}.githubcopilot.com")),
                Announced::Learned(ix(i))
            );
        }
        assert!(matches!(
            learn(&l, "https://more.githubcopilot.com"),
            Announced::Refused(_)
        ));
        assert_eq!(
            learn(&l, "https://a0.githubcopilot.com"),
            Announced::Learned(ix(0))
        );
        assert!(l.get(ix(SPARE)).is_none());
    }

    #[test]
    fn the_api_host_is_read_from_a_token_answer_and_from_gh_graphql() {
        let token = br#"{"token":"t","expires_at":1,"refresh_in":1500,"endpoints":{"api":"https://api.individual.githubcopilot.com","proxy":"https://proxy.individual.githubcopilot.com"}}"#;
        assert_eq!(
            announced_api(token).as_deref(),
            Some("https://api.individual.githubcopilot.com")
        );
        let gql = br#"{"data":{"viewer":{"copilotEndpoints":{"api":"https://api.business.githubcopilot.com"}}}}"#;
        assert_eq!(
            announced_api(gql).as_deref(),
            Some("https://api.business.githubcopilot.com")
        );
        assert_eq!(announced_api(br#"{"token":"t"}"#), None);
        assert_eq!(announced_api(b"nope"), None);
    }
}
