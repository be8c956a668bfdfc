//! The one message team signals carry: a small, versioned fact about one upstream as one Weir
//! sees it, on the subject `weir.v1.<upstream>.breaker`. It holds the upstream's name, the
//! breaker's state, whether it is degraded, an upstream-wide pause with its end, the GitHub
//! Status indicator, an anonymous install id and a time, and nothing else: no token, account,
//! repository, path or session data exists in this type, so none can be published.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wire version; a fact with another `v` is ignored (a newer Weir may add fields within
/// v1; unknown fields are skipped).
pub const VERSION: u32 = 1;

/// Subjects every Weir subscribes to (two tokens: the upstream's name, the sender's name).
pub const SUBSCRIBE_SUBJECT: &str = "weir.v1.*.breaker.*";

/// The subject `sender`'s fact about `upstream` goes to. Upstream names are validated to
/// letters, digits, `-` and `_` (see `config::load`); sender names are checked by
/// [`valid_sender`]. The last token is the sender's identity on the team: with per-user publish
/// permissions on the NATS server (docs/team.md, "Security model") only that user can publish
/// there, so it is something the sender cannot choose.
pub fn subject(upstream: &str, sender: &str) -> String {
    format!("weir.v1.{upstream}.breaker.{sender}")
}

/// Whether `name` can be a subject token naming a sender: 1–64 letters, digits, `-`, `_`.
pub fn valid_sender(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The upstream and the sender a subject names, when it has the fact subjects' shape.
pub fn parse_subject(subject: &str) -> Option<(&str, &str)> {
    let rest = subject.strip_prefix("weir.v1.")?;
    let (upstream, sender) = rest.split_once(".breaker.")?;
    (!upstream.is_empty() && !upstream.contains('.') && valid_sender(sender))
        .then_some((upstream, sender))
}

/// The upstream part of the subject `link` probes the server's publish permissions on. Probes
/// are unsigned, so even an upstream of that name never takes one for a fact.
pub const PROBE_UPSTREAM: &str = "_probe";

/// The breaker state as published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactState {
    Closed,
    Open,
    HalfOpen,
}

impl From<weir_resilience::State> for FactState {
    fn from(s: weir_resilience::State) -> Self {
        match s {
            // Degraded travels as `degraded: true` next to `closed` (calls still flow).
            weir_resilience::State::Closed | weir_resilience::State::Degraded => FactState::Closed,
            weir_resilience::State::Open => FactState::Open,
            weir_resilience::State::HalfOpen => FactState::HalfOpen,
        }
    }
}

/// Why the publishing Weir's breaker is in this state. Only `local` facts count towards K:
/// a Weir made cautious or opened by its teammates must not count as more evidence (that
/// would let one report echo around the team forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The publisher's own calls.
    Local,
    /// The publisher acted on its teammates' reports.
    Peers,
}

/// What kind of pause the upstream asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseKind {
    RateLimited,
    Overloaded,
}

/// An upstream-wide pause (from `Retry-After` & co) and when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Unix milliseconds.
    pub until_ms: u64,
    pub kind: PauseKind,
}

/// GitHub Status's page-wide indicator (a closed set, so no free text travels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Indicator {
    None,
    Minor,
    Major,
    Critical,
    Maintenance,
}

impl Indicator {
    pub fn parse(s: &str) -> Option<Indicator> {
        Some(match s {
            "none" => Indicator::None,
            "minor" => Indicator::Minor,
            "major" => Indicator::Major,
            "critical" => Indicator::Critical,
            "maintenance" => Indicator::Maintenance,
            _ => return None,
        })
    }
}

/// One Weir's view of one upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub v: u32,
    /// The publisher's anonymous install id (random, 32 hex digits; see `team::peer_id`).
    pub peer: String,
    pub upstream: String,
    pub state: FactState,
    /// The upstream answers, but badly enough that the breaker is wary of it.
    pub degraded: bool,
    pub cause: Cause,
    /// When the breaker entered this state, Unix milliseconds (for `open` with cause `local`:
    /// when this Weir's own calls last confirmed the failure).
    pub since_ms: u64,
    pub pause: Option<Pause>,
    pub github: Option<Indicator>,
    /// When the fact was made, Unix milliseconds.
    pub at_ms: u64,
}

impl Fact {
    /// Whether this fact says the upstream is failing, on the publisher's own evidence.
    pub fn failing_locally(&self) -> bool {
        self.cause == Cause::Local
            && (self.degraded || matches!(self.state, FactState::Open | FactState::HalfOpen))
    }

    /// When the publisher's own calls last confirmed the upstream failing: an opening (first,
    /// or after failed probes) on its own evidence.
    pub fn confirmed_ms(&self) -> Option<u64> {
        (self.cause == Cause::Local && self.state == FactState::Open).then_some(self.since_ms)
    }

    /// The checks a received fact must pass besides its signature: this version, a well-formed
    /// peer id, the subject's upstream, a time near ours (`max_age` old at most; a little
    /// ahead is clock skew).
    pub fn check(
        &self,
        subject_upstream: &str,
        now_ms: u64,
        max_age: Duration,
    ) -> Result<(), &'static str> {
        if self.v != VERSION {
            return Err("another version");
        }
        if self.peer.len() != 32 || !self.peer.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("malformed peer id");
        }
        if self.upstream != subject_upstream {
            return Err("upstream differs from the subject");
        }
        let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        if self.at_ms.saturating_add(max_age_ms) < now_ms {
            return Err("too old");
        }
        if self.at_ms > now_ms.saturating_add(CLOCK_SKEW_MS) {
            return Err("from the future");
        }
        Ok(())
    }
}

/// How far ahead of ours a teammate's clock may be.
pub const CLOCK_SKEW_MS: u64 = 30_000;

/// Unix milliseconds of `t`.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact() -> Fact {
        Fact {
            v: VERSION,
            peer: "0123456789abcdef0123456789abcdef".into(),
            upstream: "copilot-api".into(),
            state: FactState::Open,
            degraded: false,
            cause: Cause::Local,
            since_ms: 999_000,
            pause: None,
            github: Some(Indicator::Major),
            at_ms: 1_000_000,
        }
    }

    #[test]
    fn subjects_round_trip_and_checks_refuse_bad_facts() {
        assert_eq!(
            parse_subject(&subject("copilot-api", "alice")),
            Some(("copilot-api", "alice"))
        );
        assert_eq!(parse_subject("weir.v1.a.b.breaker.alice"), None);
        assert_eq!(parse_subject("weir.v1.a.breaker"), None, "no sender");
        assert_eq!(parse_subject("weir.v1.a.breaker.al.ice"), None);
        assert_eq!(parse_subject("weir.v1.a.breaker.*"), None);
        let f = fact();
        let age = Duration::from_secs(60);
        assert_eq!(f.check("copilot-api", 1_000_000, age), Ok(()));
        assert!(f.check("github-api", 1_000_000, age).is_err());
        assert!(f.check("copilot-api", 1_000_000 + 61_000, age).is_err());
        assert!(f.check("copilot-api", 1_000_000 - 31_000, age).is_err());
        let mut bad = fact();
        bad.peer = "not-hex".into();
        assert!(bad.check("copilot-api", 1_000_000, age).is_err());
        assert!(f.failing_locally());
        let echoed = Fact {
            cause: Cause::Peers,
            ..fact()
        };
        assert!(!echoed.failing_locally(), "an echo is not evidence");
    }
}
