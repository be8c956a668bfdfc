//! Copilot API hosts learned at run time. A Copilot token answer names the account's API host
//! (`endpoints.api`, e.g. `https://api.individual.githubcopilot.com`); VS Code sends its agent
//! calls there. A `*.githubcopilot.com` host named so that no configured upstream covers
//! becomes managed with the same policies as the built-in Copilot hosts: its own gate (breaker,
//! bulkhead, cooldowns), counters and cache keys, TLS interception, no fallback.
//!
//! Only answers Weir can trust teach anything (`crate::pipeline`'s `announce` decides which: a
//! token answer of the `github-api` upstream, gh's exact `copilotEndpoints` query). Even then,
//! an announced origin must first be `https` on port 443 inside `githubcopilot.com` (not an IP
//! address): only then is it matched against the configured upstreams, so an announcement can
//! never point an account at a configured plain-http or foreign upstream. Host names are
//! canonical (lower case, no trailing dot) when kept and when looked up.
//!
//! **Per account.** What was announced is kept per credential (the keyed hash, never the
//! credential) with the time it was said, and read per account: the dashboard's new task, the
//! sessions poller and the sessions API ask for the host announced to the stored token itself
//! or to another credential Weir resolved to the same GitHub account ([`Learned::announced_for`]),
//! never for the host someone else's answer named.
//!
//! **Slots.** Upstreams are indexed by position ([`UpstreamIndex`]) everywhere on the request
//! path, so a learned host takes an index after the configured ones that is never reused: an
//! index handed out stays valid for the life of the engine. At most [`SPARE`] learned hosts are
//! managed at once, and one account's announcements hold at most [`PER_ACCOUNT`] of them. An
//! announcement holds its host for [`HOLD`] after it was last made (token answers come every
//! ~25 min, gh asks on each command); a host no fresh announcement holds stops being managed
//! when another host needs its place (its requests are then tunnelled like any unmanaged
//! host's), and is managed again under its old index when announced again. At most [`ARENA`]
//! distinct hosts are learned in one run. The learned set is not kept across a restart (the
//! next token answer names the host again). The cache and dedupe keys hash the upstream's name
//! (`learned:HOST`), not its index, so a learned host's list and view answers are written to
//! the disk cache like a configured upstream's (tokens never are) and answer for that host
//! again after a restart, once it is learned again.

use super::admission::Gate;
use super::{Upstream, UpstreamIndex};
use crate::config::{is_copilot_host, Origin, ResilienceSettings, UpstreamSettings};
use crate::identity::Identity;
use crate::stats::UpstreamCounters;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How many learned hosts are managed at once (an account has one API host; a few accounts on
/// one machine have a few).
pub const SPARE: usize = 8;
/// How many distinct hosts one run may learn: the indices they take are never reused.
pub const ARENA: usize = 4 * SPARE;
/// How many learned hosts one account's announcements may hold at once (a plan change names a
/// second host; nothing names more).
pub const PER_ACCOUNT: usize = 2;
/// How long an announcement holds its host (and is used for its account) after it was made.
pub const HOLD: Duration = Duration::from_secs(24 * 3600);
/// At most this many credentials' announcements are kept (the oldest goes first).
const MAX_ANNOUNCERS: usize = 1024;

/// The learned hosts and the slots they take.
pub(crate) struct Learned {
    /// Index of the first slot (the number of configured upstreams).
    base: usize,
    slots: Box<[OnceLock<Upstream>]>,
    /// The hosts learned so far and who announced what; also serialises learning.
    table: Mutex<Table>,
    /// Told whenever a slot is set (its replay worker starts then).
    learned_one: tokio::sync::Notify,
}

#[derive(Default)]
struct Table {
    /// In the order learned: `hosts[i]` took slot `i`.
    hosts: Vec<Host>,
    /// Per credential: the upstream (configured or learned) its latest announcement named.
    said: HashMap<Identity, Said>,
}

struct Host {
    /// Canonical: lower case, no trailing dot.
    name: String,
    up: UpstreamIndex,
    /// Managed now (found by [`Learned::find`]).
    active: bool,
}

#[derive(Clone, Copy)]
struct Said {
    up: UpstreamIndex,
    at: Instant,
    /// The GitHub account the credential was resolved to when it said it, if it was.
    account: Option<u64>,
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

/// Who announced: the credential's keyed hash, and its account when Weir has resolved it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announcer {
    pub credential: Identity,
    pub account: Option<u64>,
}

impl Learned {
    pub fn new(base: usize) -> Learned {
        Learned {
            base,
            slots: (0..ARENA).map(|_| OnceLock::new()).collect(),
            table: Mutex::new(Table::default()),
            learned_one: tokio::sync::Notify::new(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Plain data: a panic elsewhere cannot leave it torn.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The indices the slots take, set or not.
    pub fn indices(&self) -> impl Iterator<Item = UpstreamIndex> {
        (self.base..self.base + ARENA).map(UpstreamIndex::at)
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

    /// The learned upstream at index `up` (≥ base), if that slot is set (managed now or not:
    /// a request already routed to it finishes there).
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

    /// The index of the learned upstream managed now for `https://host:port`.
    pub fn find(&self, scheme: &str, host: &str, port: u16) -> Option<UpstreamIndex> {
        if !scheme.eq_ignore_ascii_case("https") || port != 443 {
            return None;
        }
        let host = canonical(host);
        let t = self.table();
        t.hosts
            .iter()
            .find(|h| h.active && h.name == host)
            .map(|h| h.up)
    }

    /// The upstream announced most recently to one of `credentials` (the same token under its
    /// `Bearer` and `token` schemes), else to another credential of `account`, if such an
    /// announcement is still fresh at `now`. Never one made to another account.
    pub fn announced_for(
        &self,
        credentials: &[Identity],
        account: Option<u64>,
        now: Instant,
    ) -> Option<UpstreamIndex> {
        let t = self.table();
        let fresh = |s: &&Said| now.saturating_duration_since(s.at) < HOLD;
        let own = credentials
            .iter()
            .filter_map(|c| t.said.get(c))
            .filter(fresh)
            .max_by_key(|s| s.at);
        if let Some(s) = own {
            return Some(s.up);
        }
        let account = account?;
        t.said
            .values()
            .filter(fresh)
            .filter(|s| s.account == Some(account))
            .max_by_key(|s| s.at)
            .map(|s| s.up)
    }

    /// Learns the API base URL `api` (`https://host[:443][/]`) that `who` was told: managed
    /// from now on unless it is refused. `configured` finds a configured upstream for it.
    pub fn learn(
        &self,
        api: &str,
        who: Announcer,
        configured: impl Fn(&Origin) -> Option<UpstreamIndex>,
        resilience: &ResilienceSettings,
        now: Instant,
    ) -> Announced {
        let origin = match Origin::parse(api.trim()) {
            Ok(o) => o,
            Err(m) => return Announced::Refused(m),
        };
        // First the domain, then the configured upstreams: an announcement can only ever
        // name an https Copilot host, never point an account at any other upstream.
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
        let mut t = self.table();
        t.forget_stale(now);
        if let Some(up) = configured(&origin) {
            t.record(who, up, now);
            return Announced::Configured(up);
        }
        let host = canonical(origin.host());
        if let Some(i) = t.hosts.iter().position(|h| h.name == host) {
            if !t.hosts[i].active {
                if let Err(why) = t.make_room(who, &origin) {
                    return Announced::Refused(why);
                }
                t.hosts[i].active = true;
            }
            let up = t.hosts[i].up;
            t.record(who, up, now);
            return Announced::Learned(up);
        }
        if let Err(why) = t.make_room(who, &origin) {
            return Announced::Refused(why);
        }
        let slot = t.hosts.len();
        let Some(cell) = self.slots.get(slot) else {
            return Announced::Refused(format!(
                "already {ARENA} hosts learned in this run; add `{origin}` as an [[upstream]] to manage it"
            ));
        };
        let settings = UpstreamSettings {
            name: learned_name(&host),
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
            recovery: Default::default(),
        });
        let up = UpstreamIndex::at(self.base + slot);
        t.hosts.push(Host {
            name: host.clone(),
            up,
            active: true,
        });
        t.record(who, up, now);
        drop(t);
        self.learned_one.notify_waiters();
        tracing::info!(%host, "learned a Copilot API host from a trusted answer; it is managed from now on");
        Announced::Learned(up)
    }
}

impl Table {
    /// Drops announcements older than [`HOLD`].
    fn forget_stale(&mut self, now: Instant) {
        self.said
            .retain(|_, s| now.saturating_duration_since(s.at) < HOLD);
    }

    fn record(&mut self, who: Announcer, up: UpstreamIndex, now: Instant) {
        if self.said.len() >= MAX_ANNOUNCERS && !self.said.contains_key(&who.credential) {
            if let Some(oldest) = self.said.iter().min_by_key(|(_, s)| s.at).map(|(c, _)| *c) {
                self.said.remove(&oldest);
            }
        }
        self.said.insert(
            who.credential,
            Said {
                up,
                at: now,
                account: who.account,
            },
        );
    }

    /// Whether a learned host is held by a fresh announcement (the caller dropped stale ones).
    fn held(&self, up: UpstreamIndex) -> bool {
        self.said.values().any(|s| s.up == up)
    }

    /// Room for one more managed learned host, announced by `who`: refused when `who`'s
    /// account already holds [`PER_ACCOUNT`] other learned hosts, or every one of the
    /// [`SPARE`] managed hosts is held (one no announcement holds stops being managed).
    fn make_room(&mut self, who: Announcer, origin: &Origin) -> Result<(), String> {
        let mine = |s: &Said| match (who.account, s.account) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        let mut held_by_me: Vec<UpstreamIndex> = self
            .said
            .iter()
            .filter(|(c, s)| **c == who.credential || mine(s))
            .map(|(_, s)| s.up)
            .filter(|up| self.hosts.iter().any(|h| h.up == *up))
            .collect();
        held_by_me.sort_by_key(|u| u.index());
        held_by_me.dedup();
        // The credential's own earlier announcement is replaced by this one.
        if let Some(own) = self.said.get(&who.credential) {
            let own_up = own.up;
            let others_hold = self
                .said
                .iter()
                .any(|(c, s)| *c != who.credential && mine(s) && s.up == own_up);
            if !others_hold {
                held_by_me.retain(|u| *u != own_up);
            }
        }
        if held_by_me.len() >= PER_ACCOUNT {
            return Err(format!(
                "this account's announcements already hold {PER_ACCOUNT} learned hosts; `{origin}` is not learned"
            ));
        }
        if self.hosts.iter().filter(|h| h.active).count() < SPARE {
            return Ok(());
        }
        let free = self.hosts.iter().position(|h| h.active && !self.held(h.up));
        match free {
            Some(i) => {
                tracing::info!(host = %self.hosts[i].name, "a learned Copilot API host no account announced for a day is no longer managed");
                self.hosts[i].active = false;
                Ok(())
            }
            None => Err(format!(
                "already {SPARE} learned hosts in use; add `{origin}` as an [[upstream]] to manage it"
            )),
        }
    }
}

/// A host name as it is kept and looked up: lower case, without the root's trailing dot.
fn canonical(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// What a learned upstream's name starts with (`learned:api.x.githubcopilot.com`): a name no
/// `[[upstream]]` can have (names are letters, digits, `-` and `_`), shown in status and
/// problems.
pub(crate) const NAME_PREFIX: &str = "learned:";

fn learned_name(host: &str) -> String {
    format!("{NAME_PREFIX}{host}")
}

/// The API base URL a Copilot token answer announces (`endpoints.api`).
pub(crate) fn announced_in_token(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(v.pointer("/endpoints/api")?.as_str()?.to_string())
}

/// The API base URL gh's GraphQL answer to `viewer { copilotEndpoints { api } }` announces
/// (`data.viewer.copilotEndpoints.api`).
pub(crate) fn announced_in_graphql(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(
        v.pointer("/data/viewer/copilotEndpoints/api")?
            .as_str()?
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(i: usize) -> UpstreamIndex {
        UpstreamIndex::at(i)
    }

    fn cred(n: u8) -> Identity {
        Identity::from_hex(&format!("{n:02x}").repeat(32)).unwrap()
    }

    fn who(n: u8, account: Option<u64>) -> Announcer {
        Announcer {
            credential: cred(n),
            account,
        }
    }

    /// `api.githubcopilot.com` and a plain-http loopback upstream are configured (0 and 1).
    fn learn_at(l: &Learned, api: &str, w: Announcer, now: Instant) -> Announced {
        let r = crate::config::Settings::default().resilience;
        l.learn(
            api,
            w,
            |o| match o.host() {
                "api.githubcopilot.com" => Some(ix(0)),
                "127.0.0.1" | "evil.example" => Some(ix(1)),
                _ => None,
            },
            &r,
            now,
        )
    }

    fn learn(l: &Learned, api: &str) -> Announced {
        learn_at(l, api, who(1, Some(1)), Instant::now())
    }

    #[test]
    fn only_https_copilot_hosts_are_learned_each_once() {
        let l = Learned::new(3);
        let now = Instant::now();
        assert_eq!(
            learn(&l, "https://api.githubcopilot.com"),
            Announced::Configured(ix(0))
        );
        assert_eq!(l.announced_for(&[cred(1)], None, now), Some(ix(0)));
        assert_eq!(
            learn(&l, "https://api.new-plan.githubcopilot.com/"),
            Announced::Learned(ix(3))
        );
        assert_eq!(
            learn(&l, "https://API.new-plan.githubcopilot.com"),
            Announced::Learned(ix(3))
        );
        assert_eq!(l.announced_for(&[cred(1)], None, now), Some(ix(3)));
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

    /// Issue 31, item 1: an announcement naming a configured upstream outside
    /// githubcopilot.com (a plain-http one, a foreign one) is refused before the configured
    /// upstreams are looked at, and the account keeps what it had.
    #[test]
    fn the_domain_is_checked_before_any_configured_upstream() {
        let l = Learned::new(2);
        let now = Instant::now();
        assert_eq!(
            learn(&l, "https://api.githubcopilot.com"),
            Announced::Configured(ix(0))
        );
        for api in [
            "http://127.0.0.1",
            "https://evil.example",
            "https://127.0.0.1",
        ] {
            assert!(matches!(learn(&l, api), Announced::Refused(_)), "{api}");
        }
        assert_eq!(l.announced_for(&[cred(1)], Some(1), now), Some(ix(0)));
    }

    /// Issue 31, item 1: a trailing-dot name is kept without the dot, and found with or
    /// without it.
    #[test]
    fn names_are_canonical_when_kept_and_when_looked_up() {
        let l = Learned::new(0);
        assert_eq!(
            learn(&l, "https://API.Dot.githubcopilot.com./"),
            Announced::Learned(ix(0))
        );
        assert_eq!(
            l.get(ix(0)).unwrap().settings.name,
            "learned:api.dot.githubcopilot.com"
        );
        for h in [
            "api.dot.githubcopilot.com",
            "api.dot.githubcopilot.com.",
            "API.DOT.githubcopilot.com.",
        ] {
            assert_eq!(l.find("https", h, 443), Some(ix(0)), "{h}");
        }
        assert_eq!(
            learn(&l, "https://api.dot.githubcopilot.com"),
            Announced::Learned(ix(0))
        );
        assert_eq!(l.iter().count(), 1);
    }

    /// Issue 31, item 1: what one account was told is used for that account only: another
    /// account (or a credential never resolved) does not get it.
    #[test]
    fn announcements_are_per_account() {
        let l = Learned::new(0);
        let now = Instant::now();
        let alice_vscode = who(1, Some(100));
        let bob = who(2, Some(200));
        assert_eq!(
            learn_at(
                &l,
                "https://api.business.githubcopilot.com",
                alice_vscode,
                now
            ),
            Announced::Learned(ix(0))
        );
        assert_eq!(
            learn_at(&l, "https://api.individual.githubcopilot.com", bob, now),
            Announced::Learned(ix(1))
        );
        // Alice's stored token (another credential of her account) gets her host.
        assert_eq!(l.announced_for(&[cred(9)], Some(100), now), Some(ix(0)));
        assert_eq!(l.announced_for(&[cred(2)], Some(200), now), Some(ix(1)));
        // An unresolved credential of nobody gets nothing; its own announcement it does get.
        assert_eq!(l.announced_for(&[cred(9)], None, now), None);
        assert_eq!(l.announced_for(&[cred(1)], None, now), Some(ix(0)));
        // A day later the announcements are stale: nothing is used.
        assert_eq!(l.announced_for(&[cred(1)], Some(100), now + HOLD), None);
    }

    /// Issue 31, item 1: one account holds at most PER_ACCOUNT learned hosts, and the hosts
    /// nobody announced for HOLD give their place to new ones (an index is never reused).
    #[test]
    fn slots_are_held_per_account_and_expire() {
        let l = Learned::new(0);
        let t0 = Instant::now();
        let mallory = |n: u8| who(n, Some(666));
        assert!(matches!(
            learn_at(&l, "https://a0.githubcopilot.com", mallory(1), t0),
            Announced::Learned(_)
        ));
        assert!(matches!(
            learn_at(&l, "https://a1.githubcopilot.com", mallory(2), t0),
            Announced::Learned(_)
        ));
        assert!(matches!(
            learn_at(&l, "https://a2.githubcopilot.com", mallory(3), t0),
            Announced::Refused(_)
        ));
        // A credential's new announcement replaces its old one.
        assert_eq!(
            learn_at(&l, "https://a2.githubcopilot.com", mallory(2), t0),
            Announced::Learned(ix(2))
        );
        // Other accounts fill the managed set.
        for i in 3..SPARE {
            let w = who(10 + i as u8, Some(i as u64));
            assert_eq!(
                learn_at(&l, &format!("https://a{i}.githubcopilot.com"), w, t0),
                Announced::Learned(ix(i))
            );
        }
        // a1 is held by no one (its announcer moved to a2): it makes room for a new host.
        let w = who(50, Some(50));
        assert_eq!(
            learn_at(&l, "https://new.githubcopilot.com", w, t0),
            Announced::Learned(ix(SPARE))
        );
        assert_eq!(l.find("https", "a1.githubcopilot.com", 443), None);
        assert!(l.get(ix(1)).is_some(), "its index stays valid");
        // Now every managed host is held: a new one is refused until a day has passed.
        let w = who(51, Some(51));
        assert!(matches!(
            learn_at(&l, "https://later.githubcopilot.com", w, t0),
            Announced::Refused(_)
        ));
        let later = t0 + HOLD;
        assert_eq!(
            learn_at(&l, "https://later.githubcopilot.com", w, later),
            Announced::Learned(ix(SPARE + 1))
        );
        // a1 announced again comes back under its old index (once there is room).
        assert_eq!(
            learn_at(&l, "https://a1.githubcopilot.com", who(52, Some(52)), later),
            Announced::Learned(ix(1))
        );
        assert_eq!(l.find("https", "a1.githubcopilot.com", 443), Some(ix(1)));
    }

    #[test]
    fn the_api_host_is_read_from_a_token_answer_and_from_gh_graphql() {
        let token = br#"{"token":"t","expires_at":1,"refresh_in":1500,"endpoints":{"api":"https://api.individual.githubcopilot.com","proxy":"https://proxy.individual.githubcopilot.com"}}"#;
        assert_eq!(
            announced_in_token(token).as_deref(),
            Some("https://api.individual.githubcopilot.com")
        );
        let gql = br#"{"data":{"viewer":{"copilotEndpoints":{"api":"https://api.business.githubcopilot.com"}}}}"#;
        assert_eq!(
            announced_in_graphql(gql).as_deref(),
            Some("https://api.business.githubcopilot.com")
        );
        assert_eq!(announced_in_token(gql), None);
        assert_eq!(announced_in_graphql(token), None);
        assert_eq!(announced_in_token(br#"{"token":"t"}"#), None);
        assert_eq!(announced_in_token(b"nope"), None);
    }
}
