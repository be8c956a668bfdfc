//! Configuration in two stages: [`StatusSettings`] (the serde `[status]` table of Weir's
//! config file) is validated into [`StatusConfig`] (typed runtime values).
//!
//! Regional pages: githubstatus.com's "About This Site" links the GitHub Enterprise Cloud
//! data-residency pages au., eu., jp. and us.githubstatus.com. eu. is a Statuspage page
//! (recorded clients read its `/api/v2/*.json`); for au./jp./us. one recorded client reads a
//! different API (`/api/data`), so they may not serve Statuspage v2. If so the watcher
//! reports `Unknown` with a parse/HTTP error, never an outage, and `base_url` can override.

use std::time::Duration;

use serde::Deserialize;

/// The longest interval, jitter, backoff or timeout the watcher takes (a day).
const MAX_SECS: u64 = 24 * 3600;

/// Which GitHub status page to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Region {
    /// github.com: <https://www.githubstatus.com>.
    #[default]
    Public,
    /// GitHub Enterprise Cloud with data residency (ghe.com) in the EU.
    Eu,
    Au,
    Us,
    Jp,
}

impl Region {
    pub fn base_url(self) -> &'static str {
        match self {
            Region::Public => "https://www.githubstatus.com",
            Region::Eu => "https://eu.githubstatus.com",
            Region::Au => "https://au.githubstatus.com",
            Region::Us => "https://us.githubstatus.com",
            Region::Jp => "https://jp.githubstatus.com",
        }
    }

    /// Parses a config value; empty, `public`, `www` and `github` mean the public page.
    pub fn parse(s: &str) -> Option<Region> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "public" | "www" | "github" | "github.com" => Some(Region::Public),
            "eu" => Some(Region::Eu),
            "au" => Some(Region::Au),
            "us" => Some(Region::Us),
            "jp" => Some(Region::Jp),
            _ => None,
        }
    }
}

/// Random extra delay added to each wait so many Weir instances do not poll in lock-step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// No jitter: what tests use.
    None,
    /// Uniformly random in `0..=max`.
    UpTo(Duration),
    /// Always exactly this much (deterministic, for tests of the jitter path).
    Fixed(Duration),
}

impl Jitter {
    pub fn sample(self) -> Duration {
        use rand::Rng;
        match self {
            Jitter::None => Duration::ZERO,
            Jitter::Fixed(d) => d,
            Jitter::UpTo(max) if max.is_zero() => Duration::ZERO,
            Jitter::UpTo(max) => rand::thread_rng().gen_range(Duration::ZERO..=max),
        }
    }
}

/// The components watched when the config names none.
pub const DEFAULT_COMPONENTS: [&str; 4] = [
    "Copilot",
    "Copilot AI Model Providers",
    "API Requests",
    "Git Operations",
];

/// Runtime configuration of the watcher.
#[derive(Debug, Clone)]
pub struct StatusConfig {
    /// Page root without trailing slash, e.g. `https://www.githubstatus.com`.
    pub base_url: String,
    /// Wait between successful checks.
    pub interval: Duration,
    pub jitter: Jitter,
    /// Ceiling of the exponential backoff after failed checks.
    pub max_backoff: Duration,
    /// Deadline for each request; `None` leaves it to the [`crate::Fetch`] client (tests
    /// with paused time use `None`, because a pending timer makes paused time jump while
    /// real loopback I/O is in flight).
    pub request_timeout: Option<Duration>,
    /// Component names to watch, matched case-insensitively.
    pub components: Vec<String>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self {
            base_url: Region::Public.base_url().to_owned(),
            interval: Duration::from_secs(60),
            jitter: Jitter::UpTo(Duration::from_secs(10)),
            max_backoff: Duration::from_secs(600),
            request_timeout: Some(Duration::from_secs(15)),
            components: DEFAULT_COMPONENTS.map(String::from).to_vec(),
        }
    }
}

impl StatusConfig {
    /// Default settings against another page root (a test server, a mirror).
    pub fn for_base_url(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            ..Self::default()
        }
    }

    pub fn summary_url(&self) -> String {
        format!("{}/api/v2/summary.json", self.base_url)
    }

    pub fn unresolved_url(&self) -> String {
        format!("{}/api/v2/incidents/unresolved.json", self.base_url)
    }
}

/// A `[status]` setting that cannot be used; each names its key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("status.region: unknown region {0:?} (expected public, eu, au, us or jp)")]
    Region(String),
    #[error("status.base_url: {0:?} is not an http(s) URL")]
    BaseUrl(String),
    #[error("status.interval_secs: {0} is below the minimum of {MIN_INTERVAL_SECS}")]
    Interval(u64),
    #[error("status.components: the list is empty; name at least one component")]
    NoComponents,
}

/// Polling a public status page faster than this is impolite and pointless.
pub const MIN_INTERVAL_SECS: u64 = 15;

/// The `[status]` table as written in the config file; every key is optional.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StatusSettings {
    /// `public` (default), `eu`, `au`, `us` or `jp`.
    pub region: String,
    /// Overrides `region` when set.
    pub base_url: Option<String>,
    pub interval_secs: u64,
    /// Upper bound of the random extra delay per wait.
    pub jitter_secs: u64,
    pub max_backoff_secs: u64,
    pub timeout_secs: u64,
    pub components: Vec<String>,
}

impl Default for StatusSettings {
    fn default() -> Self {
        Self {
            region: String::new(),
            base_url: None,
            interval_secs: 60,
            jitter_secs: 10,
            max_backoff_secs: 600,
            timeout_secs: 15,
            components: DEFAULT_COMPONENTS.map(String::from).to_vec(),
        }
    }
}

impl StatusSettings {
    pub fn validate(&self) -> Result<StatusConfig, ConfigError> {
        let base_url = match &self.base_url {
            Some(url) => {
                let url = url.trim().trim_end_matches('/');
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(ConfigError::BaseUrl(url.to_owned()));
                }
                url.to_owned()
            }
            None => Region::parse(&self.region)
                .ok_or_else(|| ConfigError::Region(self.region.clone()))?
                .base_url()
                .to_owned(),
        };
        if self.interval_secs < MIN_INTERVAL_SECS {
            return Err(ConfigError::Interval(self.interval_secs));
        }
        let components: Vec<String> = self
            .components
            .iter()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        if components.is_empty() {
            return Err(ConfigError::NoComponents);
        }
        // Seconds are clamped to a day, so `Instant + d` can never overflow.
        let secs = |s: u64| Duration::from_secs(s.min(MAX_SECS));
        let interval = secs(self.interval_secs);
        Ok(StatusConfig {
            base_url,
            interval,
            jitter: Jitter::UpTo(secs(self.jitter_secs)),
            // A ceiling below the interval would make failures poll faster than successes.
            max_backoff: secs(self.max_backoff_secs).max(interval),
            request_timeout: Some(secs(self.timeout_secs.max(1))),
            components,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_watch_the_copilot_components_on_the_public_page() {
        let c = StatusSettings::default().validate().unwrap();
        assert_eq!(c.base_url, "https://www.githubstatus.com");
        assert_eq!(
            c.summary_url(),
            "https://www.githubstatus.com/api/v2/summary.json"
        );
        assert_eq!(
            c.unresolved_url(),
            "https://www.githubstatus.com/api/v2/incidents/unresolved.json"
        );
        assert_eq!(c.components, DEFAULT_COMPONENTS);
        assert_eq!(c.interval, Duration::from_secs(60));
    }

    #[test]
    fn region_and_base_url() {
        let eu: StatusSettings = serde_json::from_str(r#"{"region":"EU"}"#).unwrap();
        assert_eq!(
            eu.validate().unwrap().base_url,
            "https://eu.githubstatus.com"
        );
        let au = StatusSettings {
            region: "au".into(),
            ..Default::default()
        };
        assert_eq!(
            au.validate().unwrap().base_url,
            "https://au.githubstatus.com"
        );
        let us = StatusSettings {
            region: "us".into(),
            ..Default::default()
        };
        assert_eq!(
            us.validate().unwrap().base_url,
            "https://us.githubstatus.com"
        );
        let custom = StatusSettings {
            region: "eu".into(),
            base_url: Some("http://127.0.0.1:9/".into()),
            ..Default::default()
        };
        assert_eq!(custom.validate().unwrap().base_url, "http://127.0.0.1:9");
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = StatusSettings {
            region: "mars".into(),
            ..Default::default()
        };
        assert_eq!(
            bad.validate().unwrap_err(),
            ConfigError::Region("mars".into())
        );
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("status.region"));
        let bad = StatusSettings {
            base_url: Some("ftp://x".into()),
            ..Default::default()
        };
        assert!(matches!(bad.validate(), Err(ConfigError::BaseUrl(_))));
        let bad = StatusSettings {
            interval_secs: 1,
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err(), ConfigError::Interval(1));
        let bad = StatusSettings {
            components: vec![" ".into()],
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err(), ConfigError::NoComponents);
        assert!(serde_json::from_str::<StatusSettings>(r#"{"regoin":"eu"}"#).is_err());
    }

    #[test]
    fn jitter_samples_stay_in_range() {
        assert_eq!(Jitter::None.sample(), Duration::ZERO);
        assert_eq!(
            Jitter::Fixed(Duration::from_secs(3)).sample(),
            Duration::from_secs(3)
        );
        for _ in 0..100 {
            assert!(Jitter::UpTo(Duration::from_secs(5)).sample() <= Duration::from_secs(5));
        }
    }
}
